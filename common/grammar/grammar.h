// Grammars for constrained decoding: llama.cpp's GBNF text compiled into a byte-level pushdown
// automaton, and a Matcher that runs it over the bytes of generated text.
//
// GBNF is the one form every constraint takes on its way to a worker: JSON Schemas, regular
// expressions, choices and `json_object` are translated to GBNF text by the scheduler
// (json_schema.h, regex.h), and the plan carries that text once per sequence. The dialect is
// llama.cpp's (grammars/README.md there): `name ::= body` rules, `root` the start rule;
// sequences, `|` alternatives, `( )` groups, `"literals"` and `[classes]` / `[^classes]` with
// the escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH, `.` (any character), the
// repetitions `* + ?` `{m}` `{m,}` `{m,n}`, `#` comments; rule names [A-Za-z0-9_-]+. Literals and
// classes are Unicode code points, matched as their UTF-8 bytes, so a grammar accepts only
// well-formed UTF-8 (no surrogates: escapes of them are errors and classes leave them out).
// Where llama.cpp is lenient this is strict: a rule defined twice is an error, and nesting of
// groups and repetition operators is limited to 200 levels.
//
// Contract:
//  * Grammar::FromGbnf never crashes on any input: syntax errors, undefined rules, left
//    recursion (a rule that can reach itself without consuming a byte, which a pushdown
//    automaton cannot run) and anything over the Limits are InvalidArgument naming the rule or
//    the limit (and, for syntax, the line and column). Compile time and memory are bounded by
//    the limits.
//  * A Grammar is immutable after compilation and may be shared between threads.
//  * A Matcher is one parse in progress: the set of parse stacks after the bytes it has
//    consumed. It is a value (copyable), used by one thread at a time. Advance() is
//    all-or-nothing: on rejection the state is unchanged. The number of live stacks is capped
//    (Limits::max_stacks); a byte that would exceed it is rejected as if the grammar did not
//    allow it, so matching time per byte is bounded. Copies share their stack nodes (immutable,
//    atomically counted), so a copy costs one reference per live stack and forks may move to
//    other threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::grammar {

struct Limits {
  size_t max_source_bytes = 1 << 20;  // GBNF text
  int32_t max_rules = 20000;          // named rules (repetitions and groups make no rules)
  int32_t max_states = 500000;        // automaton states, over all rules (and per rule NFA)
  int32_t max_repetition = 10000;     // the largest m or n of {m,n}
  int32_t max_stacks = 1024;          // live parse stacks in a Matcher
};

class Grammar {
 public:
  static absl::StatusOr<std::shared_ptr<const Grammar>> FromGbnf(std::string_view gbnf,
                                                                 const Limits& limits = {});

  const std::string& source() const { return source_; }
  // Bytes of memory the compiled automaton holds (for the scheduler's memory budget).
  size_t memory_bytes() const;

  // The compiled form (gbnf_compile.cc); opaque outside the matcher.
  struct Automaton;
  const Automaton& automaton() const { return *automaton_; }

  Grammar(std::string source, std::unique_ptr<Automaton> automaton, Limits limits);
  ~Grammar();
  const Limits& limits() const { return limits_; }

 private:
  std::string source_;
  std::unique_ptr<Automaton> automaton_;
  Limits limits_;
};

namespace internal {
struct StackNode;
struct MatcherAccess;
// A counted reference to an immutable parse-stack node (automaton.h).
class StackRef {
 public:
  StackRef() = default;
  explicit StackRef(const StackNode* node);
  StackRef(const StackRef& other);
  StackRef(StackRef&& other) noexcept : node_(other.node_) { other.node_ = nullptr; }
  StackRef& operator=(StackRef other) noexcept {
    std::swap(node_, other.node_);
    return *this;
  }
  ~StackRef();
  const StackNode* get() const { return node_; }

 private:
  const StackNode* node_ = nullptr;
};
}  // namespace internal

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes` if the grammar allows them after what was consumed so far; otherwise
  // returns false and leaves the state as it was.
  bool Advance(std::string_view bytes);
  // Whether Advance(bytes) would succeed, without changing the state.
  bool CanAdvance(std::string_view bytes) const;
  // The root rule can end here (the text so far is a sentence of the grammar).
  bool Accepting() const;
  // Accepting, and no byte can follow.
  bool Complete() const;

  const Grammar& grammar() const { return *grammar_; }

 private:
  friend struct internal::MatcherAccess;
  struct Stack {
    int32_t state;              // the top state
    internal::StackRef parent;  // the frames below (null: the root rule's frame)
  };
  std::shared_ptr<const Grammar> grammar_;
  // The parse stacks whose top state consumes bytes, sorted and unique by content
  // (automaton.h), and whether the root rule can end here.
  std::vector<Stack> stacks_;
  bool accepting_ = false;
};

}  // namespace pagoda::grammar
