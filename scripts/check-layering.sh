#!/usr/bin/env bash
# Enforces the dependency rules of docs/architecture.md (section 3, "Dependency rules") on the
# #include lines of the product code, and checks that the given binaries (the scheduler
# core's tests) link no gRPC or Protobuf, which proves the core sans-IO. Prints every violation
# with the rule it breaks; exits 1 when there is any. Run as the ctest test `layering_check`.
# It also checks that no CMake file exports a source directory as an include directory (each
# library exports only its own headers, cmake/PagodaModule.cmake).
#
#   scripts/check-layering.sh [BINARY_THAT_MUST_NOT_LINK_GRPC...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

violations=0
report() {  # report FILE:LINE:TEXT RULE
  echo "layering: $1" >&2
  echo "          breaks: $2" >&2
  violations=$((violations + 1))
}

# includes_matching DIR REGEX: "file:line:#include ..." for each include in DIR's C++ and CUDA
# sources whose target matches REGEX (an extended regex on the text between the quotes or <>).
includes_matching() {
  [ -d "$1" ] || return 0
  grep -rnE --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
    "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($2)[\">]" "$1" || true
}

# rule DIR REGEX WHY [ALLOWED_FILE_REGEX]: no file under DIR includes a target matching REGEX
# (files whose path matches ALLOWED_FILE_REGEX are exempt).
rule() {
  local dir="$1" regex="$2" why="$3" allowed="${4:-^$}" hit
  while IFS= read -r hit; do
    [ -z "$hit" ] && continue
    [[ "${hit%%:*}" =~ $allowed ]] && continue
    report "$hit" "$why"
  done < <(includes_matching "$dir" "$regex")
}

# The two processes share only proto/ and common/.
rule scheduler 'worker/.*' 'scheduler/ and worker/ never include each other'
rule worker 'scheduler/.*' 'scheduler/ and worker/ never include each other'
rule common '(scheduler|worker|tools|tests)/.*' 'common/ holds only what both processes share'
for dir in scheduler worker common tools; do
  rule "$dir" 'tests/.*' 'product code never includes test code'
done
# modelgen/ (random models, synthetic vocabularies, the GGUF writer, the quantizer) is for
# tests, benches and tools: what ships never includes it, and it builds on common/ alone.
for dir in scheduler worker common; do
  rule "$dir" 'modelgen/.*' 'product code never includes the modelgen/ generators'
done
rule modelgen '(scheduler|worker|tools|tests)/.*' 'modelgen/ depends only on common/'

# The core is sans-IO and single-threaded: time, ids and randomness come in as arguments.
rule scheduler/core 'grpc.*|grpcpp/.*|pagoda/.*\.pb\.h' 'scheduler/core includes no gRPC or proto'
rule scheduler/core 'thread|mutex|shared_mutex|condition_variable|future|atomic|absl/synchronization/.*' \
  'scheduler/core uses no threads or locks'
rule scheduler/core 'chrono|ctime|time\.h|random|absl/time/clock\.h|absl/random/.*' \
  'scheduler/core reads no clock and draws no randomness'
rule scheduler/core 'scheduler/(engine|service|http|link|text)/.*' \
  'scheduler/core depends on nothing above it'
rule scheduler/text 'scheduler/(core|engine|service|http|link)/.*' \
  'scheduler/text depends only on common/'
rule scheduler/metrics 'scheduler/(engine|service|http|link|server)/.*' \
  'scheduler/metrics depends only on the core'
rule scheduler/engine 'scheduler/(service|http|link|server)/.*' \
  'scheduler/engine is used by the service and the link, never the reverse'
rule scheduler/service 'scheduler/(link|http|server)/.*' \
  'scheduler/service never includes the HTTP front end (built on it), the link or the server'
rule scheduler/http 'scheduler/(link|server)/.*' \
  'scheduler/http uses the service (validation, served model, log and metrics), never the link or the server'
rule scheduler/link 'scheduler/(service|http|server)/.*' \
  'scheduler/link and the front ends (service, http) never include each other'

# The worker's layers: runner drives model and backend, never the reverse.
for dir in worker/model worker/backend worker/sampling; do
  rule "$dir" 'worker/runner/.*' "$dir never includes worker/runner"
done

# Process set-up helpers belong to the binaries' main.cc files and the tools.
main_only='common/(signals|port_file|flags|startup)\.h'
rule scheduler "$main_only" 'only the binaries (main.cc, tools/) use the main-only helpers' \
  '^scheduler/main\.cc$'
rule worker "$main_only" 'only the binaries (main.cc, tools/) use the main-only helpers' \
  '^worker/main\.cc$'
rule common "$main_only" 'only the binaries (main.cc, tools/) use the main-only helpers' \
  '^common/(signals|port_file|flags|startup)\.cc$'

# Each library exports only its own headers (cmake/PagodaModule.cmake's pagoda_module_headers):
# no CMake file makes a source directory, the project root least of all, an include directory,
# so a target that includes a module's header without linking its library fails to compile.
while IFS= read -r hit; do
  report "$hit" 'include directories come from pagoda_module_headers(), never a source directory'
done < <(find . \( -name 'build*' -o -name node_modules -o -name '.*' ! -name . \) -prune -o \
           \( -name CMakeLists.txt -o -name '*.cmake' \) -print | sed 's#^\./##' | sort |
         xargs perl -0777 -ne '
           while (/\b((?:target_)?include_directories\s*\(([^)]*)\))/g) {
             my ($call, $args, $at) = ($1, $2, $-[0]);
             next unless $args =~ /\$\{(?:PROJECT|CMAKE|CMAKE_CURRENT|pagoda)_SOURCE_DIR\}/;
             my $line = 1 + (substr($_, 0, $at) =~ tr/\n//);
             $call =~ s/\s+/ /g;
             print "$ARGV:$line:$call\n";
           }')

# Binaries that must link no gRPC: the core's tests.
for bin in "$@"; do
  if [ ! -x "$bin" ]; then
    report "$bin" "the binary to check does not exist (build it first)"
    continue
  fi
  linked="$(ldd "$bin" | grep -oE 'lib(grpc|gpr|protobuf)[^ ]*' | sort -u | tr '\n' ' ' || true)"
  if [ -n "$linked" ]; then
    report "$bin links $linked" 'the scheduler core and its tests link without gRPC'
  fi
done

if [ "$violations" -gt 0 ]; then
  echo "layering: $violations violation(s)" >&2
  exit 1
fi
echo "layering: every include follows the rules; ${#} binary(ies) link without gRPC"
