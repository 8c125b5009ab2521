#!/usr/bin/env bash
# Builds Pagoda, starts one scheduler and one CPU worker on loopback, streams a generation to
# the terminal, and stops both processes.
#   scripts/demo.sh                      # a generated model with random weights (gibberish)
#   MODEL=path/to/model.gguf scripts/demo.sh
#   PROMPT="Once upon a time" MAX_TOKENS=64 scripts/demo.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
prompt="${PROMPT:-Once upon a time}"
max_tokens="${MAX_TOKENS:-48}"

"$root/scripts/build.sh" pagoda-scheduler pagoda-worker pagoda-cli pagoda-make-model

model="${MODEL:-}"
if [ -z "$model" ]; then
  model="$build_dir/models/demo-random.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$bin/pagoda-make-model" --output "$model" --layers 4 --dim 256 --heads 8 --kv-heads 4 \
      --ffn-dim 688 --vocab 2048 --context 2048 --seed 1
  fi
  echo "demo: no MODEL given: using $model, a llama model with seeded RANDOM weights" >&2
  echo "demo: (random weights produce gibberish; MODEL=path.gguf serves a trained model)" >&2
fi

run_dir="$(mktemp -d)"
sched_pid=""
worker_pid=""
cleanup() {
  [ -n "$worker_pid" ] && kill -TERM "$worker_pid" 2>/dev/null || true
  [ -n "$sched_pid" ] && kill -TERM "$sched_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

"$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$run_dir/port" --model "$model" \
  2>"$run_dir/scheduler.log" &
sched_pid=$!
for _ in $(seq 100); do [ -f "$run_dir/port" ] && break; sleep 0.1; done
if [ ! -f "$run_dir/port" ]; then
  echo "demo: the scheduler did not start:" >&2; cat "$run_dir/scheduler.log" >&2; exit 1
fi
addr="127.0.0.1:$(cat "$run_dir/port")"
"$bin/pagoda-worker" --scheduler "$addr" --model "$model" --backend cpu \
  2>"$run_dir/worker.log" &
worker_pid=$!
for _ in $(seq 300); do
  "$bin/pagoda-cli" info --server "$addr" 2>/dev/null | grep -q '"attached_workers":[1-9]' && break
  kill -0 "$worker_pid" 2>/dev/null || { echo "demo: the worker exited:" >&2;
    cat "$run_dir/worker.log" >&2; exit 1; }
  sleep 0.1
done
echo "demo: scheduler on $addr, one CPU worker attached; prompt: \"$prompt\"" >&2
printf '%s' "$prompt"
"$bin/pagoda-cli" generate --server "$addr" --prompt "$prompt" --max-tokens "$max_tokens"

kill -TERM "$worker_pid" "$sched_pid"
worker_rc=0; sched_rc=0
wait "$worker_pid" || worker_rc=$?
wait "$sched_pid" || sched_rc=$?
worker_pid=""; sched_pid=""
echo "demo: worker exited $worker_rc, scheduler exited $sched_rc" >&2
[ "$worker_rc" -eq 0 ] && [ "$sched_rc" -eq 0 ]
