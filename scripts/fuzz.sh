#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in their own build directory and runs each
# for a bounded time on a copy of its seed corpus. Fails when a target crashes, leaks, times out
# (-timeout) or allocates beyond the limits (-malloc_limit_mb, -rss_limit_mb); the failing input
# is kept under $FUZZ_BUILD_DIR/fuzz-work/artifacts/ and the reproduce command is printed.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz/), FUZZ_TARGETS (default: all six; only the
# named ones are built).
# Installs clang and its sanitizer/libFuzzer runtime when missing (scripts/install-deps.sh build
# clang).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
build_dir="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
targets=(${FUZZ_TARGETS:-gguf_reader tokenizer validation chat_template http_request grammar})
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (a positive integer)" >&2
  exit 2
fi

"$root/scripts/install-deps.sh" build clang
start=$(date +%s)

# Build type Fuzz: -O1 with line tables only, as libFuzzer's sanitizer builds usually are; it
# compiles in about 85% of -O2 -g's time, and the reports still name every frame's line.
CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS_FUZZ="-O1 -gline-tables-only -DNDEBUG" \
  -DPAGODA_FUZZ=ON -DPAGODA_ENABLE_CUDA=OFF -DPAGODA_BUILD_TESTS=OFF >/dev/null
build_targets=(pagoda-fuzz-seeds)
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
cmake --build "$build_dir" --target "${build_targets[@]}" -j "$(nproc)"
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
