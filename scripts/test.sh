#!/usr/bin/env bash
# Builds everything and runs the tests with ctest. Tests that need the trained model read it
# from $PAGODA_TEST_MODELS (default ../shared/models) and skip with a message when it is absent;
# GPU tests (label gpu) skip without a device.
#
#   scripts/test.sh [CTEST_ARGS...]          every tier (what CI runs)
#   scripts/test.sh --quick [CTEST_ARGS...]  the quick tier (ctest -L quick): unit tests and
#                                            static checks; installs no clang, Node or Prometheus
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"

tier=()
if [ "${1:-}" = "--quick" ]; then
  shift
  tier=(-L quick)
else
  "$root/scripts/install-deps.sh" build test
fi
"$root/scripts/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 "${tier[@]}" "$@"
