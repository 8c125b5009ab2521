#!/usr/bin/env bash
# scripts/check-ptxas.sh BUILD_DIR SOURCE: compiles SOURCE once more for sm_90a with ptxas's
# report on (the build tree's own nvcc command, from BUILD_DIR/compile_commands.json), and fails
# when ptxas serializes wgmma instructions, for any of its reasons (each note has its own code:
# C7514 when an accumulator may be touched before its wait, C7511 when registers run short, ...).
# A serialized kernel runs every wgmma synchronously: still correct, so neither the emulator nor
# the gpu tests notice, only the clock (docs/cuda-backend.md).
set -euo pipefail
build=${1:?BUILD_DIR} src=${2:?SOURCE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$build/compile_commands.json" "$src" "$work/kernel.o" >"$work/cmd" <<'PY'
import json, shlex, sys
entries, src, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for e in entries:
    args = shlex.split(e["command"])
    if e["file"] != src or not args[0].endswith("nvcc"):
        continue
    kept, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
        elif a in ("-o", "-MT", "-MF"):  # the build's own outputs and dependency files
            skip = 1
        elif a != "-MD" and not a.startswith("--generate-code"):
            kept.append(a)
    print(shlex.join(kept + ["-arch=sm_90a", "-Xptxas", "-v", "-o", out]))
    break
else:
    sys.exit("check-ptxas: no nvcc command for %s in %s" % (src, sys.argv[1]))
PY
(cd "$build" && eval "$(cat "$work/cmd")") >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
serialized='wgmma[.]mma_async instructions are serialized'
if grep -q "$serialized" "$work/log"; then
  grep "$serialized" "$work/log"
  echo "check-ptxas: ptxas serializes wgmma in $src"
  exit 1
fi
echo "check-ptxas: $(grep -c 'Compiling entry' "$work/log") sm_90a entry points of $src, no wgmma serialized"
