#!/usr/bin/env bash
# The house format (clang-format, Google style, 100 columns: .clang-format) over every C++ and
# CUDA file git tracks; prints the files that differ and exits non-zero when any does.
# Fix them with: git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.inc' | xargs clang-format -i
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (scripts/install-deps.sh test installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
# One clang-format process for every file (a process per file spent most of its time starting):
# with --dry-run -Werror it reports each difference as "FILE:LINE:COL: error: ..." and exits
# non-zero when any file differs.
report="$(clang-format --dry-run -Werror "${files[@]}" 2>&1)" && rc=0 || rc=$?
if [ "$rc" -ne 0 ]; then
  mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<<"$report" | cut -d: -f1 | sort -u)
  if [ ${#bad[@]} -eq 0 ]; then  # not a formatting report: clang-format itself failed
    echo "check-format: clang-format failed (exit $rc):" >&2
    echo "$report" | tail -20 >&2
    exit 1
  fi
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as clang-format would"
