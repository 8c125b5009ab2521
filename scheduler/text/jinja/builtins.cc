// Filters, tests, the methods of strings and objects, and the time formatting of strftime_now,
// with the reference's behaviour (which filter applies to which type, and its error messages).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "scheduler/text/jinja/interpreter.h"
#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/python_string.h"

namespace pagoda::scheduler::text::jinja {
namespace {

Value Fn(Function fn) { return Value::MakeFunction(std::move(fn)); }

// Positional arguments and the trailing keyword arguments of a builtin call.
struct CallArgs {
  explicit CallArgs(std::vector<Value>& args) {
    for (const Value& a : args) {
      if (a.kind() == Kind::kKwargs) {
        kwargs = &a.object();
      } else {
        positional.push_back(a);
      }
    }
  }
  // args[i] or kwargs[name] or `fallback`.
  Value Get(size_t i, std::string_view name, Value fallback) const {
    if (i < positional.size()) return positional[i];
    if (kwargs != nullptr && kwargs->Find(name) != nullptr) return *kwargs->Find(name);
    return fallback;
  }
  std::vector<Value> positional;
  const Object* kwargs = nullptr;
};

Value StringSplit(const std::string& s, std::vector<Value>& args) {
  Value sep = args.size() > 0 ? args[0] : Value::Null();
  if (!sep.is_string() && !sep.is_null()) throw JinjaError{"sep argument must be a string or null"};
  Value maxsplit = args.size() > 1 ? args[1] : Value::Int(-1);
  if (maxsplit.kind() != Kind::kInt) throw JinjaError{"maxsplit argument must be a number"};
  double max = maxsplit.number();
  Array out;
  if (sep.is_null()) {
    std::string text = JsTrimStart(s);
    std::vector<char32_t> cps = ToCodePoints(text);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsJsWhitespace(cps[i])) ++i;
      if (i >= cps.size()) break;
      std::string word;
      if (max != -1 && static_cast<double>(out.size()) >= max) {
        for (; i < cps.size(); ++i) word += FromCodePoint(cps[i]);
        out.push_back(Value::String(word));
        break;
      }
      for (; i < cps.size() && !IsJsWhitespace(cps[i]); ++i) word += FromCodePoint(cps[i]);
      out.push_back(Value::String(word));
    }
    return Value::MakeArray(std::move(out));
  }
  if (sep.str().empty()) throw JinjaError{"empty separator"};
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t hit = FindLinear(s, sep.str(), pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.str().size();
  }
  parts.push_back(s.substr(pos));
  if (max != -1 && static_cast<double>(parts.size()) > max) {
    size_t keep = max < 0 ? 0 : static_cast<size_t>(max);
    std::string rest;
    for (size_t i = keep; i < parts.size(); ++i) rest += (i > keep ? sep.str() : "") + parts[i];
    parts.resize(keep);
    parts.push_back(rest);
  }
  for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::MakeArray(std::move(out));
}

Value AffixTest(const std::string& s, std::vector<Value>& args, bool starts, const char* name) {
  if (args.empty()) throw JinjaError{std::string(name) + "() requires at least one argument"};
  auto check = [&](const std::string& affix) {
    if (affix.size() > s.size()) return false;
    return starts ? s.compare(0, affix.size(), affix) == 0
                  : s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
  };
  const Value& pattern = args[0];
  if (pattern.is_string()) return Value::Bool(check(pattern.str()));
  if (pattern.is_array_like()) {
    for (const Value& item : pattern.array()) {
      if (!item.is_string())
        throw JinjaError{std::string(name) + "() tuple elements must be strings"};
      if (check(item.str())) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  throw JinjaError{std::string(name) + "() argument must be a string or tuple of strings"};
}

Value StringReplace(const std::string& s, std::vector<Value>& args, Interpreter& self) {
  if (args.size() < 2) throw JinjaError{"replace() requires at least two arguments"};
  if (!args[0].is_string() || !args[1].is_string()) {
    throw JinjaError{"replace() arguments must be strings"};
  }
  Value count = Value::Null();
  if (args.size() > 2) {
    if (args[2].kind() == Kind::kKwargs) {
      const Value* c = args[2].object().Find("count");
      count = c ? *c : Value::Null();
    } else {
      count = args[2];
    }
  }
  if (count.kind() != Kind::kInt && !count.is_null()) {
    throw JinjaError{"replace() count argument must be a number or null"};
  }
  double n = count.is_null() ? -1 : count.number();
  std::string out = JsReplace(s, args[0].str(), args[1].str(), n, self.limits().max_output_bytes);
  self.Charge(out.size() / 16);
  return Value::String(std::move(out));
}

}  // namespace

Value StringBuiltin(const Value& receiver, std::string_view name) {
  const std::string s = receiver.str();
  auto unary = [&](std::string (*f)(std::string_view)) {
    return Fn([s, f](std::vector<Value>&, Interpreter&, Scope&) { return Value::String(f(s)); });
  };
  if (name == "upper") return unary(JsToUpper);
  if (name == "lower") return unary(JsToLower);
  if (name == "title") return unary(JsTitleCase);
  if (name == "capitalize") return unary(JsCapitalize);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    // The reference ignores the argument and trims whitespace; Python strips the characters
    // given (whitespace for none).
    bool left = name != "rstrip", right = name != "lstrip";
    return Fn([s, left, right](std::vector<Value>& args, Interpreter& self, Scope&) {
      self.Charge(s.size() / 16 + (!args.empty() ? args[0].str().size() / 16 : 0));
      if (!self.python()) {
        return Value::String(left && right ? JsTrim(s) : left ? JsTrimStart(s) : JsTrimEnd(s));
      }
      if (!args.empty() && !args[0].is_string() && !args[0].is_null()) {
        throw JinjaError{"strip arg must be None or str"};
      }
      const std::string* chars = !args.empty() && args[0].is_string() ? &args[0].str() : nullptr;
      return Value::String(PythonStrip(s, chars, left, right));
    });
  }
  if (name == "length") return Value::Int(static_cast<double>(Utf16Length(s)));
  if (name == "startswith" || name == "endswith") {
    bool starts = name == "startswith";
    return Fn([s, starts](std::vector<Value>& args, Interpreter&, Scope&) {
      return AffixTest(s, args, starts, starts ? "startswith" : "endswith");
    });
  }
  if (name == "split") {
    return Fn([s](std::vector<Value>& args, Interpreter& self, Scope&) {
      self.Charge(s.size() / 16);
      return StringSplit(s, args);
    });
  }
  if (name == "replace") {
    return Fn([s](std::vector<Value>& args, Interpreter& self, Scope&) {
      return StringReplace(s, args, self);
    });
  }
  return Value();
}

namespace {

Value Items(const Object& object) {
  Array items;
  for (const auto& [key, value] : object.entries()) {
    items.push_back(Value::MakeArray({Value::String(key), value}));
  }
  return Value::MakeArray(std::move(items));
}

Value DictSort(const Value& receiver, std::vector<Value>& raw_args, Interpreter& self) {
  CallArgs args(raw_args);
  Value case_sensitive = args.Get(0, "case_sensitive", Value::Bool(false));
  if (case_sensitive.kind() != Kind::kBool) throw JinjaError{"case_sensitive must be a boolean"};
  Value by = args.Get(1, "by", Value::String("key"));
  if (!by.is_string()) throw JinjaError{"by must be a string"};
  if (by.str() != "key" && by.str() != "value") {
    throw JinjaError{"by must be either 'key' or 'value'"};
  }
  Value reverse = args.Get(2, "reverse", Value::Bool(false));
  if (reverse.kind() != Kind::kBool) throw JinjaError{"reverse must be a boolean"};
  Array items = Items(receiver.object()).array();
  size_t index = by.str() == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    self.Charge(CompareCost(a.array()[index], b.array()[index]));
    int r = CompareValues(a.array()[index], b.array()[index], case_sensitive.boolean());
    return (reverse.boolean() ? -r : r) < 0;
  });
  return Value::MakeArray(std::move(items));
}

}  // namespace

Value ObjectBuiltin(const Value& receiver, std::string_view name) {
  if (name == "get") {
    return Fn([receiver](std::vector<Value>& args, Interpreter&, Scope&) {
      if (args.empty() || !args[0].is_string()) {
        throw JinjaError{std::string("Object key must be a string: got ") +
                         (args.empty() ? "undefined" : args[0].TypeName())};
      }
      if (const Value* v = receiver.object().Find(args[0].str())) return *v;
      return args.size() > 1 ? args[1] : Value::Null();
    });
  }
  if (name == "items") {
    return Fn([receiver](std::vector<Value>&, Interpreter& self, Scope&) {
      self.Charge(receiver.object().size());
      return Items(receiver.object());
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return Fn([receiver, keys](std::vector<Value>&, Interpreter& self, Scope&) {
      self.Charge(receiver.object().size());
      Array out;
      for (const auto& [key, value] : receiver.object().entries()) {
        out.push_back(keys ? Value::String(key) : value);
      }
      return Value::MakeArray(std::move(out));
    });
  }
  if (name == "dictsort") {
    return Fn([receiver](std::vector<Value>& args, Interpreter& self, Scope&) {
      self.Charge(receiver.object().size() * 4);
      return DictSort(receiver, args, self);
    });
  }
  return Value();
}

bool IsKnownTest(std::string_view name) {
  static const char* const kTests[] = {"boolean",  "callable",  "odd",      "even",   "false",
                                       "true",     "none",      "string",   "number", "integer",
                                       "iterable", "mapping",   "sequence", "lower",  "upper",
                                       "defined",  "undefined", "equalto",  "eq"};
  for (const char* test : kTests) {
    if (name == test) return true;
  }
  return false;
}

bool ApplyTest(std::string_view name, const Value& v, const Value* argument, Dialect dialect) {
  Kind k = v.kind();
  const bool python = dialect == Dialect::kPython;
  if (name == "boolean") return k == Kind::kBool;
  if (name == "callable") return k == Kind::kFunction;
  if (name == "odd" || name == "even") {
    if (k != Kind::kInt) throw JinjaError{"cannot " + std::string(name) + " on " + v.TypeName()};
    bool odd = std::fmod(v.number(), 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "false") return k == Kind::kBool && !v.boolean();
  if (name == "true") return k == Kind::kBool && v.boolean();
  if (name == "none") return k == Kind::kNull;
  if (name == "string") return k == Kind::kString;
  if (name == "number") return v.is_number() || (python && k == Kind::kBool);  // bool is an int
  if (name == "integer") return k == Kind::kInt;
  if (name == "iterable") {
    return k == Kind::kArray || k == Kind::kString ||
           (python && (k == Kind::kTuple || v.is_object_like()));
  }
  if (name == "mapping") return v.is_object_like();
  if (name == "sequence") return v.is_array_like() || v.is_object_like() || v.is_string();
  if (name == "lower") return k == Kind::kString && v.str() == JsToLower(v.str());
  if (name == "upper") return k == Kind::kString && v.str() == JsToUpper(v.str());
  if (name == "defined") return k != Kind::kUndefined;
  if (name == "undefined") return k == Kind::kUndefined;
  if (name == "equalto" || name == "eq") {
    if (argument == nullptr)
      throw JinjaError{"Cannot read properties of undefined (reading 'value')"};
    return StrictEquals(v, *argument);
  }
  if (name == "in" && python) {  // the reference has no `in` test
    if (argument == nullptr) throw JinjaError{"test_in() missing 1 required argument: 'seq'"};
    if (argument->is_array_like()) {
      return std::any_of(argument->array().begin(), argument->array().end(),
                         [&v](const Value& item) { return StrictEquals(item, v); });
    }
    if (argument->is_attribute_container()) {
      return v.is_string() && argument->object().Find(v.str()) != nullptr;
    }
    if (argument->is_string() && v.is_string()) {
      return FindLinear(argument->str(), v.str()) != std::string::npos;
    }
    throw JinjaError{std::string("argument of type '") + argument->TypeName() +
                     "' is not iterable"};
  }
  throw JinjaError{"Unknown test: " + std::string(name)};
}

Value GetAttributePath(const Value& item, std::string_view path) {
  Value value = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (value.is_attribute_container()) {
      const Value* found = value.object().Find(part);
      value = found ? *found : Value();
    } else if (value.is_array_like()) {
      std::optional<double> index = JsParseInt(part);
      if (!index || *index < 0 || *index >= static_cast<double>(value.array().size())) {
        return Value();
      }
      value = value.array()[static_cast<size_t>(*index)];
    } else {
      return Value();
    }
    if (dot == std::string_view::npos) return value;
    start = dot + 1;
  }
}

uint64_t CompareCost(const Value& a, const Value& b) {
  return 1 + (a.str().size() + b.str().size()) / 16;
}

int CompareValues(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_null() && b.is_null()) return 0;
  if (a.is_null() || b.is_null() || (a.is_undefined() != b.is_undefined())) {
    throw JinjaError{std::string("Cannot compare ") + a.TypeName() + " with " + b.TypeName()};
  }
  if (a.is_undefined()) return 0;
  auto numeric = [](const Value& v) {
    return v.kind() == Kind::kInt || v.kind() == Kind::kFloat || v.kind() == Kind::kBool;
  };
  if (numeric(a) && numeric(b)) {
    return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  }
  if (a.kind() != b.kind()) {
    throw JinjaError{std::string("Cannot compare different types: ") + a.TypeName() + " and " +
                     b.TypeName()};
  }
  if (!a.is_string()) throw JinjaError{std::string("Cannot compare type: ") + a.TypeName()};
  std::u16string x = ToUtf16(case_sensitive ? a.str() : JsToLower(a.str()));
  std::u16string y = ToUtf16(case_sensitive ? b.str() : JsToLower(b.str()));
  return x < y ? -1 : x > y ? 1 : 0;
}

std::string FormatTime(std::chrono::system_clock::time_point now, std::string_view format) {
  static const char* const kLong[] = {"January",   "February", "March",    "April",
                                      "May",       "June",     "July",     "August",
                                      "September", "October",  "November", "December"};
  static const char* const kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  auto pad2 = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    char c = format[i + 1];
    switch (c) {
      case 'Y':
        out += std::to_string(tm.tm_year + 1900);
        break;
      case 'm':
        out += pad2(tm.tm_mon + 1);
        break;
      case 'd':
        out += pad2(tm.tm_mday);
        break;
      case 'b':
        out += kShort[tm.tm_mon];
        break;
      case 'B':
        out += kLong[tm.tm_mon];
        break;
      case 'H':
        out += pad2(tm.tm_hour);
        break;
      case 'M':
        out += pad2(tm.tm_min);
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        continue;  // not a directive: keep the '%' and read c normally
    }
    ++i;
  }
  return out;
}

}  // namespace pagoda::scheduler::text::jinja
