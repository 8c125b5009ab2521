#!/usr/bin/env bash
# Drives Pagoda's OpenAI-compatible HTTP API with the official `openai` npm client: installs the
# pinned package of tests/e2e/openai (scripts/npm-ci-pinned.sh; Node.js too when missing),
# starts pagoda-scheduler (--http-listen, an API key, a small --chat-template, the trained test
# model served as "stories") and one CPU pagoda-worker, and runs tests/e2e/openai/client_test.mjs against them.
# Skips (exit 77) when the test model is absent. Run as the ctest test `openai_client`.
#
#   scripts/check-openai-client.sh [BIN_DIR]      (default build/bin)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}"
models="${PAGODA_TEST_MODELS:-$root/../shared/models}"
model="$models/stories260K-f32.gguf"
golden="$models/golden.json"
if [ ! -f "$model" ] || [ ! -f "$golden" ]; then
  echo "check-openai-client: $model or golden.json not found (set PAGODA_TEST_MODELS); skipped"
  exit 77
fi
client_dir="$root/tests/e2e/openai"
"$root/scripts/npm-ci-pinned.sh" "$client_dir"

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "pagoda-openai-check-key" >"$work/key"
# The test model has no chat template: this one writes BOS and the messages' contents.
cat >"$work/chat.jinja" <<'JINJA'
{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}
JINJA
"$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$work/port" --model "$model" \
  --http-listen 127.0.0.1:0 --http-port-file "$work/http-port" --served-model-name stories \
  --api-key-file "$work/key" --chat-template "$work/chat.jinja" 2>"$work/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
"$bin/pagoda-worker" --scheduler "127.0.0.1:$(cat "$work/port")" --model "$model" \
  2>"$work/worker.log" &
pids+=($!)
http="http://127.0.0.1:$(cat "$work/http-port")"
for _ in $(seq 200); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$http/health")" = 200 ] && break
  sleep 0.1
done
if ! (cd "$client_dir" && node client_test.mjs "$http/v1" "$golden" pagoda-openai-check-key); then
  echo "---- scheduler log" >&2
  cat "$work/scheduler.log" >&2
  echo "---- worker log" >&2
  cat "$work/worker.log" >&2
  exit 1
fi
