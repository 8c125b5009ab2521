// Interpreter::ApplyFilter: `value | name` and `value | name(args)` for the filters the
// reference implements, dispatched on the operand's type as it does.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "scheduler/text/jinja/interpreter.h"
#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/python_string.h"

namespace pagoda::scheduler::text::jinja {
namespace {

std::string JoinPiece(const Value& v, size_t max_bytes) {
  return v.is_null() || v.is_undefined() ? "" : ToConcatString(v, max_bytes);
}

std::string Indent(const std::string& text, double width, bool first, bool blank,
                   size_t max_bytes) {
  std::string pad(static_cast<size_t>(std::max(0.0, width)), ' ');
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    size_t nl = text.find('\n', start);
    std::string_view piece = std::string_view(text).substr(
        start, nl == std::string::npos ? std::string::npos : nl - start);
    bool skip = (!first && line == 0) || (!blank && piece.empty());
    if (!skip) out += pad;
    out.append(piece);
    if (out.size() > max_bytes) {
      throw JinjaError{"text longer than the limit of " + std::to_string(max_bytes) + " bytes"};
    }
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

// Identity for `unique`: primitives by value, containers by reference.
std::string UniqueKey(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "u";
    case Kind::kNull:
      return "n";
    case Kind::kBool:
      return v.boolean() ? "b1" : "b0";
    case Kind::kInt:
    case Kind::kFloat:
      return "d" + FormatJsNumber(v.number());
    case Kind::kString:
      return "s" + v.str();
    default:
      return "p" + std::to_string(reinterpret_cast<uintptr_t>(v.identity()));
  }
}

}  // namespace

class FilterApplier {
 public:
  FilterApplier(Interpreter& self, Scope& scope) : self_(self), scope_(scope) {}

  Value Plain(const Value& operand, const std::string& name);
  Value Called(const Value& operand, const std::string& name, const NodeList& args);

 private:
  Value PlainArray(const Value& operand, const std::string& name);
  Value PlainString(const Value& operand, const std::string& name);
  Value CalledArray(const Value& operand, const std::string& name, const NodeList& args);
  Value ToJsonFilter(const Value& operand, const NodeList& args);
  Value SelectAttr(const Value& operand, const std::string& name, const NodeList& args);
  Value PythonFilter(const Value& operand, const std::string& name, const NodeList* args,
                     bool* handled);
  Value Select(const Value& operand, const std::string& name, const std::vector<Value>& args);
  void Arguments(const NodeList& args, std::vector<Value>& positional,
                 std::shared_ptr<Object>& kw) {
    self_.EvaluateArguments(args, scope_, positional, kw);
  }
  static Value Kw(const std::shared_ptr<Object>& kw, std::string_view name, Value fallback) {
    const Value* v = kw->Find(name);
    return v ? *v : fallback;
  }
  static Value Arg(const std::vector<Value>& args, size_t i, const std::shared_ptr<Object>& kw,
                   std::string_view name, Value fallback) {
    return i < args.size() ? args[i] : Kw(kw, name, std::move(fallback));
  }

  Interpreter& self_;
  Scope& scope_;
};

Value FilterApplier::PlainArray(const Value& operand, const std::string& name) {
  const Array& items = operand.array();
  self_.Charge(items.size());
  if (name == "list") return operand;
  if (name == "first") return items.empty() ? Value() : items.front();
  if (name == "last") return items.empty() ? Value() : items.back();
  if (name == "length") return Value::Int(static_cast<double>(items.size()));
  if (name == "reverse") return Value::MakeArray(Array(items.rbegin(), items.rend()));
  if (name == "sort") {
    Array sorted = items;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Value& a, const Value& b) { return CompareValues(a, b, false) < 0; });
    return Value::MakeArray(std::move(sorted));
  }
  if (name == "join") {
    std::string out;
    for (const Value& v : items) {
      out += JoinPiece(v, self_.limits().max_output_bytes);
      self_.CheckStringSize(out.size());
    }
    return Value::String(std::move(out));
  }
  if (name == "string") {
    JsonOptions options;
    options.max_bytes = self_.limits().max_output_bytes;
    return Value::String(ToJson(operand, options, false));
  }
  if (name == "unique") {
    std::unordered_set<std::string> seen;
    Array out;
    for (const Value& v : items) {
      self_.Charge(CompareCost(v, v));
      if (seen.insert(UniqueKey(v)).second) out.push_back(v);
    }
    return Value::MakeArray(std::move(out));
  }
  throw JinjaError{"Unknown ArrayValue filter: " + name};
}

Value FilterApplier::PlainString(const Value& operand, const std::string& name) {
  const std::string& s = operand.str();
  self_.Charge(s.size() / 16);
  if (name == "length") return Value::Int(static_cast<double>(Utf16Length(s)));
  if (name == "upper") return Value::String(JsToUpper(s));
  if (name == "lower") return Value::String(JsToLower(s));
  if (name == "title") return Value::String(JsTitleCase(s));
  if (name == "capitalize") return Value::String(JsCapitalize(s));
  if (name == "trim") return Value::String(JsTrim(s));
  if (name == "indent")
    return Value::String(Indent(s, 4, false, false, self_.limits().max_output_bytes));
  if (name == "join" || name == "string") return operand;
  if (name == "int") return Value::Int(JsParseInt(s).value_or(0));
  if (name == "float") return Value::Float(JsParseFloat(s).value_or(0));
  throw JinjaError{"Unknown StringValue filter: " + name};
}

// The filters whose Python behaviour differs from the reference's, in the Python dialect: `string`,
// `trim` and `join` print values with str(), `length` counts a string's code points, and
// `select` and `reject` exist. `args` is null for
// a filter written without parentheses. Sets *handled when it applied the filter.
Value FilterApplier::PythonFilter(const Value& operand, const std::string& name,
                                  const NodeList* args, bool* handled) {
  *handled = true;
  const size_t max_bytes = self_.limits().max_output_bytes;
  std::vector<Value> positional;
  std::shared_ptr<Object> kw = std::make_shared<Object>();
  if (args != nullptr) Arguments(*args, positional, kw);
  if (name == "string") return Value::String(ToPythonString(operand, max_bytes));
  if (name == "length" && operand.is_string()) {  // code points, not UTF-16 units
    self_.Charge(operand.str().size() / 16);
    return Value::Int(static_cast<double>(ToCodePoints(operand.str()).size()));
  }
  if (name == "trim") {
    Value chars = Arg(positional, 0, kw, "chars", Value::Null());
    if (!chars.is_string() && !chars.is_null()) throw JinjaError{"trim chars must be a string"};
    std::string text = ToPythonString(operand, max_bytes);
    self_.Charge(text.size() / 16);
    return Value::String(PythonStrip(text, chars.is_string() ? &chars.str() : nullptr, true, true));
  }
  if (name == "join" && operand.is_array_like()) {
    Value separator = Arg(positional, 0, kw, "d", Value::String(""));
    if (!separator.is_string()) throw JinjaError{"separator must be a string"};
    std::string out;
    for (size_t i = 0; i < operand.array().size(); ++i) {
      if (i > 0) out += separator.str();
      out += ToPythonString(operand.array()[i], max_bytes);
      self_.CheckStringSize(out.size());
    }
    self_.Charge(out.size() / 16 + operand.array().size());
    return Value::String(std::move(out));
  }
  if ((name == "select" || name == "reject") && operand.is_array_like()) {
    return Select(operand, name, positional);
  }
  *handled = false;
  return Value();
}

// Python's select(test, args...) and reject(test, args...): the items that pass (fail) the test,
// or, without a test, that are truthy (falsy).
Value FilterApplier::Select(const Value& operand, const std::string& name,
                            const std::vector<Value>& positional) {
  if (!positional.empty() && !positional[0].is_string()) {
    throw JinjaError{"the test of `" + name + "` must be a string"};
  }
  const std::string* test = positional.empty() ? nullptr : &positional[0].str();
  const Value* argument = positional.size() > 1 ? &positional[1] : nullptr;
  if (test != nullptr && !IsKnownTest(*test) && *test != "in") {
    throw JinjaError{"Unknown test: " + *test};
  }
  bool select = name == "select";
  Array out;
  // What one test costs: `in` scans its argument.
  uint64_t cost = 1;
  if (argument != nullptr) {
    cost += argument->is_array_like() ? argument->array().size() : argument->str().size() / 16;
  }
  for (const Value& item : operand.array()) {
    self_.Charge(cost);
    bool result =
        test != nullptr ? ApplyTest(*test, item, argument, Dialect::kPython) : item.Truthy();
    if (result == select) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

Value FilterApplier::Plain(const Value& operand, const std::string& name) {
  if (name == "safe") return operand;
  if (self_.python()) {
    bool handled = false;
    Value result = PythonFilter(operand, name, nullptr, &handled);
    if (handled) return result;
  }
  if (name == "tojson") {
    JsonOptions options;
    options.max_bytes = self_.limits().max_output_bytes;
    options.python = self_.python();
    std::string json = ToJson(operand, options);
    self_.CheckStringSize(json.size());
    self_.Charge(json.size() / 16);
    return Value::String(std::move(json));
  }
  if (operand.is_array_like()) return PlainArray(operand, name);
  if (operand.is_string()) return PlainString(operand, name);
  if (operand.is_number()) {
    double n = operand.number();
    bool is_int = operand.kind() == Kind::kInt;
    if (name == "abs") return is_int ? Value::Int(std::fabs(n)) : Value::Float(std::fabs(n));
    if (name == "int") return Value::Int(self_.python() ? std::trunc(n) : std::floor(n));
    if (name == "float") return Value::Float(n);
    if (name == "string") return Value::String(ToOutputString(operand));
    throw JinjaError{"Unknown NumericValue filter: " + name};
  }
  if (operand.is_object_like()) {
    if (name == "items" || name == "length") {
      if (name == "length") return Value::Int(static_cast<double>(operand.object().size()));
    }
    Value builtin = ObjectBuiltin(operand, name);
    if (builtin.kind() == Kind::kFunction) {
      std::vector<Value> none;
      return self_.CallFunction(builtin, none, scope_);
    }
    throw JinjaError{"Unknown ObjectValue filter: " + name};
  }
  if (operand.kind() == Kind::kBool) {
    bool b = operand.boolean();
    if (name == "bool") return Value::Bool(b);
    if (name == "int") return Value::Int(b ? 1 : 0);
    if (name == "float") return Value::Float(b ? 1 : 0);
    if (name == "string") return Value::String(b ? "true" : "false");
    throw JinjaError{"Unknown BooleanValue filter: " + name};
  }
  throw JinjaError{"Cannot apply filter \"" + name + "\" to type: " + operand.TypeName()};
}

Value FilterApplier::ToJsonFilter(const Value& operand, const NodeList& args) {
  std::vector<Value> positional;
  std::shared_ptr<Object> kw;
  Arguments(args, positional, kw);
  JsonOptions options;
  options.max_bytes = self_.limits().max_output_bytes;
  options.python = self_.python();
  Value indent = Kw(kw, "indent", Value::Null());
  if (indent.kind() != Kind::kInt && !indent.is_null()) {
    throw JinjaError{"If set, indent must be a number"};
  }
  if (indent.kind() == Kind::kInt) {
    if (indent.number() < 0)
      throw JinjaError{"Invalid count value: " + FormatJsNumber(indent.number())};
    if (indent.number() > 64) throw JinjaError{"tojson indent larger than the limit of 64"};
    options.indent = static_cast<int>(indent.number());
  }
  Value ensure_ascii = Kw(kw, "ensure_ascii", Value::Bool(false));
  if (ensure_ascii.kind() != Kind::kBool)
    throw JinjaError{"If set, ensure_ascii must be a boolean"};
  options.ensure_ascii = ensure_ascii.boolean();
  Value sort_keys = Kw(kw, "sort_keys", Value::Bool(false));
  if (sort_keys.kind() != Kind::kBool) throw JinjaError{"If set, sort_keys must be a boolean"};
  options.sort_keys = sort_keys.boolean();
  Value separators = Kw(kw, "separators", Value::Null());
  if (separators.is_array_like()) {
    const Array& pair = separators.array();
    if (pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      throw JinjaError{"separators must be a tuple of two strings"};
    }
    options.custom_separators = true;
    options.item_separator = pair[0].str();
    options.key_separator = pair[1].str();
  } else if (!separators.is_null()) {
    throw JinjaError{"If set, separators must be a tuple of two strings"};
  }
  std::string json = ToJson(operand, options);
  self_.CheckStringSize(json.size());
  self_.Charge(json.size() / 16);
  return Value::String(std::move(json));
}

Value FilterApplier::SelectAttr(const Value& operand, const std::string& name,
                                const NodeList& args) {
  bool select = name == "selectattr";
  for (const Value& item : operand.array()) {
    if (!item.is_attribute_container()) {
      throw JinjaError{"`" + name + "` can only be applied to array of objects"};
    }
  }
  for (const NodePtr& arg : args) {
    if (arg->kind != NodeKind::kStringLiteral) {
      throw JinjaError{"arguments of `" + name + "` must be strings"};
    }
  }
  if (args.empty()) throw JinjaError{"Cannot read properties of undefined (reading 'value')"};
  const std::string& attr = args[0]->text;
  const std::string* test = args.size() > 1 ? &args[1]->text : nullptr;
  std::optional<Value> value;
  if (args.size() > 2) value = Value::String(args[2]->text);
  if (test != nullptr && !IsKnownTest(*test)) throw JinjaError{"Unknown test: " + *test};
  self_.Charge(operand.array().size());
  Array out;
  for (const Value& item : operand.array()) {
    const Value* a = item.object().Find(attr);
    bool result = false;
    if (a == nullptr && self_.python()) {  // Jinja2 tests the missing attribute as undefined
      Value missing;
      result = test != nullptr
                   ? ApplyTest(*test, missing, value ? &*value : nullptr, Dialect::kPython)
                   : false;
    } else if (a != nullptr) {
      result = test != nullptr ? ApplyTest(*test, *a, value ? &*value : nullptr,
                                           self_.python() ? Dialect::kPython : Dialect::kJavaScript)
                               : a->Truthy();
    }
    if (result == select) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

Value FilterApplier::CalledArray(const Value& operand, const std::string& name,
                                 const NodeList& args) {
  if (name == "selectattr" || name == "rejectattr") return SelectAttr(operand, name, args);
  std::vector<Value> positional;
  std::shared_ptr<Object> kw;
  if (name == "sort") {
    Arguments(args, positional, kw);
    Value reverse = Arg(positional, 0, kw, "reverse", Value::Bool(false));
    if (reverse.kind() != Kind::kBool) throw JinjaError{"reverse must be a boolean"};
    Value case_sensitive = Arg(positional, 1, kw, "case_sensitive", Value::Bool(false));
    if (case_sensitive.kind() != Kind::kBool) throw JinjaError{"case_sensitive must be a boolean"};
    Value attribute = Arg(positional, 2, kw, "attribute", Value::Null());
    if (!attribute.is_string() && attribute.kind() != Kind::kInt && !attribute.is_null()) {
      throw JinjaError{"attribute must be a string, integer, or null"};
    }
    auto key = [&](const Value& item) {
      if (attribute.is_null()) return item;
      return GetAttributePath(
          item, attribute.is_string() ? attribute.str() : FormatJsNumber(attribute.number()));
    };
    Array sorted = operand.array();
    self_.Charge(sorted.size() * 4);
    std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
      Value ka = key(a), kb = key(b);
      self_.Charge(CompareCost(ka, kb));
      int r = CompareValues(ka, kb, case_sensitive.boolean());
      return (reverse.boolean() ? -r : r) < 0;
    });
    return Value::MakeArray(std::move(sorted));
  }
  if (name == "map") {
    Arguments(args, positional, kw);
    const Value* attr = kw->Find("attribute");
    if (attr == nullptr) {
      throw JinjaError{"`map` expressions without `attribute` set are not currently supported."};
    }
    if (!attr->is_string()) throw JinjaError{"attribute must be a string"};
    const Value* fallback = kw->Find("default");
    Array out;
    self_.Charge(operand.array().size());
    for (const Value& item : operand.array()) {
      if (!item.is_attribute_container()) throw JinjaError{"items in map must be an object"};
      Value v = GetAttributePath(item, attr->str());
      out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
    }
    return Value::MakeArray(std::move(out));
  }
  throw JinjaError{"Unknown ArrayValue filter: " + name};
}

Value FilterApplier::Called(const Value& operand, const std::string& name, const NodeList& args) {
  std::vector<Value> positional;
  std::shared_ptr<Object> kw;
  if (name == "tojson") return ToJsonFilter(operand, args);
  if (self_.python()) {
    bool handled = false;
    Value result = PythonFilter(operand, name, &args, &handled);
    if (handled) return result;
  }
  if (name == "join") {
    std::vector<std::string> pieces;
    if (operand.is_string()) {
      for (char32_t c : ToCodePoints(operand.str())) pieces.push_back(FromCodePoint(c));
    } else if (operand.is_array_like()) {
      for (const Value& v : operand.array())
        pieces.push_back(JoinPiece(v, self_.limits().max_output_bytes));
    } else {
      throw JinjaError{"Cannot apply filter \"join\" to type: " + std::string(operand.TypeName())};
    }
    Arguments(args, positional, kw);
    Value separator = Arg(positional, 0, kw, "separator", Value::String(""));
    if (!separator.is_string()) throw JinjaError{"separator must be a string"};
    std::string out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i > 0) out += separator.str();
      out += pieces[i];
      self_.CheckStringSize(out.size());
    }
    self_.Charge(out.size() / 16 + pieces.size());
    return Value::String(std::move(out));
  }
  if (name == "int" || name == "float") {
    Arguments(args, positional, kw);
    bool is_int = name == "int";
    Value fallback = Arg(positional, 0, kw, "default", is_int ? Value::Int(0) : Value::Float(0));
    if (operand.is_string()) {
      std::optional<double> v = is_int ? JsParseInt(operand.str()) : JsParseFloat(operand.str());
      if (!v) return fallback;
      return is_int ? Value::Int(*v) : Value::Float(*v);
    }
    if (operand.is_number()) return operand;
    if (operand.kind() == Kind::kBool) {
      return is_int ? Value::Int(operand.number()) : Value::Float(operand.number());
    }
    throw JinjaError{"Cannot apply filter \"" + name + "\" to type: " + operand.TypeName()};
  }
  if (name == "default") {
    Arguments(args, positional, kw);
    Value fallback = positional.size() > 0 ? positional[0] : Value::String("");
    Value boolean = positional.size() > 1 ? positional[1] : Kw(kw, "boolean", Value::Bool(false));
    if (boolean.kind() != Kind::kBool) throw JinjaError{"`default` filter flag must be a boolean"};
    if (operand.is_undefined() || (boolean.boolean() && !operand.Truthy())) return fallback;
    return operand;
  }
  if (operand.is_array_like()) return CalledArray(operand, name, args);
  if (operand.is_string()) {
    if (name == "indent") {
      Arguments(args, positional, kw);
      Value width = Arg(positional, 0, kw, "width", Value::Int(4));
      if (width.kind() != Kind::kInt) throw JinjaError{"width must be a number"};
      if (width.number() > 1024) throw JinjaError{"indent width larger than the limit of 1024"};
      Value first = Arg(positional, 1, kw, "first", Value::Bool(false));
      Value blank = Arg(positional, 2, kw, "blank", Value::Bool(false));
      std::string out = Indent(operand.str(), width.number(), first.Truthy(), blank.Truthy(),
                               self_.limits().max_output_bytes);
      self_.CheckStringSize(out.size());
      self_.Charge(out.size() / 16);
      return Value::String(std::move(out));
    }
    if (name == "replace") {
      Arguments(args, positional, kw);
      positional.push_back(Value::MakeObject(kw, Kind::kKwargs));
      Value fn = StringBuiltin(operand, "replace");
      return self_.CallFunction(fn, positional, scope_);
    }
    throw JinjaError{"Unknown StringValue filter: " + name};
  }
  if (operand.is_object_like()) {
    Value builtin = ObjectBuiltin(operand, name);
    if (builtin.kind() == Kind::kFunction) {
      Arguments(args, positional, kw);
      if (kw->size() > 0) positional.push_back(Value::MakeObject(kw, Kind::kKwargs));
      return self_.CallFunction(builtin, positional, scope_);
    }
    throw JinjaError{"Unknown ObjectValue filter: " + name};
  }
  throw JinjaError{"Cannot apply filter \"" + name + "\" to type: " + operand.TypeName()};
}

Value Interpreter::ApplyFilter(const Value& operand, const Node& filter, Scope& scope) {
  FilterApplier applier(*this, scope);
  if (filter.kind == NodeKind::kIdentifier) return applier.Plain(operand, filter.text);
  if (filter.kind == NodeKind::kCall && filter.a->kind == NodeKind::kIdentifier) {
    return applier.Called(operand, filter.a->text, filter.args);
  }
  throw JinjaError{"Unknown filter"};
}

}  // namespace pagoda::scheduler::text::jinja
