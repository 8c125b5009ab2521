#!/usr/bin/env bash
# The one place that installs Debian packages for Pagoda's scripts, by group, when any is
# missing. Safe to run repeatedly: does nothing when everything is present.
#
#   scripts/install-deps.sh [GROUP...]      (default: build test)
#
#   build  compilers, lld (links in a third of GNU ld's time), CMake, gRPC, Protobuf, Abseil,
#          GoogleTest, Google Benchmark, prometheus-cpp, openssl, PCRE2 and ICU (byte-level
#          BPE pre-tokenizers and NFC), Boost (Asio and Beast: the HTTP API), SQLite (the
#          Responses API's stored responses), OpenSSL's libcrypto and curl (the HTTP API's
#          tests): what scripts/build.sh and the quick test tier need
#   test   what the full test tier adds: Prometheus (promtool checks the metrics exposition),
#          gnuplot (pagoda-bench figures), clang-format (scripts/check-format.sh), Python's
#          Jinja2 (scripts/check-chat-templates-jinja2.sh renders chat templates with it)
#   clang  clang with its sanitizer and libFuzzer runtimes (scripts/fuzz.sh)
#   node   Node.js and npm (scripts/check-deploy.sh and the tests that run npm packages)
set -euo pipefail

packages_of() {
  case "$1" in
    build)
      echo cmake ninja-build g++ lld pkg-config \
        libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
        nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev \
        openssl libssl-dev libsqlite3-dev libpcre2-dev libicu-dev libboost-dev curl ;;
    test) echo prometheus gnuplot-nox clang-format python3-jinja2 ;;
    # libclang-rt-14-dev holds the sanitizer runtimes and the libFuzzer that -fsanitize=fuzzer
    # links; clang only recommends it, so a --no-install-recommends clang lacks it.
    clang) echo clang libclang-rt-14-dev ;;
    node) echo nodejs npm ;;
    *)
      echo "install-deps: unknown group '$1' (groups: build test clang node)" >&2
      return 2 ;;
  esac
}

groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(build test)
missing=()
for g in "${groups[@]}"; do
  list="$(packages_of "$g")"
  # Node.js may come from another Debian repository whose nodejs bundles npm (and conflicts
  # with Debian's npm package): working commands are what counts.
  if [ "$g" = node ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    continue
  fi
  for p in $list; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing Debian packages: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# One apt at a time: two build trees may run their set-up at once.
exec 8>"${TMPDIR:-/tmp}/pagoda-install-deps.lock"
flock 8
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
