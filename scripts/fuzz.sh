#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in the sanitizer tree (clang, ASan + UBSan: what
# scripts/build.sh configures for PAGODA_SANITIZE=address,undefined) and runs each for a bounded
# time on a copy of its seed corpus. Fails when a target crashes, leaks, times out (-timeout) or
# allocates beyond the limits (-malloc_limit_mb, -rss_limit_mb); the failing input is kept under
# $FUZZ_BUILD_DIR/fuzz-work/artifacts/ and the reproduce command is printed.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Environment: FUZZ_BUILD_DIR (default build-asan/, the tree of scripts/test.sh --sanitize),
# FUZZ_TARGETS (default: all six; only the named ones are built), FUZZ_PREBUILT=1 (build
# nothing: the ctest test fuzz_bounded, whose tree scripts/test.sh has built).
# Installs clang and its sanitizer/libFuzzer runtime when missing (scripts/install-deps.sh build
# clang).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
build_dir="${FUZZ_BUILD_DIR:-$root/build-asan}"
targets=(${FUZZ_TARGETS:-gguf_reader tokenizer validation chat_template http_request grammar})
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (a positive integer)" >&2
  exit 2
fi

start=$(date +%s)
build_targets=(pagoda-fuzz-seeds)
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
  for b in "${build_targets[@]}"; do
    if [ ! -x "$build_dir/bin/$b" ]; then
      echo "fuzz: $build_dir/bin/$b is not built (scripts/test.sh --sanitize builds the" \
           "pagoda_fuzz target; or run scripts/fuzz.sh without FUZZ_PREBUILT)" >&2
      exit 1
    fi
  done
else
  PAGODA_SANITIZE=address,undefined BUILD_DIR="$build_dir" BUILD_TYPE=Sanitize \
    "$root/scripts/build.sh" "${build_targets[@]}"
fi
built=$(date +%s)

# The working corpus: the committed seeds plus the generated ones; new inputs land here too.
work="$build_dir/fuzz-work"
rm -rf "$work"
mkdir -p "$work/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t"
  if [ -d "$root/tests/fuzz/corpus/$t" ]; then cp -r "$root/tests/fuzz/corpus/$t/." "$work/corpus/$t/"; fi
done
"$build_dir/bin/pagoda-fuzz-seeds" "$work/corpus"

symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"

failed=()
summary=()
for t in "${targets[@]}"; do
  args=(-max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10
        -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-")
  [ -f "$root/tests/fuzz/$t.dict" ] && args+=(-dict="$root/tests/fuzz/$t.dict")
  log="$work/$t.log"
  echo "fuzzing $t for ${seconds}s (log: $log)"
  rc=0
  "$build_dir/bin/${t}_fuzz" "${args[@]}" "$work/corpus/$t" >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  summary+=("$(printf '%-12s rc=%d  %s' "$t" "$rc" "${done_line:-no DONE line}")")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "---- $t FAILED (exit $rc); last lines of $log:" >&2
    grep -vE '^"|# Uses:' "$log" | tail -40 >&2
    for a in "$work/artifacts/$t-"*; do
      [ -e "$a" ] && echo "reproduce: $build_dir/bin/${t}_fuzz $a" >&2
    done
  fi
done

echo "fuzz summary (${seconds}s per target; build $((built - start))s, total $(($(date +%s) - start))s):"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found failures in: ${failed[*]}" >&2
  exit 1
fi
