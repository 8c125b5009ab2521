#!/usr/bin/env bash
# CPU backend benchmark in one call: the machine's limits and the backend against them, then
# end-to-end serving of the issue-16 model shape, all in one run so the numbers compare as
# ratios (other work on the machine moves absolute numbers, less so ratios taken together).
#
#   bench/cpu.sh
#   LLAMA_SERVER=.../llama-server LLAMA_QUANTIZE=.../llama-quantize bench/cpu.sh
#                                   # llama.cpp beside Pagoda, on llama.cpp's own quantizations
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
#    2048; F16 written by pagoda-make-model, the others by LLAMA_QUANTIZE from it when set): a
#    scheduler and one CPU worker on loopback, closed loop at 1, 16 and 64 streams (2 x streams
#    requests, at least 16), 32-token prompts, 64 output tokens, greedy, ignore EOS; then TTFT
#    of a 512-token prompt. At 64 streams, where the worker's time went, by part of its forward
#    pass, with each weight product's rate against the machine's peaks (breakdown). With
#    LLAMA_SERVER, the same GGUF and load against llama-server (CPU, same thread count) in each
#    configuration its documentation offers for the load (llama_configs: one slot per stream or
#    one unified cache, flash attention on or auto), driven by a small python3 client over
#    /completion (two warm-up requests, as pagoda-bench sends); each configuration runs right
#    after a Pagoda run, its command line printed beside its row, and the ratio is that of the
#    pair with the fastest llama.cpp run (level_rows). The 512-token TTFT row runs on an
#    instance of its own sized for it.
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
# Each run draws prompts of its own (--seed from the run's name): the same prompts again would
# hit Pagoda's prefix cache, while the llama.cpp client turns its prompt cache off.
pagoda_level() {
  local name="$1" conc="$2" input="$3" output="$4" requests="$5"
  "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 120 --concurrency "$conc" \
    --seed "$(cksum <<<"$name" | cut -d' ' -f1)" \
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

# llama-server's configurations for N streams of 32 + 64 tokens, each tried (its documentation
# leaves the choice to the load): one slot per stream with a context of its own (prompt + output
# + 64 cells), or the same cells as one buffer all slots share (--kv-unified); flash attention
# on, or left to llama.cpp (auto). Continuous batching is llama-server's default (-cb).
llama_configs() {
  local ctx=$(( $1 * 160 ))
  for kv in --no-kv-unified --kv-unified; do
    for fa in on auto; do echo "-np $1 -c $ctx $kv -cb -fa $fa"; done
  done
}

llama_pid=""
llama_port=""
stop_llama() {
  if [ -n "$llama_pid" ]; then
    kill "$llama_pid" 2>/dev/null || true
    wait "$llama_pid" 2>/dev/null || true
  fi
  llama_pid=""
}
# start_llama MODEL FLAGS...: llama-server on a free port with $threads threads, up when it
# answers /health; sets $llama_pid, $llama_port and $llama_cmd (its command line, as run).
start_llama() {
  local model="$1"
  shift
  llama_port=$(( 20000 + RANDOM % 20000 ))
  llama_cmd="llama-server -m $(basename "$model") -t $threads $*"
  "$LLAMA_SERVER" -m "$model" -t "$threads" "$@" --port "$llama_port" --log-disable \
    >>"$out_dir/llama.log" 2>&1 &
  llama_pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "llama-server did not start: $llama_cmd (log: $out_dir/llama.log)" >&2
  return 1
}

# One level. Without LLAMA_SERVER, Pagoda's row. With it, pairs: a Pagoda run, then at once one
# llama-server configuration's run (its command line beside its row), for each configuration;
# the ratio is that of the pair whose llama.cpp run was fastest, so its two runs are a minute
# apart at most (this VM's speed drifts by tens of percent over several minutes), and Pagoda
# runs as often as llama.cpp does, so neither side gets more draws of the machine's noise. With
# BREAKDOWN set, Pagoda's first run is followed by where its worker's time went (breakdown).
level_rows() {
  local label="$1" model="$2" conc="$3" ours theirs best_rate=0 best_cmd="" best_ours=""
  local requests=$(( conc * 2 > 16 ? conc * 2 : 16 )) breakdown="${BREAKDOWN:-}" flags
  # pagoda_run N: one Pagoda run, with the breakdown after the first one asked for.
  pagoda_run() {
    local before after t0 t1
    before="$(curl -sf "http://$worker_metrics/metrics" || true)"
    t0=$(date +%s.%N)
    ours="$(pagoda_level "pagoda-$label-c$conc-$1" "$conc" 32 64 "$requests")"
    t1=$(date +%s.%N)
    after="$(curl -sf "http://$worker_metrics/metrics" || true)"
    echo "$ours"
    if [ -n "$breakdown" ]; then
      breakdown "$label c$conc" "$t0" "$t1" "$before" "$after" "$label"
      breakdown=""
    fi
  }
  if [ -z "${LLAMA_SERVER:-}" ]; then
    pagoda_run 1
    return 0
  fi
  local i=0
  while read -r flags; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    start_llama "$model" $flags || continue
    pagoda_run "$i"
    theirs="$(llama_level "llama.cpp-$label-c$conc" "$conc" 32 64 "$requests" "$llama_port")"
    stop_llama
    printf '%s   [%s]\n' "$theirs" "$llama_cmd"
    local rate
    rate="$(awk '{print $2}' <<<"$theirs")"
    if awk -v a="$rate" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then
      best_rate="$rate"
      best_cmd="$llama_cmd"
      best_ours="$(awk '{print $2}' <<<"$ours")"
    fi
  done < <(llama_configs "$conc")
  awk -v a="$best_ours" -v b="$best_rate" -v n="$label c$conc" -v c="$best_cmd" 'BEGIN {
    printf "%-28s %10.2f  Pagoda / llama.cpp output tokens/s (best llama.cpp: %s)\n", n, a / b, c }'
}

# Where Pagoda's worker spent the seconds of one level (its Prometheus counters before and after):
# each part of the forward pass and sampling (pagoda_worker_forward_part_*), the rest of its
# steps (plan decoding, result encoding), and the time it waited for the next plan (the
# scheduler, the link, and the load generator on the same cores). Each weight product and
# attention get their achieved rate against the FMA peak (and, for quantized weights, the byte
# dot product peak) that cpu_bench measures right after, on the same threads.
breakdown() {
  local name="$1" t0="$2" t1="$3"
  PAGODA_BENCH_THREADS="$threads" "$bin/cpu_bench" --benchmark_filter='BM_FmaPeak|BM_Int8DotPeak' \
    --benchmark_out="$out_dir/peaks.json" --benchmark_out_format=json >/dev/null 2>&1 || true
  python3 - "$name" "$t0" "$t1" "$out_dir/peaks.json" "$4" "$5" "$6" <<'PY'
import json, re, sys
name, t0, t1, peaks_file, before, after, label = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:]
def parse(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(pagoda_worker_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out
a, b = parse(before), parse(after)
if not b:
    print(f"{name}: no worker metrics scraped, no breakdown"); sys.exit(0)
d = lambda k: b.get(k, 0) - a.get(k, 0)
wall = t1 - t0
step = d("pagoda_worker_step_seconds_sum")
parts = ["qkv_products", "output_product", "gate_up_products", "down_product", "logits_product",
         "attention", "elementwise", "sampling"]
sec = {p: d(f'pagoda_worker_forward_part_seconds_total{{part="{p}"}}') for p in parts}
flops = {p: d(f'pagoda_worker_forward_part_flops_total{{part="{p}"}}') for p in parts}
try:
    runs = json.load(open(peaks_file))["benchmarks"]
    fma = max(r["flops"] for r in runs if r["name"].startswith("BM_FmaPeak"))
    int8 = max((r["ops"] for r in runs if r["name"].startswith("BM_Int8DotPeak")), default=0)
except Exception:
    fma, int8 = float("nan"), 0
if not label.startswith("Q"):
    int8 = 0  # float weights multiply on the FMA units only
print(f"{name}: where the worker's {wall:.1f} s went ({d('pagoda_worker_step_seconds_count'):.0f} steps, "
      f"{d('pagoda_worker_step_tokens_sum'):.0f} tokens; FMA peak {fma/1e9:.0f} GFLOP/s"
      + (f", byte dot product peak {int8/1e9:.0f} GOP/s" if int8 else "") + ", measured right after)")
print(f"  {'part':22} {'share':>6} {'seconds':>8} {'GFLOP/s':>8} {'/ FMA peak':>11}" + (f" {'/ int8 peak':>12}" if int8 else ""))
def row(label, s, f=0):
    rate = f / s if s > 0 else 0
    extra = ""
    if f and int8:
        extra = f" {rate / int8:12.2f}"
    print(f"  {label:22} {s / wall:6.1%} {s:8.2f} " + (f"{rate/1e9:8.1f} {rate/fma:11.2f}{extra}" if f else ""))
for p in parts:
    row(p, sec[p], flops[p])
row("in-step bookkeeping", max(0.0, step - sum(sec.values())))
row("waiting for plans", max(0.0, wall - step))
products = sum(sec[p] for p in parts if "product" in p)
pf = sum(flops[p] for p in parts if "product" in p)
print(f"  weight products together: {products / wall:.1%} of the time at {pf / products / 1e9 if products else 0:.1f} GFLOP/s "
      f"({pf / products / fma if products else 0:.2f} of FMA peak)")
PY
}

serve_model() {
  local label="$1" model="$build_dir/models/issue16-$2.gguf"
  make_model "$label" "$model"
  model="$served_model"
  trap 'stop_cluster; stop_llama' EXIT
  start_cluster "$model" "$threads"
  for conc in $levels; do
    if [[ " ${BREAKDOWN_LEVELS:-64} " == *" $conc "* ]]; then
      BREAKDOWN=1 level_rows "$label" "$model" "$conc"
    else
      level_rows "$label" "$model" "$conc"
    fi
  done
  pagoda_level "pagoda-$label-ttft512" 1 512 1 4
  if [ -n "${LLAMA_SERVER:-}" ]; then
    # Its own instance, sized for one 512-token prompt; flash attention on and auto.
    for fa in on auto; do
      start_llama "$model" -np 1 -c 1024 -cb -fa "$fa" || continue
      printf '%s   [%s]\n' "$(llama_level "llama.cpp-$label-ttft512" 1 512 1 4 "$llama_port")" \
        "$llama_cmd"
      stop_llama
    done
  fi
  # Resident memory: the file's tensors, the KV arena (--kv-cache-mib, 256 by default, zeroed
  # at start so it is resident) and the rest (workspace, gRPC, code).
  local rss_kib file_bytes
  rss_kib="$(awk '/^VmRSS/{print $2}' "/proc/$worker_pid/status")"
  file_bytes="$(stat -c %s "$model")"
  awk -v r="$rss_kib" -v f="$file_bytes" -v l="$label" 'BEGIN {
    printf "%-28s worker RSS %.0f MiB = file %.0f MiB + KV arena 256 MiB + %.0f MiB\n",
      l " memory", r / 1024, f / 1048576, r / 1024 - f / 1048576 - 256 }'
  stop_cluster
}

# The issue-16 shape, F16 from pagoda-make-model; Q8_0 and Q4_K_M quantized from that F16 file
# by llama.cpp's own llama-quantize when LLAMA_QUANTIZE names it (so the comparison is on
# llama.cpp's quantization), else written by pagoda-make-model. Prints where each came from.
make_model() {
  local label="$1" model="$2" f16="$build_dir/models/issue16-f16.gguf"
  local shape=(--layers 12 --dim 768 --heads 12 --kv-heads 4 --ffn-dim 2048 --vocab 2048
               --context 2048 --seed 1)
  if [ "$label" = F16 ] || [ -n "${LLAMA_QUANTIZE:-}" ]; then
    [ -f "$f16" ] || "$bin/pagoda-make-model" --output "$f16" "${shape[@]}" --dtype f16 >/dev/null
  fi
  if [ "$label" != F16 ] && [ -n "${LLAMA_QUANTIZE:-}" ]; then
    model="${model%.gguf}-llama-quantize.gguf"
    [ -f "$model" ] || "$LLAMA_QUANTIZE" "$f16" "$model" "$label" >"$out_dir/quantize-$label.log" 2>&1
    echo "model $label: llama-quantize issue16-f16.gguf $(basename "$model") $label"
  else
    [ -f "$model" ] || "$bin/pagoda-make-model" --output "$model" "${shape[@]}" \
      --dtype "${label,,}" >/dev/null
    echo "model $label: pagoda-make-model ${shape[*]} --dtype ${label,,}"
  fi
  served_model="$model"
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
