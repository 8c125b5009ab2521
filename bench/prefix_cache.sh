#!/usr/bin/env bash
# Prefix-cache benchmark, in one call and on one cluster: builds Pagoda, starts a scheduler and
# one CPU worker (bench/lib/cluster.sh), runs two workloads with pagoda-bench with the cache on,
# then again with it off for those requests (pagoda-bench --unique-cache-salts: every request
# its own cache_salt, so none reuses another's prompt KV and every prompt token is computed),
# and prints TTFT p50/p99 and output tokens/s for both and their off/on ratios:
#   (a) shared-prefix: NUM_REQUESTS (64) requests, all at once, sharing a SYSTEM_LEN (1,024)-token
#       system prompt, each with USER_LEN (64) tokens of its own;
#   (b) multi-turn: CONVERSATIONS (8) conversations of TURNS (4) turns, each turn resending the
#       whole history (USER_LEN-token user parts, OUTPUT_LEN-token answers), closed loop at
#       concurrency CONVERSATIONS.
#
#   bench/prefix_cache.sh
#   NUM_REQUESTS=32 SYSTEM_LEN=512 MODEL=path/to/model.gguf bench/prefix_cache.sh
#
# Needs jq (to read pagoda-bench's JSON). Results: the table on stdout, and $OUT_DIR (default
# build/bench) /prefix_cache-{shared,multi}-{on,off}.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench}"
num_requests="${NUM_REQUESTS:-64}"
system_len="${SYSTEM_LEN:-1024}"
user_len="${USER_LEN:-64}"
output_len="${OUTPUT_LEN:-32}"
conversations="${CONVERSATIONS:-8}"
turns="${TURNS:-4}"

command -v jq >/dev/null 2>&1 || { echo "prefix_cache.sh: needs jq (apt-get install jq)" >&2; exit 1; }
# shellcheck source=bench/lib/cluster.sh
source "$root/bench/lib/cluster.sh"

"$root/scripts/build.sh" pagoda-scheduler pagoda-worker pagoda-make-model pagoda-bench

model="$(bench_model)"
cores="$(nproc)"
threads="${WORKER_THREADS:-$(( cores > 1 ? cores - 1 : 1 ))}"
mkdir -p "$out_dir"
trap stop_cluster EXIT

run_bench() {  # NAME FLAGS...: one pagoda-bench run into $out_dir/prefix_cache-NAME.json
  local name="$1"
  shift
  if ! "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 60 --progress=false \
    --output-len "$output_len" --warmup-requests 2 --timeout-s 600 \
    --json "$out_dir/prefix_cache-$name.json" "$@" >/dev/null; then
    echo "prefix_cache.sh: pagoda-bench failed ($name); server logs:" >&2
    print_cluster_logs
    exit 1
  fi
}

start_cluster "$model" "$threads"
for mode in on off; do
  flags=()
  [ "$mode" = off ] && flags=(--unique-cache-salts)
  echo "prefix_cache.sh: cache $mode: (a) shared prefix, (b) multi-turn" >&2
  run_bench "shared-$mode" --prompts shared-prefix --shared-prefix-len "$system_len" \
    --input-len $(( system_len + user_len )) --num-requests "$num_requests" \
    --request-rate inf "${flags[@]}"
  run_bench "multi-$mode" --prompts multi-turn --conversations "$conversations" \
    --turns "$turns" --input-len "$user_len" --num-requests $(( conversations * turns )) \
    --concurrency "$conversations" "${flags[@]}"
done
stop_cluster

metric() { jq -r ".runs[0].metrics.$2" "$out_dir/prefix_cache-$1.json"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
printf '\n%-14s %-5s %12s %12s %14s\n' workload cache "TTFT p50 ms" "TTFT p99 ms" "output tok/s"
for w in shared multi; do
  for mode in on off; do
    printf '%-14s %-5s %12.1f %12.1f %14.1f\n' "$w" "$mode" "$(metric "$w-$mode" ttft_ms.p50)" \
      "$(metric "$w-$mode" ttft_ms.p99)" "$(metric "$w-$mode" output_throughput)"
  done
  printf '%-14s %-5s %12s %12s %14s\n' "$w" "off/on" \
    "$(ratio "$(metric "$w-off" ttft_ms.p50)" "$(metric "$w-on" ttft_ms.p50)")x" \
    "$(ratio "$(metric "$w-off" ttft_ms.p99)" "$(metric "$w-on" ttft_ms.p99)")x" \
    "$(ratio "$(metric "$w-on" output_throughput)" "$(metric "$w-off" output_throughput)")x (on/off)"
done
