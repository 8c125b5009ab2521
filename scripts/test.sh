#!/usr/bin/env bash
# Builds everything and runs the tests with ctest. Tests that need the trained model read it
# from $PAGODA_TEST_MODELS (default ../shared/models) and skip with a message when it is absent;
# GPU tests (label gpu) skip without a device.
#
#   scripts/test.sh                          every tier (what CI runs): the full tier in build/,
#                                            then the sanitizer tier
#   scripts/test.sh CTEST_ARGS...            the full tier's build, then ctest with these
#                                            arguments (e.g. -L e2e); no sanitizer tier
#   scripts/test.sh --quick [CTEST_ARGS...]  the quick tier (ctest -L quick): unit tests and
#                                            static checks; installs no clang, Node or Prometheus
#   scripts/test.sh --sanitize               the sanitizer tier alone: the quick tier and the
#                                            bounded fuzzing (15 s per target) built by clang with
#                                            ASan + UBSan in build-asan/; the unit tests that run
#                                            threads and five e2e tests with TSan in build-tsan/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc)"

# The sanitizer tier (docs/testing.md). Every finding fails its test: ASan and UBSan abort on the
# first report, TSan stops the process that races (halt_on_error).
sanitize() {
  # The fuzzers share the ASan tree's libraries (scripts/fuzz.sh); fuzz_bounded starts first and
  # runs beside the quick tests.
  PAGODA_SANITIZE=address,undefined BUILD_DIR="$root/build-asan" BUILD_TYPE=Sanitize \
    "$root/scripts/build.sh" pagoda_quick_tests pagoda_fuzz
  ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" --timeout 600 -L 'quick|fuzz'

  PAGODA_SANITIZE=thread BUILD_DIR="$root/build-tsan" BUILD_TYPE=Sanitize \
    "$root/scripts/build.sh" pagoda_thread_tests
  # Only the targets above are built; gtest registers a test once its binary exists, and the
  # placeholders of unbuilt binaries carry no label, so -L selects exactly what was built.
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp" \
    ctest --test-dir "$root/build-tsan" --output-on-failure -j "$jobs" --timeout 900 \
    -L '^quick:(scheduler/(engine|service)|worker/(runner|backend/cpu))$'
  # The e2e tests check the scheduler and worker processes they start (their TSAN_OPTIONS come
  # from PAGODA_CHILD_TSAN_OPTIONS); the test clients themselves do not report. The npm-client
  # checks are left out: they drive the same paths as the e2e binaries at many times the cost
  # (structured_outputs samples 1,130 answers; responses_api runs the chat path's call under
  # another answer format).
  TSAN_OPTIONS="report_bugs=0" \
    PAGODA_CHILD_TSAN_OPTIONS="halt_on_error=1:suppressions=$root/scripts/tsan.supp" \
    ctest --test-dir "$root/build-tsan" --output-on-failure -j "$jobs" --timeout 900 \
    -L '^e2e$' -E '^(openai_client|structured_outputs|responses_api)$'
}

case "${1:-}" in
  --quick)
    shift
    "$root/scripts/build.sh"
    exec ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600 -L quick "$@"
    ;;
  --sanitize)
    "$root/scripts/install-deps.sh" build clang
    sanitize
    ;;
  *)
    "$root/scripts/install-deps.sh" build test
    "$root/scripts/build.sh"
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600 "$@"
    if [ $# -eq 0 ]; then sanitize; fi
    ;;
esac
