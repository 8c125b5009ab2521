#!/usr/bin/env bash
# Prints, one per line, the distribution packages that provide the shared libraries the given
# binaries load, so that a runtime image of the same distribution can install exactly those.
# Used by the Dockerfiles' build stages: package names differ between Debian bookworm and the
# Ubuntu 24.04 of NVIDIA's CUDA images (libgrpc++1.51 vs libgrpc++1.51t64), so they are looked
# up rather than written down.
#   deploy/docker/runtime-packages.sh build/bin/pagoda-worker > runtime-packages.txt
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }

# The GPU driver's libraries come from the host at run time (NVIDIA container toolkit).
driver_libs='^(libcuda|libnvidia-)'

declare -A packages=()
for binary in "$@"; do
  while read -r name arrow path _; do
    if [ "$arrow" != "=>" ]; then continue; fi      # the vdso and the dynamic loader itself
    if [ "$path" = "not" ]; then                    # "libfoo.so => not found"
      [[ $name =~ $driver_libs ]] && continue
      echo "$binary: shared library $name not found" >&2
      exit 1
    fi
    [[ $name =~ $driver_libs ]] && continue
    # dpkg records /usr/lib paths; ldd may print the /lib alias of merged-/usr systems.
    owner=""
    for candidate in "$path" "$(readlink -f "$path")" "/usr$path"; do
      owner="$(dpkg-query -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1)" && [ -n "$owner" ] && break
    done
    if [ -z "$owner" ]; then
      echo "$binary: no package owns $path ($name)" >&2
      exit 1
    fi
    packages["$owner"]=1
  done < <(ldd "$binary")
done
printf '%s\n' "${!packages[@]}" | sort
