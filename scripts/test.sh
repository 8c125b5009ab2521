#!/usr/bin/env bash
# Builds everything and runs every test with ctest. Tests that need the trained model read it
# from $PAGODA_TEST_MODELS (default ../shared/models) and skip with a message when it is absent;
# GPU tests (label gpu) skip without a device.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
