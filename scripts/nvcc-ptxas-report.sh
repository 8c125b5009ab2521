#!/usr/bin/env bash
# scripts/nvcc-ptxas-report.sh NVCC ARGS...: the CUDA backend's compiler launcher. Runs the nvcc
# command and keeps everything it wrote to stderr beside its object, as OBJECT.ptxas, so that
# scripts/check-ptxas.sh reads the report of the build's own ptxas run (the sources that carry
# --ptxas-options=-v) instead of compiling the file a second time. The build log shows what nvcc
# printed less ptxas's per-function report lines; anything else (warnings, errors, ptxas notes
# such as a serialized wgmma) passes through. The exit status is nvcc's.
set -uo pipefail
obj="" prev=""
for arg in "$@"; do
  if [ "$prev" = -o ]; then obj=$arg; fi
  prev=$arg
done
if [ -z "$obj" ]; then exec "$@"; fi
"$@" 2>"$obj.ptxas.tmp"
status=$?
grep -vE "^ptxas info +: (Compiling entry|Function properties|Used [0-9]+ registers|Compile time|[0-9]+ bytes gmem)|^ +[0-9]+ bytes stack frame" \
  "$obj.ptxas.tmp" >&2
mv -f "$obj.ptxas.tmp" "$obj.ptxas"
touch "$obj.ptxas"  # newer than the object, which nvcc wrote after ptxas's last line
exit "$status"
