#include "scheduler/text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/python_string.h"

namespace pagoda::scheduler::text::jinja {

const Value* Object::Find(std::string_view key) const {
  auto it = index_.find(absl::string_view(key.data(), key.size()));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Object::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::Null() {
  Value v;
  v.kind_ = Kind::kNull;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.number_ = b ? 1 : 0;
  return v;
}

Value Value::Int(double n) {
  Value v;
  v.kind_ = Kind::kInt;
  v.number_ = n;
  return v;
}

Value Value::Float(double n) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.number_ = n;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

const std::string& Value::EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

namespace {

// The depth of a container whose deepest child has `child_depth`.
int ContainerDepth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth) {
    throw JinjaError{"values nested deeper than the limit of " + std::to_string(kMaxValueDepth)};
  }
  return child_depth + 1;
}

int DepthOf(const Array& items) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  return ContainerDepth(depth);
}

}  // namespace

Value Value::MakeArray(Array items, Kind kind) {
  Value v;
  v.kind_ = kind;
  v.depth_ = DepthOf(items);
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}

Value Value::MakeObject(std::shared_ptr<Object> object, Kind kind) {
  Value v;
  v.kind_ = kind;
  int depth = 0;
  for (const auto& entry : object->entries()) depth = std::max(depth, entry.second.depth());
  v.depth_ = ContainerDepth(depth);
  v.object_ = std::move(object);
  return v;
}

Value Value::MakeFunction(Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.function_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

const void* Value::identity() const {
  if (array_) return array_.get();
  if (object_) return object_.get();
  return function_.get();
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNull:
      return false;
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
      return number_ != 0 && !std::isnan(number_);
    case Kind::kString:
      return !str().empty();
    case Kind::kArray:
    case Kind::kTuple:
      return !array_->empty();
    case Kind::kObject:
    case Kind::kKwargs:
      return object_->size() > 0;
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "UndefinedValue";
    case Kind::kNull:
      return "NullValue";
    case Kind::kBool:
      return "BooleanValue";
    case Kind::kInt:
      return "IntegerValue";
    case Kind::kFloat:
      return "FloatValue";
    case Kind::kString:
      return "StringValue";
    case Kind::kArray:
      return "ArrayValue";
    case Kind::kTuple:
      return "TupleValue";
    case Kind::kObject:
      return "ObjectValue";
    case Kind::kKwargs:
      return "KeywordArgumentsValue";
    case Kind::kNamespace:
      return "NamespaceValue";
    case Kind::kFunction:
      return "FunctionValue";
  }
  return "?";
}

ShortestDecimal ToShortestDecimal(double value) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, result.ptr - buf);
  ShortestDecimal out;
  if (sci[0] == '-') {
    out.negative = true;
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  for (char c : sci.substr(0, e)) {
    if (c != '.') out.digits += c;
  }
  out.exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  while (out.digits.size() > 1 && out.digits.back() == '0') out.digits.pop_back();
  return out;
}

std::string FormatJsNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  if (value == 0) return "0";
  const ShortestDecimal d = ToShortestDecimal(value);
  const std::string sign = d.negative ? "-" : "";
  const std::string& digits = d.digits;
  const int exponent = d.exponent;
  int k = static_cast<int>(digits.size());
  int n = exponent + 1;
  std::string out = sign;
  if (k <= n && n <= 21) {
    out += digits + std::string(n - k, '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, n) + "." + digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(-n, '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  }
  return out;
}

namespace {

std::string FormatFloat(double value) {
  if (value == 0 && std::signbit(value)) return "-0.0";
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e21) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.1f", value);
    return buf;
  }
  return FormatJsNumber(value);
}

// RuntimeValue.prototype.toString in the reference.
std::string RuntimeToString(const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return v.boolean() ? "true" : "false";
    case Kind::kInt:
      return FormatJsNumber(v.number());
    case Kind::kFloat:
      return FormatFloat(v.number());
    case Kind::kString:
      return v.str();
    case Kind::kArray:
    case Kind::kTuple:
    case Kind::kObject:
    case Kind::kKwargs:
    case Kind::kNamespace:
      return ToJson(v, JsonOptions{}, /*undefined_as_null=*/false);
    case Kind::kFunction:
      return "[function]";
  }
  return "";
}

}  // namespace

std::string ToOutputString(const Value& value, size_t max_bytes) {
  if (value.is_null() || value.is_undefined()) return "";
  return RuntimeToString(value, max_bytes);
}

std::string ToConcatString(const Value& value, size_t max_bytes) {
  switch (value.kind()) {
    case Kind::kFloat:
      return FormatJsNumber(value.number());
    case Kind::kArray:
    case Kind::kTuple: {
      std::string out;
      bool first = true;
      for (const Value& item : value.array()) {
        if (!first) out += ',';
        first = false;
        out += RuntimeToString(item, max_bytes);
        if (out.size() > max_bytes) {
          throw JinjaError{"text longer than the limit of " + std::to_string(max_bytes) + " bytes"};
        }
      }
      return out;
    }
    case Kind::kObject:
    case Kind::kKwargs:
    case Kind::kNamespace:
      return "[object Map]";
    default:
      return RuntimeToString(value, max_bytes);
  }
}

namespace {

std::string JsonNumber(double n) { return std::isfinite(n) ? FormatJsNumber(n) : "null"; }

void AppendJson(const Value& value, const JsonOptions& options, int depth, bool undefined_as_null,
                std::string& out) {
  if (depth > kMaxValueDepth) {
    throw JinjaError{"tojson: nesting deeper than the limit of " + std::to_string(kMaxValueDepth)};
  }
  if (out.size() > options.max_bytes) {
    throw JinjaError{"text longer than the limit of " + std::to_string(options.max_bytes) +
                     " bytes"};
  }
  std::string item_sep =
      options.custom_separators ? options.item_separator : (options.indent > 0 ? "," : ", ");
  std::string key_sep = options.custom_separators ? options.key_separator : ": ";
  std::string indent_unit(options.indent > 0 ? options.indent : 0, ' ');
  std::string base = "\n";
  for (int i = 0; i < depth && options.indent > 0; ++i) base += indent_unit;
  std::string child = base + indent_unit;
  switch (value.kind()) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kUndefined:
      if (options.python) throw JinjaError{"Object of type Undefined is not JSON serializable"};
      out += undefined_as_null ? "null" : "undefined";
      return;
    case Kind::kInt:
    case Kind::kFloat:
      if (options.python && std::isfinite(value.number())) {
        out += value.kind() == Kind::kFloat ? FormatPythonFloat(value.number()) : PythonRepr(value);
        return;
      }
      out += JsonNumber(value.number());
      return;
    case Kind::kBool:
      out += value.boolean() ? "true" : "false";
      return;
    case Kind::kString:
      out += JsonQuote(value.str(), options.ensure_ascii);
      return;
    case Kind::kTuple:
      if (!options.python) break;
      [[fallthrough]];
    case Kind::kArray: {
      const Array& items = value.array();
      bool pretty = options.indent > 0 && !items.empty();
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (pretty) out += child;
        AppendJson(items[i], options, depth + 1, undefined_as_null, out);
      }
      if (pretty) out += base;
      out += ']';
      return;
    }
    case Kind::kObject:
    case Kind::kNamespace: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.object().entries()) entries.push_back(&entry);
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
          return ToUtf16(a->first) < ToUtf16(b->first);
        });
      }
      bool pretty = options.indent > 0 && !entries.empty();
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        if (pretty) out += child;
        out += JsonQuote(entries[i]->first, options.ensure_ascii);
        out += key_sep;
        AppendJson(entries[i]->second, options, depth + 1, undefined_as_null, out);
      }
      if (pretty) out += base;
      out += '}';
      return;
    }
    default:
      break;
  }
  throw JinjaError{std::string("Cannot convert to JSON: ") + value.TypeName()};
}

// ECMAScript StringToNumber, NaN when the text is not a number.
double JsStringToNumber(std::string_view s) {
  std::string t = JsTrim(s);
  if (t.empty()) return 0;
  auto radix = [&](int base) {
    if (t.size() <= 2) return static_cast<double>(NAN);
    double n = 0;
    for (char c : t.substr(2)) {
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : 99;
      if (d >= base) return static_cast<double>(NAN);
      n = n * base + d;
    }
    return n;
  };
  if (t.size() > 1 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) return radix(16);
  if (t.size() > 1 && t[0] == '0' && (t[1] == 'o' || t[1] == 'O')) return radix(8);
  if (t.size() > 1 && t[0] == '0' && (t[1] == 'b' || t[1] == 'B')) return radix(2);
  std::string_view body = t;
  bool negative = false;
  if (body[0] == '+' || body[0] == '-') {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "Infinity") return negative ? -INFINITY : INFINITY;
  for (char c : body) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return NAN;
    }
  }
  std::optional<double> parsed = JsParseFloat(t);
  if (!parsed) return NAN;
  // parseFloat accepts a prefix; StringToNumber needs the whole text, so re-check by length.
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() ? v : NAN;
}

enum class JsType { kUndefined, kNull, kBool, kNumber, kString, kObject };

JsType TypeOf(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return JsType::kUndefined;
    case Kind::kNull:
      return JsType::kNull;
    case Kind::kBool:
      return JsType::kBool;
    case Kind::kInt:
    case Kind::kFloat:
      return JsType::kNumber;
    case Kind::kString:
      return JsType::kString;
    default:
      return JsType::kObject;
  }
}

}  // namespace

double JsToNumber(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
      return static_cast<double>(NAN);
    case Kind::kNull:
      return 0;
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
      return value.number();
    case Kind::kString:
      return JsStringToNumber(value.str());
    case Kind::kArray:
    case Kind::kTuple:
      return JsStringToNumber(ToConcatString(value));
    default:
      return static_cast<double>(NAN);
  }
}

std::string ToJson(const Value& value, const JsonOptions& options, bool undefined_as_null) {
  std::string out;
  AppendJson(value, options, 0, undefined_as_null, out);
  if (out.size() > options.max_bytes) {
    throw JinjaError{"text longer than the limit of " + std::to_string(options.max_bytes) +
                     " bytes"};
  }
  return out;
}

bool StrictEquals(const Value& a, const Value& b) {
  JsType ta = TypeOf(a), tb = TypeOf(b);
  if (ta != tb) return false;
  switch (ta) {
    case JsType::kUndefined:
    case JsType::kNull:
      return true;
    case JsType::kBool:
    case JsType::kNumber:
      return a.number() == b.number();
    case JsType::kString:
      return a.str() == b.str();
    case JsType::kObject:
      return a.identity() == b.identity();
  }
  return false;
}

bool LooseEquals(const Value& a, const Value& b, size_t max_bytes) {
  JsType ta = TypeOf(a), tb = TypeOf(b);
  if (ta == tb) return StrictEquals(a, b);
  bool a_nullish = ta == JsType::kUndefined || ta == JsType::kNull;
  bool b_nullish = tb == JsType::kUndefined || tb == JsType::kNull;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (ta == JsType::kBool) return LooseEquals(Value::Int(a.number()), b, max_bytes);
  if (tb == JsType::kBool) return LooseEquals(a, Value::Int(b.number()), max_bytes);
  if (ta == JsType::kNumber && tb == JsType::kString) {
    return a.number() == JsStringToNumber(b.str());
  }
  if (ta == JsType::kString && tb == JsType::kNumber) {
    return JsStringToNumber(a.str()) == b.number();
  }
  if (ta == JsType::kObject) {
    return LooseEquals(Value::String(ToConcatString(a, max_bytes)), b, max_bytes);
  }
  if (tb == JsType::kObject) {
    return LooseEquals(a, Value::String(ToConcatString(b, max_bytes)), max_bytes);
  }
  return false;
}

}  // namespace pagoda::scheduler::text::jinja
