// The parse tree of a GBNF text, between the parser (gbnf_parse.cc) and the compiler into the
// byte-level automaton (gbnf_compile.cc); Grammar::FromGbnf (grammar.cc) runs one, then the
// other. Internal to common/grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/automaton.h"
#include "common/grammar/grammar.h"

namespace pagoda::grammar::internal {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Deepest nesting of groups and repetition operators: bounds every recursion over the tree.
inline constexpr int32_t kMaxNesting = 200;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code points, inclusive

struct Expr {
  enum Kind : uint8_t { kSeq, kAlt, kLiteral, kClass, kRef, kRepeat };
  Kind kind = kSeq;
  int32_t depth = 1;         // nesting of this subtree
  std::vector<Expr> kids;    // kSeq, kAlt; kRepeat: kids[0]
  std::u32string text;       // kLiteral
  Ranges ranges;             // kClass: sorted, disjoint, no surrogates
  int32_t rule = -1;         // kRef
  int32_t min = 0, max = 0;  // kRepeat; max -1: unbounded
};

// A parsed grammar: one expression tree per rule, both indexed by rule id.
struct ParsedGbnf {
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Expr>> bodies;  // [rule]
  int32_t root = 0;                           // the rule named "root"
};

// Parses `gbnf` (within `limits`); INVALID_ARGUMENT naming the line and column, or the rule.
absl::StatusOr<ParsedGbnf> ParseGbnf(std::string_view gbnf, const Limits& limits);

// Compiles a parse into the automaton: per-rule NFAs over bytes, determinized, then the
// nullability and left-recursion checks; INVALID_ARGUMENT past `limits` or on left recursion.
absl::StatusOr<std::unique_ptr<Automaton>> CompileGbnf(const ParsedGbnf& parsed,
                                                       const Limits& limits);

}  // namespace pagoda::grammar::internal
