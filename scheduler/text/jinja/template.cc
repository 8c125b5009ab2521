#include "scheduler/text/jinja/template.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/status_macros.h"
#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/lexer.h"
#include "scheduler/text/jinja/parser.h"

namespace pagoda::scheduler::text::jinja {
namespace {

constexpr int kMaxJsonDepth = 256;

// "0".."4294967294" without leading zeros: JavaScript orders these keys first, numerically.
bool IsArrayIndexKey(const std::string& key, double* index) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  double v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > 4294967294.0) return false;
  *index = v;
  return true;
}

// `js_key_order` (the JavaScript dialect): integer-like keys first and integral floats as
// integers, as JSON.parse builds a JavaScript object; otherwise (Python's json.loads) the JSON's
// key order, and a number with a fraction or exponent (1.0) stays a float.
Value Convert(const nlohmann::ordered_json& json, int depth, bool js_key_order = true) {
  if (depth > kMaxJsonDepth) {
    throw JinjaError{"JSON input nested deeper than the limit of " + std::to_string(kMaxJsonDepth)};
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::Null();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
    case nlohmann::ordered_json::value_t::number_float: {
      double n = json.get<double>();
      if (!js_key_order && json.is_number_float()) return Value::Float(n);  // 1.0 stays a float
      return std::isfinite(n) && n == std::trunc(n) ? Value::Int(n) : Value::Float(n);
    }
    case nlohmann::ordered_json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      for (const auto& item : json) items.push_back(Convert(item, depth + 1, js_key_order));
      return Value::MakeArray(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      if (!js_key_order) {
        auto object = std::make_shared<Object>();
        for (const auto& [key, value] : json.items()) {
          object->Set(key, Convert(value, depth + 1, js_key_order));
        }
        return Value::MakeObject(std::move(object));
      }
      std::vector<std::pair<double, std::string>> index_keys;
      double index = 0;
      for (const auto& [key, value] : json.items()) {
        if (IsArrayIndexKey(key, &index)) index_keys.emplace_back(index, key);
      }
      std::sort(index_keys.begin(), index_keys.end());
      auto object = std::make_shared<Object>();
      for (const auto& [i, key] : index_keys) object->Set(key, Convert(json.at(key), depth + 1));
      for (const auto& [key, value] : json.items()) {
        if (!IsArrayIndexKey(key, &index)) object->Set(key, Convert(value, depth + 1));
      }
      return Value::MakeObject(std::move(object));
    }
    default:
      return Value();
  }
}

Value RaiseException(std::vector<Value>& args, Interpreter&, Scope&) {
  std::string message;
  if (!args.empty() && !args[0].is_undefined())
    message = ToConcatString(args[0], kMaxTemplateBytes);
  throw JinjaError{message};
}

// range(start, stop, step) with the reference's JavaScript semantics: arguments read as numbers
// (a missing or non-numeric bound gives an empty list), a missing stop makes start the stop.
Value Range(std::vector<Value>& args, Interpreter& self, Scope&) {
  Value none;
  const Value& start_arg = args.size() > 0 ? args[0] : none;
  const Value& stop_arg = args.size() > 1 ? args[1] : none;
  const Value& step_arg = args.size() > 2 ? args[2] : none;
  double start = JsToNumber(start_arg);
  double stop = JsToNumber(stop_arg);
  if (stop_arg.is_undefined()) {
    stop = start;
    start = 0;
  }
  double step = step_arg.is_undefined() ? 1 : JsToNumber(step_arg);
  if (step == 0 && step_arg.is_number()) throw JinjaError{"range() step must not be zero"};
  double count = 0;
  if (step > 0 && start < stop) count = std::ceil((stop - start) / step);
  if (step < 0 && start > stop) count = std::ceil((start - stop) / -step);
  if ((step == 0 || std::isnan(step)) && start != stop) count = INFINITY;
  if (count > static_cast<double>(self.limits().max_range)) {
    throw JinjaError{"range() of more than the limit of " +
                     std::to_string(self.limits().max_range) + " items"};
  }
  Array items;
  for (double i = start; static_cast<double>(items.size()) < count; i += step) {
    items.push_back(std::isfinite(i) && i == std::trunc(i) ? Value::Int(i) : Value::Float(i));
  }
  self.Charge(items.size());
  return Value::MakeArray(std::move(items));
}

Value StrftimeNow(std::vector<Value>& args, Interpreter& self, Scope&) {
  if (args.empty() || !args[0].is_string())
    throw JinjaError{"strftime_now() needs a format string"};
  return Value::String(FormatTime(self.now(), args[0].str()));
}

Value NamespaceEntry(const Value& pair, std::string* key) {
  Array values;
  if (pair.is_array_like()) {
    values = pair.array();
  } else if (pair.is_string()) {
    for (char32_t c : ToCodePoints(pair.str())) values.push_back(Value::String(FromCodePoint(c)));
  }
  if (values.size() != 2) {
    throw JinjaError{"namespace expected an object or an iterable of [key, value] pairs"};
  }
  if (!values[0].is_string()) throw JinjaError{"namespace keys must be strings"};
  *key = values[0].str();
  return values[1];
}

Value MakeNamespace(std::vector<Value>& args, Interpreter& self, Scope&) {
  std::vector<Value> positional = args;
  const Object* kwargs = nullptr;
  if (!positional.empty() && positional.back().kind() == Kind::kKwargs) {
    kwargs = &positional.back().object();
  }
  size_t count = positional.size() - (kwargs != nullptr ? 1 : 0);
  if (count > 1) {
    throw JinjaError{"namespace expected at most 1 argument, got " + std::to_string(count)};
  }
  auto entries = std::make_shared<Object>();
  if (count == 1) {
    const Value& source = positional[0];
    if (source.is_object_like()) {
      for (const auto& [key, value] : source.object().entries()) entries->Set(key, value);
    } else if (source.is_array_like()) {
      for (const Value& pair : source.array()) {
        std::string key;
        Value value = NamespaceEntry(pair, &key);
        entries->Set(key, value);
      }
    } else {
      throw JinjaError{std::string("'") + source.TypeName() + "' object is not iterable"};
    }
  }
  if (kwargs != nullptr) {
    for (const auto& [key, value] : kwargs->entries()) entries->Set(key, value);
  }
  Value ns = Value::MakeObject(std::move(entries), Kind::kNamespace);
  self.RegisterNamespace(ns);
  return ns;
}

void InstallGlobals(Scope& globals) {
  globals.Set("false", Value::Bool(false));
  globals.Set("true", Value::Bool(true));
  globals.Set("none", Value::Null());
  globals.Set("False", Value::Bool(false));
  globals.Set("True", Value::Bool(true));
  globals.Set("None", Value::Null());
  globals.Set("raise_exception", Value::MakeFunction(RaiseException));
  globals.Set("range", Value::MakeFunction(Range));
  globals.Set("strftime_now", Value::MakeFunction(StrftimeNow));
  globals.Set("namespace", Value::MakeFunction(MakeNamespace));
}

}  // namespace

absl::StatusOr<Value> JsonToValue(const nlohmann::ordered_json& json) {
  try {
    return Convert(json, 0);
  } catch (const JinjaError& e) {
    return absl::InvalidArgumentError(e.message);
  }
}

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return absl::InvalidArgumentError("chat template is " + std::to_string(source.size()) +
                                      " bytes, over the limit of " +
                                      std::to_string(kMaxTemplateBytes));
  }
  try {
    Template t;
    t.program_ = std::make_shared<const NodeList>(jinja::Parse(Tokenize(source)));
    return t;
  } catch (const JinjaError& e) {
    return absl::InvalidArgumentError("chat template syntax error: " + e.message);
  }
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                             const RenderLimits& limits,
                                             std::chrono::system_clock::time_point now,
                                             Dialect dialect) const {
  if (!context.is_object()) return absl::InvalidArgumentError("template context must be an object");
  try {
    Interpreter interpreter(limits, now, dialect);
    InstallGlobals(interpreter.globals());
    for (const auto& [key, value] : context.items()) {
      interpreter.globals().Set(key, Convert(value, 1, dialect == Dialect::kJavaScript));
    }
    return interpreter.Run(*program_);
  } catch (const JinjaError& e) {
    return absl::InvalidArgumentError(e.message);
  }
}

}  // namespace pagoda::scheduler::text::jinja
