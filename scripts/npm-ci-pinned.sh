#!/usr/bin/env bash
# Installs the pinned npm packages of DIR (its package-lock.json) into DIR/node_modules, once per
# lock file change, so that later runs need no network. Installs Node.js and npm first when
# missing (scripts/install-deps.sh node) and refuses a Node.js older than 16. One install at a
# time per machine (a lock per DIR): npm ci replaces node_modules while another run may be
# reading it.
#   scripts/npm-ci-pinned.sh deploy/check
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir="$(cd "$1" && pwd)"

"$(dirname "${BASH_SOURCE[0]}")/install-deps.sh" node

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 16 ]; then
  echo "$0: Node.js $(node --version) is too old; $dir needs 16 or newer" >&2
  exit 1
fi

exec 9>"${TMPDIR:-/tmp}/pagoda-npm-$(echo "$dir" | sha256sum | cut -c1-16).lock"
flock 9
stamp="$dir/node_modules/.installed-from-lock"
lock_sum="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$lock_sum" ]; then
  echo "installing the npm packages of $dir (npm ci)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$stamp"
fi
