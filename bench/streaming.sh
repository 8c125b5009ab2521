#!/usr/bin/env bash
# The scheduler's own cost per streamed token, in one run: one scheduler and 1 or 4 synthetic
# workers (pagoda-worker --backend synthetic: no model, a fixed step time, so the workers run at
# GPU step rates on any machine), driven by pagoda-bench at 256 and 1,024 concurrent streams.
# For each case it prints the scheduler's CPU seconds per streamed token (utime + stime from
# /proc/PID/stat over the run, divided by the tokens streamed), tokens/s, the client's and the
# workers' own CPU, and the scheduler's turnaround (a worker's result in -> that worker's next
# plan out; p50/p99 interpolated in pagoda_scheduler_turnaround_seconds's buckets, where the
# scheduler exports it). With BASELINE_SCHEDULER=path the same cases run against that binary
# too (e.g. an older build of pagoda-scheduler; the worker link is the same), and the ratios
# baseline/this are printed last. APIS="grpc http" runs each case through the gRPC API
# (pagoda-bench) and through the OpenAI-compatible HTTP API (--http-listen, SSE streams driven by
# pagoda-http-load: one keep-alive connection per stream), and prints the http/grpc ratio of the
# scheduler's CPU per token.
#
#   bench/streaming.sh
#   BASELINE_SCHEDULER=/path/to/old/pagoda-scheduler bench/streaming.sh
#   WORKERS="1 4" STREAMS="256 1024" STEP_MS=5 OUTPUT_LEN=128 REQUESTS_PER_STREAM=3 \
#     bench/streaming.sh
#   APIS="grpc http" WORKERS=1 bench/streaming.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench}"
workers_list="${WORKERS:-1 4}"
streams_list="${STREAMS:-256 1024}"
step_ms="${STEP_MS:-5}"
input_len="${INPUT_LEN:-32}"
output_len="${OUTPUT_LEN:-128}"
per_stream="${REQUESTS_PER_STREAM:-3}"
baseline="${BASELINE_SCHEDULER:-}"
apis="${APIS:-grpc}"

"$root/scripts/build.sh" pagoda-scheduler pagoda-worker pagoda-make-model pagoda-bench \
  pagoda-http-load

model="${MODEL:-$build_dir/models/streaming-random.gguf}"
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$bin/pagoda-make-model" --output "$model" --layers 1 --dim 64 --heads 4 --kv-heads 2 \
    --ffn-dim 128 --vocab 2048 --context 1024 --seed 1
fi
mkdir -p "$out_dir"
results="$out_dir/streaming.tsv"
: >"$results"
run_dir="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

# CPU seconds (user + system) a live process has used.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# run_case LABEL SCHEDULER WORKERS STREAMS API: one scheduler, WORKERS synthetic workers, one
# pagoda-bench (API grpc) or pagoda-http-load (API http) run; appends one line to $results.
run_case() {
  local label="$1" scheduler="$2" workers="$3" streams="$4" api="$5" dir="$run_dir/$1-$3-$4-$5"
  mkdir -p "$dir"
  local http_flags=()
  [ "$api" = http ] && http_flags=(--http-listen 127.0.0.1:0 --http-port-file "$dir/hport")
  "$scheduler" --listen 127.0.0.1:0 --port-file "$dir/port" --model "$model" \
    --metrics-listen 127.0.0.1:0 --metrics-port-file "$dir/mport" --log-level warning \
    --max-running "$streams" --max-batch-tokens 8192 --max-queued-requests 8192 \
    "${http_flags[@]}" 2>"$dir/scheduler.log" &
  local sched=$!
  pids=("$sched")
  for _ in $(seq 100); do [ -s "$dir/port" ] && [ -s "$dir/mport" ] && break; sleep 0.1; done
  local addr="127.0.0.1:$(cat "$dir/port")" metrics="127.0.0.1:$(cat "$dir/mport")"
  local worker_pids=()
  for w in $(seq "$workers"); do
    "$bin/pagoda-worker" --scheduler "$addr" --model "$model" --backend synthetic \
      --synthetic-step-ms "$step_ms" --kv-pages 65536 --page-size 16 --max-batch-tokens 8192 \
      --log-level error 2>"$dir/worker-$w.log" &
    worker_pids+=($!)
    pids+=($!)
  done
  for _ in $(seq 200); do
    local attached
    attached="$(curl -s "http://$metrics/metrics" | awk '/^pagoda_num_workers /{ print $2 }')"
    [ "${attached%.*}" = "$workers" ] && break
    sleep 0.1
  done
  curl -s "http://$metrics/metrics" >"$dir/before.prom"
  local sched_before workers_before=0
  sched_before="$(cpu_s "$sched")"
  for p in "${worker_pids[@]}"; do workers_before="$(echo "$workers_before + $(cpu_s "$p")" | bc)"; done
  local client=("$bin/pagoda-bench" --server "$addr" --progress=false --warmup-requests 0)
  if [ "$api" = http ]; then
    client=("$bin/pagoda-http-load" --address "127.0.0.1:$(cat "$dir/hport")" --vocab 2048)
  fi
  # The client's own CPU: its rusage as a child of this python.
  python3 - "$dir/client.cpu" "${client[@]}" \
    --concurrency "$streams" --num-requests $((streams * per_stream)) \
    --input-len "$input_len" --output-len "$output_len" --ignore-eos \
    --seed 7 --json "$dir/bench.json" >"$dir/bench.txt" <<'PY' || { cat "$dir"/*.log >&2; exit 1; }
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.exit(rc)
PY
  local sched_after workers_after=0
  sched_after="$(cpu_s "$sched")"
  for p in "${worker_pids[@]}"; do workers_after="$(echo "$workers_after + $(cpu_s "$p")" | bc)"; done
  curl -s "http://$metrics/metrics" >"$dir/after.prom"
  python3 - "$label" "$workers" "$streams" "$dir" "$sched_before" "$sched_after" \
    "$workers_before" "$workers_after" "$api" >>"$results" <<'PY'
import json, re, sys
label, workers, streams, d = sys.argv[1:5]
sched_cpu = float(sys.argv[6]) - float(sys.argv[5])
workers_cpu = float(sys.argv[8]) - float(sys.argv[7])
api = sys.argv[9]
client_cpu = float(open(f"{d}/client.cpu").read())
doc = json.load(open(f"{d}/bench.json"))
# pagoda-http-load writes its numbers at the top level and measures no TTFT.
m = doc["runs"][0]["metrics"] if api == "grpc" else dict(doc, ttft_ms={"p99": float("nan")})
assert m["failed"] == 0, f"{m['failed']} failed requests"

def buckets(path):
  out = {}
  for line in open(path):
    g = re.match(r'pagoda_scheduler_turnaround_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
    if g: out[float("inf") if g[1] == "+Inf" else float(g[1])] = float(g[2])
  return out

def percentile(before, after, p):
  edges = sorted(after)
  counts = [after[e] - before.get(e, 0) for e in edges]
  if not counts or counts[-1] <= 0: return float("nan")
  target, lo, prev = p / 100 * counts[-1], 0.0, 0.0
  for e, c in zip(edges, counts):
    if c >= target:
      if e == float("inf"): return lo
      return lo + (e - lo) * (target - prev) / max(c - prev, 1e-9)
    lo, prev = e, c
  return lo

def counter(path, name):
  for line in open(path):
    if line.startswith(name + " "): return float(line.split()[1])
  return float("nan")

# Plans the workers got and tokens per plan: a worker kept busy gets one plan per step, each
# carrying every one of its sequences.
plans = (counter(f"{d}/after.prom", "pagoda_iteration_tokens_count") -
         counter(f"{d}/before.prom", "pagoda_iteration_tokens_count"))
b, a = buckets(f"{d}/before.prom"), buckets(f"{d}/after.prom")
p50, p99 = percentile(b, a, 50) * 1e6, percentile(b, a, 99) * 1e6
tokens = m["output_tokens"]
print("\t".join(str(x) for x in [label, api, workers, streams, tokens, m["output_throughput"],
      sched_cpu, sched_cpu / tokens * 1e6, client_cpu, workers_cpu, m["duration_s"], p50, p99,
      m["ttft_ms"]["p99"], plans]))
PY
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

for workers in $workers_list; do
  for streams in $streams_list; do
    for api in $apis; do
      run_case this "$bin/pagoda-scheduler" "$workers" "$streams" "$api"
      [ -n "$baseline" ] && run_case baseline "$baseline" "$workers" "$streams" "$api"
    done
  done
done

python3 - "$results" "$step_ms" <<'PY'
import math, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
step = float(sys.argv[2]) / 1000
fmt = lambda v, f="{:.0f}": "n/a" if math.isnan(v) else f.format(v)
print(f"\nstreaming: synthetic workers at {sys.argv[2]} ms steps. ideal tok/s = streams / step "
      "(every sequence advancing every step); plans/s/worker (ideal 1 / step) and tokens/plan "
      "(ideal streams / workers) say whether the workers were kept busy; CPU seconds over the "
      "run; turnaround = a worker's result in -> its next plan out")
hdr = ["scheduler", "api", "workers", "streams", "tokens", "tok/s", "tok/s/ideal", "plans/s/worker",
       "tokens/plan", "sched CPU s", "us/token", "client CPU s", "workers CPU s", "turn p50 us",
       "turn p99 us", "TTFT p99 ms"]
print(" ".join(f"{h:>14}" for h in hdr))
by = {}
for r in rows:
  label, api, w, s = r[0], r[1], int(r[2]), int(r[3])
  tokens, tps, cpu, us, client, wcpu, dur, p50, p99, ttft99, plans = map(float, r[4:])
  by[(label, api, w, s)] = us
  print(" ".join(f"{x:>14}" for x in [
      label, api, w, s, int(tokens), f"{tps:.0f}", f"{tps / (s / step):.2f}",
      fmt(plans / dur / w), fmt(tokens / plans, "{:.1f}") if plans > 0 else "n/a",
      f"{cpu:.2f}", f"{us:.2f}", f"{client:.2f}", f"{wcpu:.2f}", fmt(p50), fmt(p99),
      f"{ttft99:.1f}"]))
for (label, api, w, s), us in sorted(by.items()):
  if label == "this" and ("baseline", api, w, s) in by:
    print(f"scheduler CPU per token, baseline / this, {api}, {w} worker(s), {s} streams: "
          f"{by[('baseline', api, w, s)] / us:.1f}x")
  if label == "this" and api == "http" and ("this", "grpc", w, s) in by:
    print(f"scheduler CPU per token, http / grpc, {w} worker(s), {s} streams: "
          f"{us / by[('this', 'grpc', w, s)]:.2f}x")
PY
