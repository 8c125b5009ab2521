#!/usr/bin/env bash
# Serving benchmark with baselines, in one run: builds Pagoda, starts a scheduler and one CPU
# worker on loopback with a generated random-weight model, and sweeps concurrency with
# pagoda-bench --baselines, which prints output tokens/s of continuous batching against
#   (a) the same requests served one at a time (concurrency 1), and
#   (b) static batching: waves of N requests, each wave waiting for its slowest request; padded
#       (every request of a wave runs to the wave's longest output, as a fixed-shape batch
#       computes it; the padding is not counted) and shrinking (a finished request leaves),
# as continuous/sequential and continuous/static ratios per concurrency level.
#
# Output lengths are long-tailed by default (OUTPUT_DIST=sharegpt: log-normal, mean OUTPUT_LEN,
# clamped to 8x the mean), as chat answers are; OUTPUT_DIST=uniform draws them from
# OUTPUT_LEN +-75%.
#
#   bench/serving.sh
#   LEVELS=1,4,16,64 NUM_REQUESTS=128 INPUT_LEN=64 OUTPUT_LEN=32 bench/serving.sh
#   OUTPUT_DIST=uniform bench/serving.sh
#   MODEL=path/to/model.gguf BENCH_FLAGS="--slo-ttft-ms 500 --slo-tpot-ms 50" bench/serving.sh
#   SCHEDULER_FLAGS="--max-batch-tokens 1024" WORKER_THREADS=2 bench/serving.sh
#
# Results: the tables on stdout, and $OUT_DIR (default build/bench) /serving.json and
# /serving.png (when gnuplot is installed; scripts/install-deps.sh installs gnuplot-nox).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench}"
levels="${LEVELS:-1,4,16,64}"
# 128 requests: two full waves at concurrency 64, so static batching's wait for the slowest
# request of a wave shows at every level.
num_requests="${NUM_REQUESTS:-128}"
input_len="${INPUT_LEN:-64}"
output_len="${OUTPUT_LEN:-32}"
output_dist="${OUTPUT_DIST:-sharegpt}"

# shellcheck source=bench/lib/cluster.sh
source "$root/bench/lib/cluster.sh"

"$root/scripts/build.sh" pagoda-scheduler pagoda-worker pagoda-make-model pagoda-bench

model="$(bench_model)"

# The worker, the scheduler and the client share this machine: leave the worker one core fewer
# than there are, or its forward-pass threads and the scheduler preempt each other and the
# numbers measure the OS scheduler.
cores="$(nproc)"
threads="${WORKER_THREADS:-$(( cores > 1 ? cores - 1 : 1 ))}"

# Extra scheduler flags, e.g. SCHEDULER_FLAGS="--max-plans-in-flight 1" (overlap off).
read -r -a scheduler_flags <<<"${SCHEDULER_FLAGS:-}"
trap stop_cluster EXIT
start_cluster "$model" "$threads" "${scheduler_flags[@]}"

mkdir -p "$out_dir"
plot_flags=()
if command -v gnuplot >/dev/null 2>&1; then
  plot_flags=(--plot "$out_dir/serving.png")
else
  echo "serving.sh: gnuplot not found: no plot (apt-get install gnuplot-nox)" >&2
fi
echo "serving.sh: $model on $addr (scheduler flags: ${SCHEDULER_FLAGS:-none}), one CPU worker" \
  "with $threads thread(s) of $cores cores; concurrency $levels, $num_requests requests per run," \
  "prompts $input_len (uniform), outputs $output_len ($output_dist)" >&2

# pagoda-bench waits for the worker to attach; its --baselines adds the sequential run (the
# concurrency-1 level) and a static-batch run per level, and prints the ratio table last.
# shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
if ! "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 60 \
  --sweep-concurrency "$levels" --baselines --num-requests "$num_requests" \
  --input-len "$input_len" --input-dist uniform --output-len "$output_len" \
  --output-dist "$output_dist" --range-ratio 0.75 --warmup-requests 4 --timeout-s 300 \
  --json "$out_dir/serving.json" "${plot_flags[@]}" ${BENCH_FLAGS:-}; then
  echo "serving.sh: pagoda-bench failed; server logs:" >&2
  print_cluster_logs
  exit 1
fi
echo "serving.sh: results in $out_dir/serving.json${plot_flags[*]:+ and $out_dir/serving.png}" >&2
