#include "scheduler/text/jinja/python_string.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <vector>

#include "scheduler/text/jinja/js_string.h"

namespace pagoda::scheduler::text::jinja {
namespace {

// Py_UNICODE_ISPRINTABLE: everything but the categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs
// (except the space itself).
bool IsPrintable(char32_t c) {
  if (c == U' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

void AppendHex(std::string& out, char prefix, uint32_t value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\%c%0*x", prefix, digits, value);
  out += buf;
}

// repr(str): single quotes unless the text has a single quote and no double quote.
std::string StringRepr(std::string_view s) {
  std::vector<char32_t> cps = ToCodePoints(s);
  bool has_single = std::find(cps.begin(), cps.end(), U'\'') != cps.end();
  bool has_double = std::find(cps.begin(), cps.end(), U'"') != cps.end();
  char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out(1, static_cast<char>(quote));
  for (char32_t c : cps) {
    if (c == quote || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < U' ' || c == 0x7F) {
      AppendHex(out, 'x', c, 2);
    } else if (c < 0x7F || IsPrintable(c)) {
      out += FromCodePoint(c);
    } else if (c <= 0xFF) {
      AppendHex(out, 'x', c, 2);
    } else if (c <= 0xFFFF) {
      AppendHex(out, 'u', c, 4);
    } else {
      AppendHex(out, 'U', c, 8);
    }
  }
  out += static_cast<char>(quote);
  return out;
}

std::string FormatPythonInt(double value) {
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.0f", value);
  return buf;
}

class ReprWriter {
 public:
  explicit ReprWriter(size_t max_bytes) : max_bytes_(max_bytes) {}

  void Write(const Value& v) {
    switch (v.kind()) {
      case Kind::kUndefined:
        Append("Undefined");
        return;
      case Kind::kNull:
        Append("None");
        return;
      case Kind::kBool:
        Append(v.boolean() ? "True" : "False");
        return;
      case Kind::kInt:
        Append(FormatPythonInt(v.number()));
        return;
      case Kind::kFloat:
        Append(FormatPythonFloat(v.number()));
        return;
      case Kind::kString:
        Append(StringRepr(v.str()));
        return;
      case Kind::kArray:
      case Kind::kTuple: {
        bool tuple = v.kind() == Kind::kTuple;
        Append(tuple ? "(" : "[");
        for (size_t i = 0; i < v.array().size(); ++i) {
          if (i > 0) Append(", ");
          Write(v.array()[i]);
        }
        if (tuple && v.array().size() == 1) Append(",");
        Append(tuple ? ")" : "]");
        return;
      }
      case Kind::kNamespace:
        Append("<Namespace ");
        WriteDict(v.object());
        Append(">");
        return;
      case Kind::kObject:
      case Kind::kKwargs:
        WriteDict(v.object());
        return;
      case Kind::kFunction:
        Append("<Macro>");
        return;
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  void WriteDict(const Object& object) {
    Append("{");
    bool first = true;
    for (const auto& [key, value] : object.entries()) {
      if (!first) Append(", ");
      first = false;
      Append(StringRepr(key));
      Append(": ");
      Write(value);
    }
    Append("}");
  }

  void Append(std::string_view text) {
    out_ += text;
    if (out_.size() > max_bytes_) {
      throw JinjaError{"text longer than the limit of " + std::to_string(max_bytes_) + " bytes"};
    }
  }

  size_t max_bytes_;
  std::string out_;
};

}  // namespace

std::string FormatPythonFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  const ShortestDecimal d = ToShortestDecimal(value);
  std::string out = d.negative ? "-" : "";
  const std::string& digits = d.digits;
  const int exponent = d.exponent;
  int k = static_cast<int>(digits.size());
  int point = exponent + 1;  // digits before the decimal point
  if (-4 < point && point <= 16) {
    // Positional, with at least one digit on each side of the point.
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= k) {
      out += digits + std::string(point - k, '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

std::string PythonRepr(const Value& value, size_t max_bytes) {
  ReprWriter writer(max_bytes);
  writer.Write(value);
  return writer.Take();
}

std::string ToPythonString(const Value& value, size_t max_bytes) {
  if (value.is_undefined()) return "";
  if (value.is_string()) return value.str();
  return PythonRepr(value, max_bytes);
}

bool IsPythonWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PythonStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> cps = ToCodePoints(s);
  std::unordered_set<char32_t> set;  // linear time in both lengths, whatever the input
  if (chars != nullptr) {
    for (char32_t c : ToCodePoints(*chars)) set.insert(c);
  }
  auto strip = [&](char32_t c) {
    return chars == nullptr ? IsPythonWhitespace(c) : set.count(c) > 0;
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out += FromCodePoint(cps[i]);
  return out;
}

}  // namespace pagoda::scheduler::text::jinja
