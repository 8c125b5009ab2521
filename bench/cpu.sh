#!/usr/bin/env bash
# CPU backend benchmark in one call: the machine's limits and the backend against them, then
# end-to-end serving of the issue-16 model shape, all in one run so the numbers compare as
# ratios (other work on the machine moves absolute numbers, less so ratios taken together).
#
#   bench/cpu.sh
#   LLAMA_SERVER=/tmp/llama.cpp/build/bin/llama-server bench/cpu.sh   # llama.cpp beside Pagoda
#   PARTS=kernels bench/cpu.sh      # only the Google Benchmarks (kernels, decode steps)
#   PARTS=serving bench/cpu.sh      # only end to end
#   PARTS=serving MODELS=F16 LEVELS="1 16" bench/cpu.sh   # some models and stream counts
#
# 1. build/bin/cpu_bench (Google Benchmark): FMA peak, byte dot product (VNNI) peak and read
#    bandwidth of this machine (1 and all threads), batch-1 GEMV bytes/s (from memory, and from
#    the caches: the kernel's own rate) and batch-64 GEMM FLOP/s per weight type through the
#    backend's MatMul, paged attention of a decode batch (FLOP/s at contexts 64 and 512), and
#    forward-pass decode steps (batch 1, 16, 64) of the issue model. A GEMV, GEMM or decode step
#    is divided by its limit (read bandwidth, FMA peak) as measured between its own iterations
#    in the same benchmark (a pass of the limit's loop after each GEMV or GEMM, after every 8th
#    decode step, then one untimed step to warm the caches again), so both see the same moment
#    of the machine. Each kernel group runs in its own call beside the standalone limits, and
#    the best of KERNEL_REPS repetitions (3) of each is taken, with its own limit.
# 2. End to end per model (F16, Q8_0, Q4_K_M; dim 768, 12 layers, 12 heads, 4 KV heads, ffn
#    2048, written by pagoda-make-model): a scheduler and one CPU worker on loopback, closed loop
#    at 1, 16 and 64 streams (2 x streams requests, at least 16), 32-token prompts, 64 output
#    tokens, greedy, ignore EOS; then TTFT of a 512-token prompt. With LLAMA_SERVER, the same
#    GGUF and load against llama-server (CPU, -cb -fa, same thread count), driven by a small
#    python3 client over /completion (two warm-up requests, as pagoda-bench sends): both servers
#    are up together and each level runs on Pagoda, then at once on llama.cpp, with their ratio
#    printed, so a ratio is taken within a minute (this VM's speed drifts by tens of percent
#    over several minutes).
# 3. bench/serving.sh at 64 streams: continuous vs static batching (padded and shrinking
#    waves; long-tailed output lengths, see that script).
#
# Results: tables on stdout, JSON under $OUT_DIR (default build/bench/cpu).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench/cpu}"
parts="${PARTS:-kernels,serving,static}"
levels="${LEVELS:-1 16 64}"
models="${MODELS:-F16 Q8_0 Q4_K_M}"
cores="$(nproc)"
threads="${WORKER_THREADS:-$cores}"
mkdir -p "$out_dir" "$build_dir/models"

# shellcheck source=bench/lib/cluster.sh
source "$root/bench/lib/cluster.sh"
"$root/scripts/build.sh" cpu_bench pagoda-scheduler pagoda-worker pagoda-make-model pagoda-bench

cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "cpu.sh: $cpu_model, $cores cores; worker threads $threads; $(date -u +%F)"

if [[ "$parts" == *kernels* ]]; then
  # Each kernel's limit is measured between the kernel's own iterations (cpu_bench's
  # InterleavedLimit), so a ratio's two numbers come from the same seconds: this VM's memory
  # bandwidth moves between 28 and 49 GB/s from one minute to the next, its FMA rate by 15%,
  # and for seconds at a time one of its two cores is gone. Each call repeats its benchmarks
  # KERNEL_REPS times (3); the table takes the kernel's best repetition, with that repetition's
  # limit. The standalone limits (the first line) show the machine's range over the run.
  bench_group() {  # bench_group NAME FILTER
    PAGODA_BENCH_THREADS="$threads" "$bin/cpu_bench" --benchmark_filter="$2" \
      --benchmark_repetitions="${KERNEL_REPS:-3}" \
      --benchmark_out="$out_dir/cpu_bench-$1.json" --benchmark_out_format=json \
      >"$out_dir/cpu_bench-$1.txt" 2>&1
  }
  for t in 0 1 2 3 4 5 6 7; do
    bench_group "gemv-$t" "BM_ReadBandwidth|BM_Gemv/$t/|BM_GemvCached/$t/"
    bench_group "gemm-$t" "BM_FmaPeak|BM_Int8DotPeak|BM_Gemm64/$t/"
  done
  bench_group attention "BM_FmaPeak|BM_Attention"
  for m in 0 1 2; do bench_group "decode-$m" "BM_ReadBandwidth|BM_DecodeStep/$m/"; done
  python3 - "$out_dir" <<'PY'
import glob, json, os, sys
def best_repetitions(runs):  # per benchmark, its repetition with the highest rate
    out = {}
    for b in runs:
        if b.get("run_type", "iteration") != "iteration":
            continue  # the mean / median / stddev rows of --benchmark_repetitions
        rate = next(b[c] for c in ("bytes", "flops", "ops", "tokens") if c in b)
        if b["name"] not in out or rate > out[b["name"]][0]:
            out[b["name"]] = (rate, b)
    return [b for _, b in out.values()]
groups = {os.path.basename(f)[len("cpu_bench-"):-len(".json")]:
          best_repetitions(json.load(open(f))["benchmarks"])
          for f in glob.glob(os.path.join(sys.argv[1], "cpu_bench-*.json"))}
def best(runs, prefix, counter):
    vals = [b[counter] for b in runs if b["name"].startswith(prefix)]
    return max(vals) if vals else float("nan")
def one(runs, prefix):
    return next(b for b in runs if b["name"].startswith(prefix))
def limits(counter, prefix):
    vals = [best(r, prefix, counter) for r in groups.values() if any(b["name"].startswith(prefix) for b in r)]
    return min(vals), max(vals)
fma, int8, bw = limits("flops", "BM_FmaPeak"), limits("ops", "BM_Int8DotPeak"), limits("bytes", "BM_ReadBandwidth")
print(f"machine over this run (best of 1 and all threads and of the repetitions, measured next to each kernel): FMA peak "
      f"{fma[0]/1e9:.1f}-{fma[1]/1e9:.1f} GFLOP/s, byte dot product (vpdpbusd) peak "
      f"{int8[0]/1e9:.1f}-{int8[1]/1e9:.1f} GOP/s, read bandwidth {bw[0]/1e9:.1f}-{bw[1]/1e9:.1f} GB/s")
# Quantized weights multiply bytes (VNNI) where the CPU has it: their GEMM is also shown
# against the byte dot product peak, the ceiling of those products.
print(f"{'type':6} {'GEMV GB/s':>10} {'its BW':>7} {'/ BW':>5} {'cached':>7} "
      f"{'GEMM64 GFLOP/s':>15} {'its peak':>9} {'/ FMA peak':>11} {'/ int8 peak':>12}")
for t in range(8):
    gv, gm = groups[f"gemv-{t}"], groups[f"gemm-{t}"]
    gemv, cached, gemm = one(gv, "BM_Gemv/"), one(gv, "BM_GemvCached/"), one(gm, "BM_Gemm64/")
    # Each kernel against its limit measured between its own iterations (InterleavedLimit).
    b, f, i8 = gemv["limit_bytes"], gemm["limit_flops"], best(gm, "BM_Int8DotPeak", "ops")
    label = gemv["label"]
    int8_ratio = f"{gemm['flops']/i8:12.2f}" if i8 > 0 and label.startswith("Q") else f"{'':12}"
    print(f"{label:6} {gemv['bytes']/1e9:10.1f} {b/1e9:7.1f} {gemv['bytes']/b:5.2f} {cached['bytes']/1e9:7.1f} "
          f"{gemm['flops']/1e9:15.1f} {f/1e9:9.1f} {gemm['flops']/f:11.2f} {int8_ratio}")
att = groups["attention"]
f = best(att, "BM_FmaPeak", "flops")
for b in att:
    if b["name"].startswith("BM_Attention"):
        ctx = int(b["name"].split("/")[1])
        print(f"attention, 16 tokens x 12 heads (4 KV heads) of 64 at context {ctx}: "
              f"{b['flops']/1e9:.1f} GFLOP/s, {b['flops']/f:.2f} of FMA peak")
print(f"{'model':8} {'batch':>5} {'step ms':>8} {'tokens/s':>9} {'weights GB/s':>13} {'its BW':>7} {'/ BW':>5}")
for m in range(3):
    runs = groups[f"decode-{m}"]
    for b in runs:
        if not b["name"].startswith("BM_DecodeStep"):
            continue
        bw_m = b["limit_bytes"]  # read between its own steps
        batch = int(b["name"].split("/")[2])
        wbps = b["weight_bytes"] / (b["real_time"] / 1e3)
        print(f"{b['label']:8} {batch:5} {b['real_time']:8.2f} {b['tokens']:9.1f} {wbps/1e9:13.1f} "
              f"{bw_m/1e9:7.1f} {wbps/bw_m:5.2f}")
PY
fi

# Closed-loop serving of one model at one level through pagoda-bench; prints one table row.
pagoda_level() {
  local name="$1" conc="$2" input="$3" output="$4" requests="$5"
  "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 120 --concurrency "$conc" \
    --num-requests "$requests" --input-len "$input" --output-len "$output" \
    --warmup-requests 2 --timeout-s 600 --progress=false \
    --json "$out_dir/$name.json" >"$out_dir/$name.txt"
  python3 - "$out_dir/$name.json" "$name" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["runs"][-1]["metrics"]
print(f"{sys.argv[2]:28} {m['output_throughput']:10.1f} tok/s   TTFT p50 {m['ttft_ms']['p50']/1e3:7.3f} s"
      f"   failed {m['failed']}")
PY
}

# The same load against llama-server: closed loop of N streams over /completion (streamed, so
# TTFT is the first token's arrival), token-id prompts, greedy, ignore EOS.
llama_level() {
  local name="$1" conc="$2" input="$3" output="$4" requests="$5" port="$6"
  python3 - "$port" "$conc" "$input" "$output" "$requests" "$name" <<'PY'
import json, random, statistics, sys, threading, time, urllib.request
port, conc, inp, out, total, name = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
rng = random.Random(0)
lock = threading.Lock()
left = [total]
ttfts, tokens = [], [0]
def one():
    prompt = [1] + [rng.randrange(3, 2000) for _ in range(inp - 1)]
    body = json.dumps({"prompt": prompt, "n_predict": out, "temperature": 0, "ignore_eos": True,
                       "stream": True, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                 {"Content-Type": "application/json"})
    start, first, n = time.time(), None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data: "):
                continue
            msg = json.loads(line[6:])
            if first is None and msg.get("content", "") != "" or msg.get("tokens"):
                first = first or time.time()
            if msg.get("stop"):
                n = msg.get("tokens_predicted", n)
    with lock:
        ttfts.append((first or time.time()) - start)
        tokens[0] += n
def stream():
    while True:
        with lock:
            if left[0] == 0:
                return
            left[0] -= 1
        one()
for _ in range(2):  # warm-up, one at a time, not counted (as pagoda-bench --warmup-requests 2)
    one()
ttfts.clear()
tokens[0] = 0
t0 = time.time()
ts = [threading.Thread(target=stream) for _ in range(conc)]
for t in ts: t.start()
for t in ts: t.join()
dur = time.time() - t0
print(f"{name:28} {tokens[0]/dur:10.1f} tok/s   TTFT p50 {statistics.median(ttfts):7.3f} s")
PY
}

# Pagoda's and llama.cpp's rows of one level, and their ratio (output tokens/s).
both_levels() {
  local label="$1" level="$2" input="$3" output="$4" requests="$5" port="$6" ours theirs
  ours="$(pagoda_level "pagoda-$label-$level" "${level#c}" "$input" "$output" "$requests")"
  echo "$ours"
  [ -n "$port" ] || return 0
  theirs="$(llama_level "llama.cpp-$label-$level" "${level#c}" "$input" "$output" "$requests" "$port")"
  echo "$theirs"
  awk -v a="$(awk '{print $2}' <<<"$ours")" -v b="$(awk '{print $2}' <<<"$theirs")" \
    -v n="$label $level" 'BEGIN { printf "%-28s %10.2f  Pagoda / llama.cpp output tokens/s\n", n, a / b }'
}

llama_pid=""
stop_servers() {
  stop_cluster
  if [ -n "$llama_pid" ]; then
    kill "$llama_pid" 2>/dev/null || true
    wait "$llama_pid" 2>/dev/null || true
  fi
  llama_pid=""
}

serve_model() {
  local label="$1" dtype="$2" model="$build_dir/models/issue16-$2.gguf" port=""
  [ -f "$model" ] || "$bin/pagoda-make-model" --output "$model" --layers 12 --dim 768 --heads 12 \
    --kv-heads 4 --ffn-dim 2048 --vocab 2048 --context 2048 --seed 1 --dtype "$dtype" >/dev/null
  trap stop_servers EXIT
  start_cluster "$model" "$threads"
  if [ -n "${LLAMA_SERVER:-}" ]; then
    port=$(( 20000 + RANDOM % 20000 ))
    "$LLAMA_SERVER" -m "$model" -t "$threads" -c 16384 -np 64 --kv-unified -cb -fa on \
      --port "$port" --log-disable >"$out_dir/llama-$label.log" 2>&1 &
    llama_pid=$!
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  for conc in $levels; do
    both_levels "$label" "c$conc" 32 64 $(( conc * 2 > 16 ? conc * 2 : 16 )) "$port"
  done
  pagoda_level "pagoda-$label-ttft512" 1 512 1 4
  [ -z "$port" ] || llama_level "llama.cpp-$label-ttft512" 1 512 1 4 "$port"
  # Resident memory: the file's tensors, the KV arena (--kv-cache-mib, 256 by default, zeroed
  # at start so it is resident) and the rest (workspace, gRPC, code).
  local rss_kib file_bytes
  rss_kib="$(awk '/^VmRSS/{print $2}' "/proc/$worker_pid/status")"
  file_bytes="$(stat -c %s "$model")"
  awk -v r="$rss_kib" -v f="$file_bytes" -v l="$label" 'BEGIN {
    printf "%-28s worker RSS %.0f MiB = file %.0f MiB + KV arena 256 MiB + %.0f MiB\n",
      l " memory", r / 1024, f / 1048576, r / 1024 - f / 1048576 - 256 }'
  stop_servers
}

if [[ "$parts" == *serving* ]]; then
  echo "end to end: closed loop, 32-token prompts, 64 output tokens (TTFT rows: 512-token prompt)"
  for m in $models; do serve_model "$m" "${m,,}"; done
fi

if [[ "$parts" == *static* ]]; then
  echo "continuous vs static batching at 64 streams (bench/serving.sh):"
  LEVELS=64 WORKER_THREADS="$threads" OUT_DIR="$out_dir" "$root/bench/serving.sh" 2>/dev/null |
    tail -n 12
fi
