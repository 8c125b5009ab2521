// Evaluates a parsed template (ast.h) with the semantics of @huggingface/jinja's runtime: scopes
// (a for loop and a macro call open one; `set` writes the innermost), the loop object, macros and
// call blocks, filters, tests, and the global functions raise_exception, range, strftime_now and
// namespace.
//
// Contract: Run renders the template or throws JinjaError (the template's own message for
// raise_exception). Every render is bounded by RenderLimits: output and string sizes, a work
// budget (steps: nodes evaluated, loop iterations, items and bytes built), range() length and
// macro call depth; going past one is a JinjaError naming the limit. The interpreter owns every
// scope it creates until it is destroyed, so closures (macros, call blocks) never dangle.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/text/jinja/ast.h"
#include "scheduler/text/jinja/value.h"

namespace pagoda::scheduler::text::jinja {

// Whose semantics a render follows where the two engines chat templates are written for differ.
// kJavaScript is @huggingface/jinja's (the engine's reference, checked over every template);
// kPython is Python's Jinja2 as transformers' apply_chat_template sets it up (what model authors
// test with; checked over the tool-calling templates). Python's differences, in short:
//  * `{{ }}`, `~`, `string` and `trim` print values as Python's str() does: none as None,
//    booleans as True/False, lists and dicts as their repr ({'a': 1}); JavaScript prints none as
//    nothing and containers as JSON.
//  * `+` of a string and a non-string fails (TypeError) instead of concatenating.
//  * a `for` loop over a string iterates its characters (JavaScript: an error).
//  * `strip`, `lstrip` and `rstrip` take the characters to strip.
//  * the filters `select` and `reject` and the test `in` exist.
// Everything else (tojson, number printing, undefined rules, error messages) is the same in both.
enum class Dialect { kJavaScript, kPython };

struct RenderLimits {
  size_t max_output_bytes = size_t{4} << 20;  // the rendered text and any string built
  uint64_t max_steps = 20'000'000;            // work budget of one render
  size_t max_range = 1'000'000;               // items range() may produce
  int max_call_depth = 100;                   // nested macro / caller() calls
};

// A variable scope; `parent` is null for the globals.
class Scope {
 public:
  explicit Scope(Scope* parent) : parent_(parent) {}
  Value Lookup(std::string_view name) const;
  void Set(std::string_view name, Value value) { variables_[std::string(name)] = std::move(value); }

 private:
  Scope* parent_;
  absl::flat_hash_map<std::string, Value> variables_;
};

class Interpreter {
 public:
  // `now` is the clock strftime_now reads (UTC).
  Interpreter(const RenderLimits& limits, std::chrono::system_clock::time_point now,
              Dialect dialect = Dialect::kJavaScript);
  ~Interpreter();

  Scope& globals() { return *globals_; }
  std::string Run(const NodeList& program);

  // For builtins (builtins.cc).
  void Charge(uint64_t steps);
  void CheckStringSize(size_t bytes) const;
  const RenderLimits& limits() const { return limits_; }
  std::chrono::system_clock::time_point now() const { return now_; }
  bool python() const { return dialect_ == Dialect::kPython; }
  // How `{{ value }}` prints in this dialect.
  std::string OutputString(const Value& value) const;
  Value CallFunction(const Value& fn, std::vector<Value>& args, Scope& scope);
  void RegisterNamespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  friend class FilterApplier;
  Scope& NewScope(Scope* parent);
  std::string EvaluateBlock(const NodeList& statements, Scope& scope);
  Value Evaluate(const Node* node, Scope& scope);
  Value EvaluateBinary(const Node& node, Scope& scope);
  Value EvaluateUnary(const Node& node, Scope& scope);
  Value EvaluateMember(const Node& node, Scope& scope);
  Value EvaluateSlice(const Value& object, const Node& slice, Scope& scope);
  Value EvaluateCall(const Node& node, Scope& scope);
  Value EvaluateTest(const Node& node, Scope& scope);
  Value EvaluateObjectLiteral(const Node& node, Scope& scope);
  Value EvaluateSet(const Node& node, Scope& scope);
  std::string EvaluateFor(const Node& node, Scope& scope);
  Value DefineMacro(const Node& node, Scope& scope);
  Value EvaluateCallStatement(const Node& node, Scope& scope);
  Value ApplyFilter(const Value& operand, const Node& filter, Scope& scope);
  // Positional values (spreads expanded) and keyword values, as the reference orders them.
  void EvaluateArguments(const NodeList& args, Scope& scope, std::vector<Value>& positional,
                         std::shared_ptr<Object>& keywords);
  void BindMacroArguments(const std::string& display_name, const NodeList& parameters,
                          bool uses_kwargs, bool uses_varargs, std::vector<Value> args,
                          Scope& scope);

  RenderLimits limits_;
  std::chrono::system_clock::time_point now_;
  Dialect dialect_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::deque<Scope> scopes_;
  Scope* globals_;
  std::vector<Value> namespaces_;  // cleared at the end: breaks reference cycles through set
};

// Test functions (`x is name`), shared by the `is` operator and select/rejectattr (and, in the
// Python dialect, select/reject), in `dialect`. Throws JinjaError for an unknown name.
bool ApplyTest(std::string_view name, const Value& operand, const Value* argument,
               Dialect dialect = Dialect::kJavaScript);
bool IsKnownTest(std::string_view name);

// Attribute lookup as `map(attribute=)` and `sort(attribute=)` do: a dotted path through objects
// and array indices; undefined where it does not resolve.
Value GetAttributePath(const Value& item, std::string_view path);

// The reference's compareRuntimeValues (sort, dictsort): -1, 0 or 1; throws for mixed types.
int CompareValues(const Value& a, const Value& b, bool case_sensitive);
// The work steps one comparison of `a` and `b` costs (strings by their length).
uint64_t CompareCost(const Value& a, const Value& b);

// The methods of strings ("upper", "split", ...) and objects ("get", "items", ...) as bound
// values (functions, or the length of a string); undefined when there is none.
Value StringBuiltin(const Value& receiver, std::string_view name);
Value ObjectBuiltin(const Value& receiver, std::string_view name);

// Python's strftime for the reference's subset (%Y %m %d %b %B %H %M %%), in UTC.
std::string FormatTime(std::chrono::system_clock::time_point now, std::string_view format);

}  // namespace pagoda::scheduler::text::jinja
