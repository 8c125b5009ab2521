#include "scheduler/service/constraint_compiler.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grammar/gbnf_text.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

// The cache key: the kind, then the text that defines the constraint.
std::string CacheKey(const v1::Constraint& c) {
  switch (c.kind_case()) {
    case v1::Constraint::kJsonSchema:
      return absl::StrCat("s", c.json_schema());
    case v1::Constraint::kJsonObject:
      return "o";
    case v1::Constraint::kRegex:
      return absl::StrCat("r", c.regex());
    case v1::Constraint::kChoice: {
      std::string key = "c";
      for (const std::string& option : c.choice().options()) {
        absl::StrAppend(&key, option.size(), ":", option);
      }
      return key;
    }
    case v1::Constraint::kGrammar:
      return absl::StrCat("g", c.grammar());
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  return "";
}

size_t SourceBytes(const v1::Constraint& c) {
  size_t bytes = c.json_schema().size() + c.regex().size() + c.grammar().size();
  for (const std::string& option : c.choice().options()) bytes += option.size();
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> ConstraintCompiler::Translate(const v1::Constraint& c) const {
  if (SourceBytes(c) > static_cast<size_t>(options_.max_source_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("constraint: the %s has %d bytes; the limit is %d",
                        c.kind_case() == v1::Constraint::kChoice ? "choice list" : "definition",
                        SourceBytes(c), options_.max_source_bytes));
  }
  switch (c.kind_case()) {
    case v1::Constraint::kJsonSchema: {
      nlohmann::ordered_json schema = nlohmann::ordered_json::parse(c.json_schema(), nullptr,
                                                                    /*allow_exceptions=*/false);
      if (schema.is_discarded()) {
        return absl::InvalidArgumentError("constraint: json_schema is not valid JSON");
      }
      absl::StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(schema, options_.schema);
      if (!gbnf.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("json_schema: ", gbnf.status().message()));
      }
      return gbnf;
    }
    case v1::Constraint::kJsonObject:
      if (!c.json_object()) return absl::InvalidArgumentError("constraint: json_object is false");
      return grammar::JsonObjectGbnf(options_.schema);
    case v1::Constraint::kRegex: {
      absl::StatusOr<std::string> gbnf = grammar::RegexGrammar(c.regex(), options_.regex);
      if (!gbnf.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("regex: ", gbnf.status().message()));
      }
      return gbnf;
    }
    case v1::Constraint::kChoice: {
      const auto& options = c.choice().options();
      if (options.empty() || options.size() > options_.max_choices) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "choice must list 1 to %d strings, got %d", options_.max_choices, options.size()));
      }
      std::string gbnf = "root ::= ";
      for (int i = 0; i < options.size(); ++i) {
        if (options[i].empty() || !common::IsValidUtf8(options[i])) {
          return absl::InvalidArgumentError(
              absl::StrFormat("choice option %d must be a non-empty UTF-8 string", i));
        }
        if (i > 0) gbnf += " | ";
        gbnf += grammar::GbnfLiteral(options[i]);
      }
      return gbnf + "\n";
    }
    case v1::Constraint::kGrammar:
      return c.grammar();
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "constraint is set but names no kind: set json_schema, json_object, regex, choice or "
      "grammar");
}

absl::StatusOr<std::shared_ptr<const std::string>> ConstraintCompiler::Compile(
    const v1::Constraint& constraint) {
  std::string key = CacheKey(constraint);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.result;
    }
  }
  // Compiled outside the lock: two threads may compile the same constraint once each at first.
  const absl::Time start = absl::Now();
  Result result = [&]() -> Result {
    ASSIGN_OR_RETURN(std::string gbnf, Translate(constraint));
    absl::StatusOr<std::shared_ptr<const grammar::Grammar>> compiled =
        grammar::Grammar::FromGbnf(gbnf, options_.limits);
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("constraint grammar: ", compiled.status().message()));
    }
    const absl::Duration took = absl::Now() - start;
    if (took > options_.compile_budget) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the constraint took %d ms to compile; the budget is %d ms "
          "(--constraint-compile-budget-ms)",
          absl::ToInt64Milliseconds(took), absl::ToInt64Milliseconds(options_.compile_budget)));
    }
    return std::make_shared<const std::string>(std::move(gbnf));
  }();
  absl::MutexLock lock(&mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.result;
  lru_.push_front(key);
  cache_.emplace(std::move(key), Entry{result, lru_.begin()});
  while (static_cast<int32_t>(cache_.size()) > options_.cache_entries) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return result;
}

}  // namespace pagoda::scheduler
