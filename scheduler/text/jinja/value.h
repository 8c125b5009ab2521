// Runtime values of the Jinja engine, with the semantics of @huggingface/jinja (the reference
// implementation chat templates are checked against), which runs on JavaScript: numbers are
// doubles (integers and floats differ only in how they print), strings index and measure in UTF-16
// code units, objects keep insertion order, and arrays and objects are shared by reference (so
// `a == b` on them is identity, as in JavaScript).
//
// Contract: a Value is cheap to copy for containers (a shared pointer) and copies its string.
// Strings are UTF-8; ill-formed input bytes are treated as U+FFFD where characters are needed.
// Nothing here throws except through JinjaError (error.h) for operations the reference
// rejects, text longer than its byte bound, and containers nested deeper than kMaxValueDepth; the
// interpreter catches those at its boundary.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/text/jinja/error.h"

namespace pagoda::scheduler::text::jinja {

class Value;
class Interpreter;
class Scope;
using Array = std::vector<Value>;

class Object;

// A callable: positional arguments (keyword arguments arrive as a trailing kKwargs value) and the
// caller's scope (macros see their caller's variables, as in the reference).
using Function =
    std::function<Value(std::vector<Value>& args, Interpreter& interpreter, Scope& caller)>;

enum class Kind {
  kUndefined,
  kNull,
  kBool,
  kInt,
  kFloat,
  kString,
  kArray,
  kTuple,  // an array literal written with commas; not "iterable" in the reference
  kObject,
  kKwargs,     // keyword arguments passed to a call (an object)
  kNamespace,  // namespace(): assignable attributes, not a mapping
  kFunction,
};

inline constexpr int kMaxValueDepth = 400;

// Upper bound on any text a value prints to (tojson, output, concatenation), below which the
// interpreter's RenderLimits::max_output_bytes applies.
inline constexpr size_t kMaxValueTextBytes = size_t{64} << 20;

class Value {
 public:
  Value() = default;
  static Value Null();
  static Value Bool(bool b);
  static Value Int(double n);
  static Value Float(double n);
  static Value String(std::string s);
  static Value MakeArray(Array items, Kind kind = Kind::kArray);
  static Value MakeObject(std::shared_ptr<Object> object, Kind kind = Kind::kObject);
  static Value MakeFunction(Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_array_like() const { return kind_ == Kind::kArray || kind_ == Kind::kTuple; }
  // ObjectValue in the reference: plain objects and keyword arguments.
  bool is_object_like() const { return kind_ == Kind::kObject || kind_ == Kind::kKwargs; }
  // Objects and namespaces: what attribute access reads keys from.
  bool is_attribute_container() const { return is_object_like() || kind_ == Kind::kNamespace; }

  double number() const { return number_; }  // int, float; bool as 0/1
  bool boolean() const { return number_ != 0; }
  const std::string& str() const { return str_ ? *str_ : EmptyString(); }
  // Nesting of containers (0 for scalars); at most kMaxValueDepth, so destroying or printing a
  // value never recurses deeper than that.
  int depth() const { return depth_; }
  const Array& array() const { return *array_; }
  Array& mutable_array() const { return *array_; }
  const Object& object() const { return *object_; }
  Object& mutable_object() const { return *object_; }
  const Function& function() const { return *function_; }
  const void* identity() const;  // the shared container, for reference equality

  // Python truthiness as the reference computes it.
  bool Truthy() const;
  // The reference's type name ("StringValue", ...), used in error messages.
  const char* TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  double number_ = 0;
  static const std::string& EmptyString();
  int depth_ = 0;
  std::shared_ptr<const std::string> str_;  // shared: copying a value never copies its text
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<const Function> function_;
};

// An insertion-ordered string-keyed map (JavaScript's Map).
class Object {
 public:
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// How a value prints in {{ }}: numbers as JavaScript (floats with a ".0" when integral), booleans
// as true/false, containers as JSON, none and undefined as nothing.
std::string ToOutputString(const Value& value, size_t max_bytes = kMaxValueTextBytes);
// `value.toString()` of the JavaScript value underneath, as the reference's `~` and string `+`
// use it (1.0 prints "1", an array joins its items' output strings with ",").
std::string ToConcatString(const Value& value, size_t max_bytes = kMaxValueTextBytes);

struct JsonOptions {
  int indent = 0;  // 0: single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_separator, key_separator;
  size_t max_bytes = kMaxValueTextBytes;  // longer output throws JinjaError
  // Python's json.dumps on the Python values underneath (the Python dialect): floats as
  // repr(float) (1.0, 1e-07), tuples as arrays, undefined an error.
  bool python = false;
};
// The reference's tojson (Python json.dumps layout); undefined prints as null or, with
// `undefined_as_null` false, as undefined. Throws JinjaError for tuples, functions and kwargs
// (with `python`, for undefined, functions and kwargs).
std::string ToJson(const Value& value, const JsonOptions& options, bool undefined_as_null = true);

// JavaScript Number.prototype.toString (shortest round trip, exponent past 1e21 and below 1e-6).
// A finite, non-zero double's shortest round-trip decimal: its sign, its significant digits
// (no trailing zeros) and its decimal exponent (value = 0.d1d2... x 10^(exponent + 1)). Shared by
// the JavaScript and Python number printers.
struct ShortestDecimal {
  bool negative = false;
  std::string digits;
  int exponent = 0;
};
ShortestDecimal ToShortestDecimal(double value);

std::string FormatJsNumber(double value);

// JavaScript's ToNumber of the value underneath (undefined and objects: NaN; null: 0; strings
// parsed as Number("...") does).
double JsToNumber(const Value& value);

// JavaScript loose equality (==) on the values underneath.
bool LooseEquals(const Value& a, const Value& b, size_t max_bytes = kMaxValueTextBytes);
// JavaScript strict equality (===) on the values underneath.
bool StrictEquals(const Value& a, const Value& b);

}  // namespace pagoda::scheduler::text::jinja
