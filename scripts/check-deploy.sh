#!/usr/bin/env bash
# Checks deploy/ offline: renders the kustomize base and the cpu/gpu overlays with
# `kubectl kustomize` (kustomize v4 or newer; fails, saying so, without it), validates every
# object against the Kubernetes API schemas (unknown fields and wrong types fail), checks
# Pagoda's rules (flags vs ports and probes, grace period vs --drain-timeout, resources, metrics,
# model volume, GPUs), lints the Dockerfiles, and proves with broken fixtures that each of those
# checks rejects what it should. See deploy/check/validate.js.
#
# Installs what it needs when missing, except kubectl: Node.js and npm (scripts/install-deps.sh
# node), then the pinned npm packages of deploy/check/package-lock.json into
# deploy/check/node_modules (once per lock file change; later runs need no network). Run as the
# ctest test labelled `deploy`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check_dir="$root/deploy/check"

"$root/scripts/npm-ci-pinned.sh" "$check_dir"

exec node "$check_dir/validate.js"
