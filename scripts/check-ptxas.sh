#!/usr/bin/env bash
# scripts/check-ptxas.sh BUILD_DIR SOURCE: fails when ptxas serializes wgmma instructions in
# SOURCE's sm_90a code, for any of its reasons (each note has its own code: C7514 when an
# accumulator may be touched before its wait, C7511 when registers run short, ...). A serialized
# kernel runs every wgmma synchronously: still correct, so neither the emulator nor the gpu tests
# notice, only the clock (docs/cuda-backend.md).
#
# It reads the report of the build's own ptxas run, which the CUDA backend's compiler launcher
# (scripts/nvcc-ptxas-report.sh) keeps beside the object for the sources built with
# --ptxas-options=-v. Where that report is missing or older than the object, it compiles SOURCE
# once more for sm_90a with the report on (the build tree's own nvcc command, from
# BUILD_DIR/compile_commands.json).
set -euo pipefail
build=${1:?BUILD_DIR} src=${2:?SOURCE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Prints the report's path (the build's object plus .ptxas), then the command that compiles SOURCE
# again with the report on.
python3 - "$build/compile_commands.json" "$src" "$work/kernel.o" >"$work/cmd" <<'PY'
import json, os, shlex, sys
entries, src, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for e in entries:
    args = shlex.split(e["command"])
    if e["file"] != src or not args[0].endswith("nvcc"):
        continue
    kept, skip, obj = [], 0, None
    for i, a in enumerate(args):
        if skip:
            skip -= 1
        elif a in ("-o", "-MT", "-MF"):  # the build's own outputs and dependency files
            skip = 1
            if a == "-o":
                obj = os.path.join(e["directory"], args[i + 1])
        elif a != "-MD" and not a.startswith("--generate-code"):
            kept.append(a)
    print(obj + ".ptxas")
    print(shlex.join(kept + ["-arch=sm_90a", "-Xptxas", "-v", "-o", out]))
    break
else:
    sys.exit("check-ptxas: no nvcc command for %s in %s" % (src, sys.argv[1]))
PY
report=$(sed -n 1p "$work/cmd")
entry="Compiling entry function .* for 'sm_90a'"
if [ -f "$report" ] && ! [ "${report%.ptxas}" -nt "$report" ] && grep -q "$entry" "$report"; then
  log=$report from="the build's ptxas report"
else
  (cd "$build" && eval "$(sed -n 2p "$work/cmd")") >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  log=$work/log from="a compile of its own"
fi
serialized='wgmma[.]mma_async instructions are serialized'
if grep -q "$serialized" "$log"; then
  grep "$serialized" "$log"
  echo "check-ptxas: ptxas serializes wgmma in $src"
  exit 1
fi
echo "check-ptxas: $(grep -c "$entry" "$log") sm_90a entry points of $src, no wgmma serialized" \
  "($from)"
