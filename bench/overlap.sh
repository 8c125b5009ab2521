#!/usr/bin/env bash
# Overlap on against off, in one run: the same closed-loop workload served twice by a fresh
# scheduler + CPU worker, once with --max-plans-in-flight 1 (the scheduler plans iteration N+1
# only after the worker's result for N arrives) and once with 2 (it plans and sends N+1 while
# the worker executes N, and decodes feed back the worker's own last sample). Prints output
# tokens/s of both and their ratio.
#
#   bench/overlap.sh
#   CONCURRENCY=32 NUM_REQUESTS=128 OUTPUT_LEN=64 bench/overlap.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench}"
concurrency="${CONCURRENCY:-16}"
num_requests="${NUM_REQUESTS:-96}"
input_len="${INPUT_LEN:-32}"
output_len="${OUTPUT_LEN:-64}"
# shellcheck source=bench/lib/cluster.sh
source "$root/bench/lib/cluster.sh"

"$root/scripts/build.sh" pagoda-scheduler pagoda-worker pagoda-make-model pagoda-bench

# A small model: the shorter the step, the larger the share of it the round trip between
# worker and scheduler costs without overlap (on a GPU a decode step is a few ms).
model="${MODEL:-$build_dir/models/overlap-random.gguf}"
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$bin/pagoda-make-model" --output "$model" --layers 2 --dim 128 --heads 4 --kv-heads 2 \
    --ffn-dim 344 --vocab 2048 --context 1024 --seed 1
fi
cores="$(nproc)"
threads="${WORKER_THREADS:-$(( cores > 1 ? cores - 1 : 1 ))}"
mkdir -p "$out_dir"
trap stop_cluster EXIT

declare -A throughput
for in_flight in 1 2; do
  start_cluster "$model" "$threads" --max-plans-in-flight "$in_flight"
  json="$out_dir/overlap-$in_flight.json"
  if ! "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 60 --progress=false \
    --concurrency "$concurrency" --num-requests "$num_requests" --input-len "$input_len" \
    --output-len "$output_len" --ignore-eos --warmup-requests 4 --seed 7 --json "$json" \
    >"$out_dir/overlap-$in_flight.txt"; then
    echo "overlap.sh: pagoda-bench failed; server logs:" >&2
    print_cluster_logs
    exit 1
  fi
  stop_cluster
  throughput[$in_flight]="$(python3 -c '
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert runs[0]["metrics"]["failed"] == 0, "failed requests"
print(runs[0]["metrics"]["output_throughput"])' "$json")"
done

python3 - "${throughput[1]}" "${throughput[2]}" <<'PY'
import sys
off, on = float(sys.argv[1]), float(sys.argv[2])
print(f"{'overlap':<10}{'plans in flight':>16}{'output tok/s':>14}")
print(f"{'off':<10}{1:>16}{off:>14.1f}")
print(f"{'on':<10}{2:>16}{on:>14.1f}")
print(f"on / off output tokens/s: {on / off:.3f}")
PY
