#!/usr/bin/env bash
# Checks deploy/ offline: renders the kustomize base and the cpu/gpu overlays, validates every
# object against the Kubernetes API schemas (unknown fields and wrong types fail), checks
# Pagoda's rules (flags vs ports and probes, grace period vs --drain-timeout, resources, metrics,
# model volume, GPUs), lints the Dockerfiles, and proves with broken fixtures that each of those
# checks rejects what it should. See deploy/check/validate.js.
#
# Installs what it needs when missing: Node.js and npm (Debian packages), then the pinned npm
# packages of deploy/check/package-lock.json into deploy/check/node_modules (once per lock file
# change; later runs need no network). Run as the ctest test labelled `deploy`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check_dir="$root/deploy/check"

"$root/scripts/install-deps.sh" node

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 16 ]; then
  echo "check-deploy: Node.js $(node --version) is too old; deploy/check needs 16 or newer" >&2
  exit 1
fi

# One run at a time per machine (two build trees may run this test at once): npm ci replaces
# node_modules while the other run may be reading it.
exec 9>"${TMPDIR:-/tmp}/pagoda-check-deploy.lock"
flock 9

# npm ci only when node_modules was not installed from this exact lock file.
stamp="$check_dir/node_modules/.installed-from-lock"
lock_sum="$(sha256sum "$check_dir/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$lock_sum" ]; then
  echo "check-deploy: installing deploy/check's npm packages (npm ci)" >&2
  (cd "$check_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$stamp"
fi

exec node "$check_dir/validate.js"
