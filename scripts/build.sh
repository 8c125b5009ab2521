#!/usr/bin/env bash
# Configures and builds Pagoda into build/ (binaries in build/bin). Installs what is missing.
#   BUILD_DIR=build  BUILD_TYPE=RelWithDebInfo  PAGODA_ENABLE_CUDA=ON  scripts/build.sh [targets]
# PAGODA_SANITIZE=address,undefined (or thread) builds a sanitizer tree, without CUDA
# (scripts/test.sh --sanitize).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"

"$root/scripts/install-deps.sh" build
cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DPAGODA_ENABLE_CUDA="${PAGODA_ENABLE_CUDA:-ON}" -DPAGODA_SANITIZE="${PAGODA_SANITIZE:-}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" ${1:+--target "$@"}
