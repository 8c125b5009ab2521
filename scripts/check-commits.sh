#!/usr/bin/env bash
# Commit subjects of at most 72 characters (CONTRIBUTING.md), for every commit after the one
# where the rule began; earlier history is left as it was written.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
base=1fa141f
limit=72
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  echo "check-commits: $base is not in this clone's history (shallow?); nothing to check"
  exit 0
fi
long="$(git log --format='%h %s' "$base..HEAD" | awk -v limit="$limit" \
  '{ subject = substr($0, index($0, " ") + 1); if (length(subject) > limit) print length(subject) ": " $0 }')"
if [ -n "$long" ]; then
  echo "check-commits: subjects longer than $limit characters:" >&2
  echo "$long" >&2
  exit 1
fi
echo "check-commits: $(git rev-list --count "$base..HEAD") subjects since $base, none over $limit"
