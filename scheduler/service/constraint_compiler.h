// ConstraintCompiler: a request's pagoda.v1.Constraint (JSON Schema, json_object, regex,
// choice or GBNF) turned into the GBNF every worker runs (common/grammar), validated and
// compiled once per distinct constraint.
//
// Contract:
//  * Compile() translates the constraint to GBNF (json_schema.h, regex.h; a choice becomes an
//    alternation of literals) and compiles the GBNF into its automaton (grammar.h), which proves
//    it well-formed and within the limits before any worker sees it. Errors are
//    InvalidArgument and name the keyword and its path, the regex construct and its offset,
//    the rule, or the limit; a compilation that takes longer than the time budget is refused
//    naming the budget (the structural limits bound how long that can be).
//  * Results, failures included, are cached by the constraint's content (its kind and text),
//    at most `cache_entries` of them, least recently used first out; a repeated constraint
//    costs one hash lookup. Thread-safe: the gRPC and HTTP front ends call it on their own
//    threads, before the request reaches the engine (never under the engine's lock).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/regex.h"
#include "pagoda/v1/generation.pb.h"

namespace pagoda::scheduler {

struct ConstraintOptions {
  absl::Duration compile_budget = absl::Seconds(2);  // wall time of one compilation
  int32_t cache_entries = 1024;
  int32_t max_source_bytes = 1 << 20;  // schema, regex, grammar or all choices together
  int32_t max_choices = 1024;
  grammar::Limits limits;
  grammar::SchemaOptions schema;
  grammar::RegexOptions regex;
};

class ConstraintCompiler {
 public:
  explicit ConstraintCompiler(ConstraintOptions options = {}) : options_(std::move(options)) {}

  // The GBNF of `constraint` (compiled once and cached), or why it cannot be enforced.
  absl::StatusOr<std::shared_ptr<const std::string>> Compile(
      const pagoda::v1::Constraint& constraint);

  const ConstraintOptions& options() const { return options_; }

 private:
  // Translates and compiles without the cache.
  absl::StatusOr<std::string> Translate(const pagoda::v1::Constraint& constraint) const;

  using Result = absl::StatusOr<std::shared_ptr<const std::string>>;
  struct Entry {
    Result result;
    std::list<std::string>::iterator lru;  // position in lru_
  };

  const ConstraintOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> cache_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // keys, most recently used first
};

}  // namespace pagoda::scheduler
