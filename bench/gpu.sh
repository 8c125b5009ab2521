#!/usr/bin/env bash
# bench/gpu.sh: builds, checks and times the CUDA backend on a GPU machine in one call, and
# prints a table of ratios last (record it in bench/RESULTS.md with the device and the date).
#
#   bench/gpu.sh                 build into build-gpu (deps from scripts/install-deps.sh), run
#                                the gpu-labelled tests, then the GPU benchmarks
#   bench/gpu.sh --bundle DIR    build here and pack the binaries, the non-system shared
#                                libraries they need and the test models into DIR, and the
#                                same compressed into DIR.tar.xz (the device tool carries 64 MiB)
#   bench/gpu.sh --prebuilt DIR  on a GPU machine without the build dependencies: test and
#                                time a DIR (or DIR.tar.xz) made by --bundle
#
# The CPU backend's kernel tests run there too: lent GPU machines are server CPUs whose kernel
# tables (AMX tiles, say) our development machines may lack, and each test runs every table the
# CPU supports against the portable one.
#
# Results (test logs, benchmark JSON) go to $OUT when set, else to gpu-results/. Each test binary
# is stopped after GPU_TEST_TIMEOUT seconds (900).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RESULTS=${OUT:-$ROOT/gpu-results}
mkdir -p "$RESULTS"
TESTS=(cuda_step_plan_test cublas_library_test layer_kernels_gpu_test attention_gpu_test sampling_gpu_test
       cuda_backend_gpu_test cuda_worker_e2e_test)
CPU_TESTS=(cpu_kernels_test cpu_backend_test quantized_model_test)
TARGETS=("${TESTS[@]}" "${CPU_TESTS[@]}" gpu_bench pagoda-scheduler pagoda-worker pagoda-make-model pagoda-cli)

BUILD=${BUILD_DIR:-$ROOT/build-gpu}  # BUILD_DIR: reuse an existing build tree
build() {
  [[ -f "$BUILD/build.ninja" ]] || cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD" "${TARGETS[@]}"
}

mode=${1:-}
case "$mode" in
  --bundle)
    dest=${2:?--bundle DIR}
    build
    rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib" "$dest/models"
    for t in "${TARGETS[@]}"; do cp "$BUILD/bin/$t" "$dest/bin/"; done
    strip --strip-all "$dest"/bin/*
    # Shared libraries outside glibc, libstdc++ and the CUDA driver/toolkit (present there).
    ldd "$dest"/bin/* | awk '/=> \// {print $3}' | sort -u |
      grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|ld-linux[^/]*)\.so' |
      xargs -r cp -L -t "$dest/lib/"
    models=${PAGODA_TEST_MODELS:-$ROOT/../shared/models}
    cp "$models/stories260K-f32.gguf" "$models/golden.json" "$dest/models/"
    cp -r "$models/quant" "$dest/models/"
    tar -C "$(dirname "$dest")" -cf - "$(basename "$dest")" | xz -T0 -6 >"$dest.tar.xz"
    du -sh "$dest" "$dest.tar.xz"
    exit 0 ;;
  --prebuilt)
    dir=${2:?--prebuilt DIR}
    if [[ $dir == *.tar.xz ]]; then
      unpacked=$(mktemp -d) && tar -C "$unpacked" -xJf "$dir"
      dir=$unpacked/$(basename "$dir" .tar.xz)
    fi
    dir=$(cd "$dir" && pwd)
    BIN=$dir/bin
    export LD_LIBRARY_PATH=$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    export PAGODA_TEST_MODELS=$dir/models PAGODA_BIN_DIR=$BIN ;;
  "")
    build
    BIN=$BUILD/bin ;;
  *) echo "usage: bench/gpu.sh [--bundle DIR | --prebuilt DIR]" >&2; exit 2 ;;
esac

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv | tee "$RESULTS/device.txt"
failed=0
declare -A verdict
run_test() {  # run_test NAME: one test binary, its log in $RESULTS, its verdict and summary lines
  local t=$1
  if timeout "${GPU_TEST_TIMEOUT:-900}" "$BIN/$t" --gtest_brief=1 >"$RESULTS/$t.log" 2>&1; then
    verdict[$t]=passed
  else verdict[$t]=FAILED; failed=1; tail -40 "$RESULTS/$t.log"; fi
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$RESULTS/$t.log" | sed "s/^/$t: /" || true
}
for t in "${TESTS[@]}"; do run_test "$t"; done
grep -m1 'model name' /proc/cpuinfo | tee "$RESULTS/cpu.txt"
grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512[a-z_0-9]*|amx[a-z_0-9]*|avx2|fma' | sort -u | tr '\n' ' ' |
  tee -a "$RESULTS/cpu.txt"; echo
for t in "${CPU_TESTS[@]}"; do run_test "$t"; done

"$BIN/gpu_bench" --benchmark_format=json --benchmark_out="$RESULTS/gpu_bench.json" \
  --benchmark_out_format=json ${GPU_BENCH_FILTER:+--benchmark_filter=$GPU_BENCH_FILTER} \
  >"$RESULTS/gpu_bench.txt" 2>&1 || { failed=1; tail -30 "$RESULTS/gpu_bench.txt"; }

python3 - "$RESULTS/gpu_bench.json" <<'PY'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
except Exception as e:  # the bench crashed: its log was printed above
    print("no benchmark results:", e); sys.exit(0)
print()
print("%-52s %12s %10s" % ("measurement", "value", "goal"))
for b in runs:
    n, c = b["name"], b
    if "kv_over_copy" in c:
        print("%-52s %12.3f %10s" % (n + "  KV read BW / copy BW", c["kv_over_copy"], ">= 0.85"))
    if "paged_over_contiguous" in c:
        print("%-52s %12.3f %10s" % (n + "  paged / contiguous time", c["paged_over_contiguous"], "<= 1.05"))
    if "roofline_tokens_per_s" in c:
        ratio = c["tokens_per_s"] / c["roofline_tokens_per_s"]
        goal = ">= 0.80" if "batch:64" in n else ""
        print("%-52s %12.3f %10s" % (n + "  tok/s / roofline", ratio, goal))
        print("%-52s %12.0f %10s" % (n + "  tokens/s", c["tokens_per_s"], ""))
copy = [b["copy_GBps"] for b in runs if "copy_GBps" in b]
if copy: print("%-52s %12.0f %10s" % ("device-to-device copy GB/s (read + write)", copy[0], ""))
PY
for t in "${TESTS[@]}" "${CPU_TESTS[@]}"; do printf '%-24s %s\n' "$t" "${verdict[$t]}"; done
exit $failed
