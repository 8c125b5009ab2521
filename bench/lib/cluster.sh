# Sourced by the bench scripts: start and stop one scheduler + one CPU worker on loopback.
#   start_cluster MODEL THREADS [scheduler flags...]   # sets $addr, $sched_pid, $worker_pid,
#                                                        # $worker_metrics (HOST:PORT of its
#                                                        # Prometheus endpoint)
#   stop_cluster
#   model="$(bench_model)"   # $MODEL, or the bench's random-weight model (made once)
# Needs $bin (the binaries) set by the caller; logs go to a temporary directory that is
# printed when a process fails to start (WORKER_LOG=FILE keeps the worker's log there instead).

cluster_dir=""

# The demo's shape: big enough that the forward pass dominates, small enough for 2 cores.
# Needs $bin and $build_dir.
bench_model() {
  if [ -n "${MODEL:-}" ]; then echo "$MODEL"; return; fi
  local model="$build_dir/models/bench-random.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$bin/pagoda-make-model" --output "$model" --layers 4 --dim 256 --heads 8 --kv-heads 4 \
      --ffn-dim 688 --vocab 2048 --context 2048 --seed 1 >&2
  fi
  echo "$model"
}
sched_pid=""
worker_pid=""

start_cluster() {
  local model="$1" threads="$2"
  shift 2
  cluster_dir="$(mktemp -d)"
  "$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$cluster_dir/port" \
    --model "$model" --log-level warning "$@" 2>"$cluster_dir/scheduler.log" &
  sched_pid=$!
  for _ in $(seq 100); do [ -s "$cluster_dir/port" ] && break; sleep 0.1; done
  if [ ! -s "$cluster_dir/port" ]; then
    echo "the scheduler did not start:" >&2; cat "$cluster_dir/scheduler.log" >&2; return 1
  fi
  addr="127.0.0.1:$(cat "$cluster_dir/port")"
  "$bin/pagoda-worker" --scheduler "$addr" --model "$model" --backend cpu \
    --threads "$threads" --log-level warning --metrics-listen 127.0.0.1:0 \
    --metrics-port-file "$cluster_dir/worker-metrics-port" 2>"${WORKER_LOG:-$cluster_dir/worker.log}" &
  worker_pid=$!
  for _ in $(seq 100); do [ -s "$cluster_dir/worker-metrics-port" ] && break; sleep 0.1; done
  worker_metrics="127.0.0.1:$(cat "$cluster_dir/worker-metrics-port" 2>/dev/null)"
}

stop_cluster() {
  [ -n "$worker_pid" ] && kill -TERM "$worker_pid" 2>/dev/null || true
  [ -n "$sched_pid" ] && kill -TERM "$sched_pid" 2>/dev/null || true
  wait "$worker_pid" "$sched_pid" 2>/dev/null || true
  worker_pid=""
  sched_pid=""
  [ -n "$cluster_dir" ] && rm -rf "$cluster_dir"
  cluster_dir=""
}

print_cluster_logs() {
  [ -n "$cluster_dir" ] && cat "$cluster_dir/scheduler.log" "$cluster_dir/worker.log" >&2
}
