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
# is stopped after GPU_TEST_TIMEOUT seconds (900), each gpu_bench group after GPU_BENCH_TIMEOUT
# (300). GPU_BENCH_FILTER runs only the matching benchmarks, in one group; GPU_PROFILE=1 adds an
# Nsight Compute summary of the prefill kernel.
#
# The order is the order of need: the tests, the benchmarks and their table, then the
# compute-sanitizer runs, which take what is left of GPU_CALL_BUDGET seconds (480, counted from
# the start; a lent device's call is cut at its own limit). No step starts past the budget or runs
# past it (each timeout is the smaller of its own and what is left), and a step left out says so
# in the verdicts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RESULTS=${OUT:-$ROOT/gpu-results}
mkdir -p "$RESULTS"
TESTS=(cuda_step_plan_test cublas_library_test layer_kernels_gpu_test attention_gpu_test sampling_gpu_test
       quant_kernels_gpu_test cuda_backend_gpu_test cuda_weights_gpu_test cuda_worker_e2e_test)
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

budget_end=$((SECONDS + ${GPU_CALL_BUDGET:-480}))
# within LIMIT: the smaller of LIMIT and the seconds left of the budget, at least 1 (timeout
# reads 0 as no limit at all).
within() {
  local left=$((budget_end - SECONDS))
  ((left < 1)) && left=1
  echo $(($1 < left ? $1 : left))
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv | tee "$RESULTS/device.txt"
failed=0
declare -A verdict
run_test() {  # run_test NAME: one test binary, its log in $RESULTS, its verdict and summary lines
  local t=$1 limit
  limit=$(within "${GPU_TEST_TIMEOUT:-900}")
  if ((limit < 10)); then verdict[$t]="not run (call budget spent)"; failed=1; return; fi
  if timeout "$limit" "$BIN/$t" --gtest_brief=1 >"$RESULTS/$t.log" 2>&1; then
    verdict[$t]=passed
  else verdict[$t]=FAILED; failed=1; tail -40 "$RESULTS/$t.log"; fi
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$RESULTS/$t.log" | sed "s/^/$t: /" || true
}
for t in "${TESTS[@]}"; do run_test "$t"; done
grep -m1 'model name' /proc/cpuinfo | tee "$RESULTS/cpu.txt"
grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512[a-z_0-9]*|amx[a-z_0-9]*|avx2|fma' | sort -u | tr '\n' ' ' |
  tee -a "$RESULTS/cpu.txt"; echo
for t in "${CPU_TESTS[@]}"; do run_test "$t"; done

# PyTorch's SDPA on the prefill shapes, the peer of BM_PrefillAttention (bench/gpu/sdpa_bench.py).
if python3 -c 'import torch' 2>/dev/null; then
  timeout "$(within 120)" python3 "$ROOT/bench/gpu/sdpa_bench.py" >"$RESULTS/sdpa.json" \
    2>"$RESULTS/sdpa.log" ||
    { failed=1; tail -20 "$RESULTS/sdpa.log"; }
else echo "no PyTorch here: SDPA not measured" | tee "$RESULTS/sdpa.log"; fi

# gpu_bench in groups, one process each under GPU_BENCH_TIMEOUT seconds (300), so a kernel that
# faults (a CUDA error poisons its process) or hangs costs its own group's rows, not the call's.
# When the attention tests failed, the prefill rows run the measured mma.sync kernel instead of
# the launcher's pick and leave the wgmma kernel out.
prefill_kernel=auto
if [[ ${verdict[attention_gpu_test]:-} != passed ]]; then
  prefill_kernel=mma_sync
  echo "attention_gpu_test failed: prefill benchmarks run with GPU_BENCH_PREFILL_KERNEL=mma_sync"
fi
prefill_filter='^BM_PrefillAttention/'
[[ $prefill_kernel == auto ]] || prefill_filter='^BM_PrefillAttention/.*/kernel:(auto|mma_sync)/'
if [[ -n ${GPU_BENCH_FILTER:-} ]]; then
  groups=("filtered=$GPU_BENCH_FILTER")
else
  groups=("decode=^BM_Decode" "weights=^BM_Weights" "split_k=^BM_SplitK"
          "prefill_attention=$prefill_filter" "ttft=^BM_Prefill(Ttft|GemmFloor)/"
          "phases=^BM_Phases" "other=-^BM_(Decode|Weights|SplitK|Prefill|Phases)")
fi
rm -f "$RESULTS"/gpu_bench-*.json
for group in "${groups[@]}"; do
  name=${group%%=*} filter=${group#*=}
  # A group whose filter matches nothing (the catch-all, normally) is not run.
  [[ -n $("$BIN/gpu_bench" --benchmark_list_tests --benchmark_filter="$filter" 2>/dev/null) ]] ||
    continue
  limit=$(within "${GPU_BENCH_TIMEOUT:-300}")
  if ((limit < 10)); then
    failed=1; verdict[gpu_bench-$name]="not run (call budget spent)"; continue
  fi
  if ! GPU_BENCH_PREFILL_KERNEL=$prefill_kernel timeout "$limit" \
      "$BIN/gpu_bench" --benchmark_filter="$filter" --benchmark_format=json \
      --benchmark_out="$RESULTS/gpu_bench-$name.json" --benchmark_out_format=json \
      >"$RESULTS/gpu_bench-$name.txt" 2>&1; then
    failed=1; verdict[gpu_bench-$name]=FAILED; tail -30 "$RESULTS/gpu_bench-$name.txt"
  else verdict[gpu_bench-$name]=passed; fi
done

# GPU_PROFILE=1: Nsight Compute's summary sections of the tensor-core prefill kernel at 8k tokens.
if [[ -n ${GPU_PROFILE:-} ]] && command -v ncu >/dev/null; then
  GPU_BENCH_PREFILL_KERNEL=$prefill_kernel timeout "$(within 180)" ncu --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:Prefill -c 1 \
    "$BIN/gpu_bench" --benchmark_filter='BM_PrefillAttention/tokens:8192/kernel:auto' \
    >"$RESULTS/ncu-prefill.txt" 2>&1 || tail -5 "$RESULTS/ncu-prefill.txt"
fi

python3 - "$RESULTS" "$prefill_kernel" <<'PY'
import glob, json, os, sys
runs = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "gpu_bench-*.json"))):
    text = open(path).read()
    try:
        runs += json.loads(text)["benchmarks"]
    except Exception:  # that group crashed or timed out (its log was printed above): keep the
        try:           # benchmarks it finished, each written whole as it ended
            end = text.rindex("\n    }")
            runs += json.loads(text[:end + 6] + "\n  ]\n}")["benchmarks"]
            print("%s cut short: its finished benchmarks kept" % os.path.basename(path))
        except Exception as e:
            print("no results in %s: %s" % (os.path.basename(path), e))
if not runs:
    print("no benchmark results"); sys.exit(0)
try:
    sdpa = json.load(open(os.path.join(sys.argv[1], "sdpa.json")))
except Exception:
    sdpa = {"torch": "none", "runs": []}
print()
if sys.argv[2] != "auto":
    print("prefill kernel forced to %s (attention_gpu_test failed): kernel:auto rows and TTFT "
          "ran it" % sys.argv[2])
print("%-52s %12s %10s" % ("measurement", "value", "goal"))
for b in runs:
    n, c = b["name"], b
    if "kv_over_copy" in c:
        print("%-52s %12.3f %10s" % (n + "  KV read BW / copy BW", c["kv_over_copy"], ">= 0.85"))
    if "paged_over_contiguous" in c:
        print("%-52s %12.3f %10s" % (n + "  paged / contiguous time", c["paged_over_contiguous"], "<= 1.05"))
    if "roofline_tokens_per_s" in c and n.startswith("BM_DecodeStep/"):
        ratio = c["tokens_per_s"] / c["roofline_tokens_per_s"]
        goal = ">= 0.80" if "batch:64" in n else ""
        print("%-52s %12.3f %10s" % (n + "  tok/s / roofline", ratio, goal))
        print("%-52s %12.0f %10s" % (n + "  tokens/s", c["tokens_per_s"], ""))
copy = [b["copy_GBps"] for b in runs if "copy_GBps" in b]
if copy: print("%-52s %12.0f %10s" % ("device-to-device copy GB/s (read + write)", copy[0], ""))

# Prefill: our attention against PyTorch's SDPA (the backend it picks), then time to first
# token against the floor: cuBLAS time of the same GEMMs + 32 layers of PyTorch's attention.
torch_ms = {r["tokens"]: r["median_ms"] for r in sdpa["runs"] if r.get("backend") == "default"}
picked = {r["tokens"]: r["picked"] for r in sdpa["runs"] if r.get("backend") == "default"}
print("\nprefill attention, 32/8 heads, head dim 128, page 16, bf16; PyTorch %s (%s)" %
      (sdpa.get("torch"), ", ".join("%d: %s" % kv for kv in sorted(picked.items())) or "-"))
print("  peer: python3 bench/gpu/sdpa_bench.py = F.scaled_dot_product_attention(q, k, v, "
      "is_causal=True), [1, 32, N, 128] bf16, the backend PyTorch picks, then each forced")
for r in sdpa["runs"]:
    if r.get("backend") != "default" and "tflops" in r:
        print("  torch %-22s %6d tokens %8.1f TFLOP/s" % (r["backend"], r["tokens"], r["tflops"]))
print("%-52s %12s %10s" % ("measurement", "value", "goal"))
for b in runs:
    if b["name"].startswith("BM_PrefillAttention/") and "tflops" in b:
        n = int(b["tokens"])
        print("%-52s %12.1f" % (b["name"] + "  TFLOP/s", b["tflops"]))
        if "/kernel:auto/" in b["name"] and n in torch_ms:
            ratio = torch_ms[n] / b["median_ms"]
            print("%-52s %12.3f %10s" % ("  ours / PyTorch SDPA at %d tokens" % n, ratio,
                                         ">= 0.7" if n >= 8192 else ""))
floor = {(int(b["tokens"]), int(b["chunk"])): b["gemm_ms"]
         for b in runs if "gemm_ms" in b and "chunk" in b}
# The goal is on the chunk the scheduler plans at the defaults (default_chunk: the worker's
# budget on this GPU), the others are for comparison.
for b in runs:
    if "ttft_ms" not in b or not b["name"].startswith("BM_PrefillTtft/"): continue
    key = (int(b["tokens"]), int(b["chunk"]))
    default = min(key[1], key[0]) == min(int(b.get("default_chunk", 0)), key[0])
    kernel = "wgmma" if b.get("prefill_wgmma") else "mma.sync"  # the backend's start-up pick
    print("%-60s %12.1f" % ("TTFT ms, %d tokens, chunk %d%s, %s" %
                            (key + (" (default)" if default else "", kernel)), b["ttft_ms"]))
    if key in floor and key[0] in torch_ms:
        f = floor[key] + 32 * torch_ms[key[0]]
        print("%-52s %12.3f %10s" % ("  TTFT / floor (gemm %.1f + attn 32 x %.2f ms)" %
                                     (floor[key], torch_ms[key[0]]), b["ttft_ms"] / f,
                                     "<= 1.25" if key[0] >= 8192 and default else ""))
# Weights kept quantized on the device (issue 37): decode tokens/s at each batch, against BF16's
# in the same call and against each type's own roofline; device memory; 2k-token prefill.
decode = {}
for b in runs:
    parts = b["name"].split("/")
    if parts[0] in ("BM_WeightsDecode", "BM_SplitKDecode") and "tokens_per_s" in b:
        decode[(parts[1], parts[2], int(parts[3].split(":")[1]))] = b
if decode:
    print("\nweights kept in GGUF blocks (--dtype auto), Llama-3-8B shape, context %d" % 1024)
    print("%-44s %6s %10s %9s %9s %9s %8s" % ("weights/path", "batch", "tokens/s", "/ bf16",
                                              "/ roof", "dev GB", "goal"))
    for (w, path, batch), b in sorted(decode.items(), key=lambda kv: (kv[0][0] != "bf16", kv[0])):
        base = decode.get(("bf16", "auto", batch))
        ratio = b["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        roof = b["tokens_per_s"] / b["roofline_tokens_per_s"]
        goal = ""
        if w == "q4_k_m" and batch == 1: goal = ">=3.0 >=0.7"
        if w == "fp8": goal = ">=1.7 >=0.8" if batch == 1 else ">=0.8"
        if w != "bf16" and batch == 256: goal = (">=1.0 " + goal).strip()
        if w == "bf16" and batch == 1: goal = "roof >=0.80"  # issue 36: batch-1 decode
        if path != "auto": goal = ""  # the goals are on the defaults
        label = w + "/" + path
        timed = path in ("auto", "serial_unfused")  # serial_unfused timed its own choices
        split = ", split<=%d" % b.get("split_k_tokens", 0)  # split-K up to N tokens (0: never)
        if timed and w == "fp8":  # the start-up timing's choices
            label += " (gemv<=%d, lt>=%d%s)" % (b["fp8_gemv_tokens"],
                                                b.get("fp8_cublaslt_tokens", 0), split)
        elif timed and w == "bf16":
            label += " (gemv<=%d)" % b["dense_gemv_tokens"]
        elif timed:  # blocks: decoded ahead of cuBLAS from N tokens (0: never)
            label += " (cublas>=%d%s)" % (b.get("block_cublas_tokens", 0), split)
        print("%-44s %6d %10.0f %9.2f %9.3f %9.1f %8s" % (label, batch, b["tokens_per_s"],
                                                       ratio, roof, b["device_GB"], goal))
prefill = {}
for b in runs:
    parts = b["name"].split("/")
    if parts[0] == "BM_WeightsPrefill" and "ttft_ms" in b:
        prefill[parts[1] + "/" + parts[2]] = 2048 / (b["ttft_ms"] / 1e3)
for k, v in sorted(prefill.items()):
    base = prefill.get("bf16/auto")
    print("%-44s %-17s %10.0f tok/s %9.2f x bf16" % (k, "prefill 2048", v, v / base if base else float("nan")))
# Where the time goes: each part's device time per prompt (prefill) or per step (decode), as ms
# and as a share of the parts' sum, beside the wall time of the same eager passes.
parts = ["embed", "norm", "qkv", "rope_kv", "attention", "output", "gate_up", "silu_mul", "down",
         "head", "sample"]
phased = [b for b in runs if b["name"].startswith("BM_Phases") and "parts_ms" in b]
if phased:
    print("\nparts of a pass (device ms; % of the parts' sum), eager, no launch gaps counted")
    print("%-30s" % "pass" + "".join("%10s" % p for p in parts) + "%10s%10s" % ("sum", "wall"))
    for b in phased:
        name = b["name"].split("/iterations")[0].replace("BM_Phases", "")
        wall = b.get("ttft_ms", b.get("real_time", float("nan")))
        print("%-30s" % name + "".join("%10.3f" % b[p + "_ms"] for p in parts) +
              "%10.3f%10.3f" % (b["parts_ms"], wall))
        print("%-30s" % "" + "".join("%9.1f%%" % (100 * b[p + "_ms"] / b["parts_ms"])
                                     for p in parts))
PY
# The tensor-core prefill kernels, decode attention's fast path (its last block merges in shared
# memory the kernel used before) and the quantized-weight kernels once more under
# compute-sanitizer: memcheck and racecheck.
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SANITIZED=("attention_gpu_test:*TensorCoresGroups*:*TensorCoresLong*:*DecodeFastPath*"
           "quant_kernels_gpu_test:*Bf16*")
for tool in memcheck racecheck; do
  for target in "${SANITIZED[@]}"; do
    t=${target%%:*} key=sanitizer-$tool-${target%%_gpu_test*}
    limit=$(within 180)
    if [[ ! -x $SANITIZER ]]; then
      verdict[$key]="not run (no compute-sanitizer)"
    elif ((limit < 20)); then
      verdict[$key]="not run (call budget spent)"; failed=1
    else
      status=0
      timeout "$limit" "$SANITIZER" --tool "$tool" --error-exitcode 1 "$BIN/$t" \
        --gtest_filter="${target#*:}" --gtest_brief=1 >"$RESULTS/$key.log" 2>&1 || status=$?
      if ((status == 0)); then verdict[$key]=passed
      elif ((status == 124)) && ! grep -qE '^========= (Invalid|Error|Race|Warning)' "$RESULTS/$key.log"; then
        verdict[$key]="cut at ${limit} s, no error reported before"; failed=1
      else verdict[$key]=FAILED; failed=1; tail -30 "$RESULTS/$key.log"; fi
    fi
  done
done

for t in "${TESTS[@]}" "${CPU_TESTS[@]}" sanitizer-{memcheck,racecheck}-{attention,quant_kernels}; do
  printf '%-24s %s\n' "$t" "${verdict[$t]}"
done
for group in "${groups[@]}"; do
  name=gpu_bench-${group%%=*}
  printf '%-24s %s\n' "$name" "${verdict[$name]:-not run (matched nothing)}"
done
exit $failed
