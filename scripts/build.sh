#!/usr/bin/env bash
# Configures and builds Pagoda into build/ (binaries in build/bin). Installs what is missing.
#   BUILD_DIR=build  BUILD_TYPE=RelWithDebInfo  PAGODA_ENABLE_CUDA=ON  scripts/build.sh [targets]
# PAGODA_SANITIZE=address,undefined (or thread) builds a sanitizer tree, without CUDA
# (scripts/test.sh --sanitize). The ASan tree (address,undefined) is built by clang, with the
# libFuzzer targets (-DPAGODA_FUZZ=ON): scripts/fuzz.sh runs them in that same tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
sanitize="${PAGODA_SANITIZE:-}"

compiler=()
if [ "$sanitize" = address,undefined ]; then
  "$root/scripts/install-deps.sh" build clang
  compiler=(-DCMAKE_CXX_COMPILER=clang++ -DPAGODA_FUZZ=ON)
  # A tree an older checkout configured with GCC starts afresh (CMake keeps a cache's compiler).
  cache="$build_dir/CMakeCache.txt"
  if [ -f "$cache" ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++$' "$cache"; then
    compiler+=(--fresh)
  fi
else
  "$root/scripts/install-deps.sh" build
fi
cmake -S "$root" -B "$build_dir" -G Ninja "${compiler[@]}" \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DPAGODA_ENABLE_CUDA="${PAGODA_ENABLE_CUDA:-ON}" -DPAGODA_SANITIZE="$sanitize" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" ${1:+--target "$@"}
