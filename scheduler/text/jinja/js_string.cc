#include "scheduler/text/jinja/js_string.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/utf8.h"
#include "scheduler/text/jinja/error.h"

namespace pagoda::scheduler::text::jinja {
namespace {

// Decodes the character at the front of `text` (U+FFFD for an ill-formed subpart) and its length.
char32_t DecodeOne(std::string_view text, size_t* length) {
  common::Utf8Char c = common::ScanUtf8Char(text);
  *length = c.length;
  if (c.kind != common::Utf8CharKind::kValid) return 0xFFFD;
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  switch (c.length) {
    case 1:
      return b[0];
    case 2:
      return ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu);
    case 3:
      return ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu);
    default:
      return ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) | ((b[2] & 0x3Fu) << 6) |
             (b[3] & 0x3Fu);
  }
}

template <typename Fn>
void ForEachCodePoint(std::string_view s, Fn fn) {
  while (!s.empty()) {
    size_t length = 0;
    char32_t c = DecodeOne(s, &length);
    fn(c, s.substr(0, length));
    s.remove_prefix(length);
  }
}

}  // namespace

std::vector<char32_t> ToCodePoints(std::string_view utf8) {
  std::vector<char32_t> out;
  ForEachCodePoint(utf8, [&](char32_t c, std::string_view) { out.push_back(c); });
  return out;
}

std::string FromCodePoint(char32_t c) {
  std::string out;
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
  common::AppendUtf8(c, out);
  return out;
}

std::u16string ToUtf16(std::string_view utf8) {
  std::u16string out;
  out.reserve(utf8.size());
  ForEachCodePoint(utf8, [&](char32_t c, std::string_view) {
    if (c >= 0x10000) {
      c -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (c >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (c & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(c));
    }
  });
  return out;
}

std::string FromUtf16(std::u16string_view utf16) {
  std::string out;
  out.reserve(utf16.size());
  for (size_t i = 0; i < utf16.size(); ++i) {
    char32_t c = utf16[i];
    if (c >= 0xD800 && c <= 0xDBFF && i + 1 < utf16.size() && utf16[i + 1] >= 0xDC00 &&
        utf16[i + 1] <= 0xDFFF) {
      c = 0x10000 + ((c - 0xD800) << 10) + (utf16[i + 1] - 0xDC00);
      ++i;
    }
    out += FromCodePoint(c);
  }
  return out;
}

size_t Utf16Length(std::string_view utf8) {
  size_t n = 0;
  ForEachCodePoint(utf8, [&](char32_t c, std::string_view) { n += c >= 0x10000 ? 2 : 1; });
  return n;
}

std::optional<std::string> Utf16At(std::string_view utf8, double index) {
  double i = std::trunc(index);
  if (i < 0) i += static_cast<double>(Utf16Length(utf8));
  if (!(i >= 0)) return std::nullopt;
  // Walks to the code unit without building the UTF-16 string.
  double unit = 0;
  std::optional<std::string> found;
  size_t pos = 0;
  while (pos < utf8.size() && unit <= i) {
    size_t length = 0;
    char32_t c = DecodeOne(utf8.substr(pos), &length);
    if (c >= 0x10000) {
      if (unit == i || unit + 1 == i) return FromCodePoint(0xFFFD);  // half of a pair
      unit += 2;
    } else {
      if (unit == i) return FromCodePoint(c);
      unit += 1;
    }
    pos += length;
  }
  return found;
}

bool IsJsWhitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

size_t LeadingWhitespaceBytes(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = 0;
    char32_t c = DecodeOne(s.substr(pos), &length);
    if (!IsJsWhitespace(c)) break;
    pos += length;
  }
  return pos;
}

size_t TrailingNonWhitespaceEnd(std::string_view s) {
  size_t end = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = 0;
    char32_t c = DecodeOne(s.substr(pos), &length);
    pos += length;
    if (!IsJsWhitespace(c)) end = pos;
  }
  return end;
}

// Replaces ill-formed bytes by U+FFFD so that results are always well-formed.
std::string Clean(std::string_view s) {
  return common::IsValidUtf8(s) ? std::string(s) : common::SanitizeUtf8(s);
}

}  // namespace

std::string JsTrimStart(std::string_view s) { return Clean(s.substr(LeadingWhitespaceBytes(s))); }
std::string JsTrimEnd(std::string_view s) {
  return Clean(s.substr(0, TrailingNonWhitespaceEnd(s)));
}
std::string JsTrim(std::string_view s) {
  std::string_view front = s.substr(LeadingWhitespaceBytes(s));
  return Clean(front.substr(0, TrailingNonWhitespaceEnd(front)));
}

std::string JsToUpper(std::string_view s) {
  std::string out;
  icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())))
      .toUpper(icu::Locale::getRoot())
      .toUTF8String(out);
  return out;
}

std::string JsToLower(std::string_view s) {
  std::string out;
  icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())))
      .toLower(icu::Locale::getRoot())
      .toUTF8String(out);
  return out;
}

std::string JsTitleCase(std::string_view s) {
  std::string out = Clean(s);
  auto is_word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  bool prev_word = false;
  for (char& c : out) {
    bool word = is_word(c);
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    prev_word = word;
  }
  return out;
}

std::string JsCapitalize(std::string_view s) {
  std::u16string units = ToUtf16(s);
  if (units.empty()) return "";
  std::u16string_view rest = std::u16string_view(units).substr(1);
  char16_t first = units[0];
  if (first >= 0xD800 && first <= 0xDFFF) return FromUtf16(units);
  return JsToUpper(FromUtf16(std::u16string_view(&first, 1))) + FromUtf16(rest);
}

namespace {

std::string_view SkipJsWhitespace(std::string_view s) {
  return s.substr(LeadingWhitespaceBytes(s));
}

}  // namespace

std::optional<double> JsParseInt(std::string_view s) {
  s = SkipJsWhitespace(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  // strtod on the digit run rounds exactly as JavaScript's parseInt does for decimal input.
  std::string run(s.substr(0, digits));
  double value = std::strtod(run.c_str(), nullptr);
  return negative ? -value : value;
}

std::optional<double> JsParseFloat(std::string_view s) {
  s = SkipJsWhitespace(s);
  size_t pos = 0;
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
  if (s.substr(pos, 8) == "Infinity") {
    return s[0] == '-' ? -INFINITY : INFINITY;
  }
  size_t int_digits = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos, ++int_digits;
  size_t frac_digits = 0;
  if (pos < s.size() && s[pos] == '.') {
    size_t dot = pos++;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos, ++frac_digits;
    if (frac_digits == 0) pos = dot + 1;  // "1." is 1
  }
  if (int_digits == 0 && frac_digits == 0) return std::nullopt;
  if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
    size_t e = pos + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    size_t exp_digits = 0;
    while (e < s.size() && s[e] >= '0' && s[e] <= '9') ++e, ++exp_digits;
    if (exp_digits > 0) pos = e;
  }
  std::string number(s.substr(0, pos));
  return std::strtod(number.c_str(), nullptr);
}

std::string JsonQuote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[8];
  ForEachCodePoint(s, [&](char32_t c, std::string_view bytes) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      default:
        break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else if (ensure_ascii && c >= 0x7F) {
      std::u16string units = ToUtf16(FromCodePoint(c));
      for (char16_t u : units) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(u));
        out += buf;
      }
    } else if (c == 0xFFFD) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes);
    }
  });
  out += '"';
  return out;
}

size_t FindLinear(std::string_view haystack, std::string_view needle, size_t from) {
  if (from > haystack.size()) return std::string_view::npos;
  // Short needles: the library search costs at most needle.size() per position.
  if (needle.size() <= 32) return haystack.find(needle, from);
  // Knuth-Morris-Pratt.
  std::vector<size_t> fail(needle.size(), 0);
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (size_t i = from, k = 0; i < haystack.size(); ++i) {
    while (k > 0 && haystack[i] != needle[k]) k = fail[k - 1];
    if (haystack[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - needle.size();
  }
  return std::string_view::npos;
}

std::string JsReplace(std::string_view s, std::string_view from, std::string_view to, double count,
                      size_t max_bytes) {
  std::string src = Clean(s);
  if (count == 0) return src;
  double remaining = count < 0 ? INFINITY : count;
  std::string out;
  auto append = [&](std::string_view piece) {
    if (out.size() + piece.size() > max_bytes) {
      throw JinjaError{"string result longer than the limit of " + std::to_string(max_bytes) +
                       " bytes"};
    }
    out.append(piece);
  };
  if (from.empty()) {
    // The empty pattern matches before every code point and at the end.
    size_t pos = 0;
    while (true) {
      if (remaining > 0) {
        append(to);
        --remaining;
      }
      if (pos >= src.size()) break;
      size_t length = 0;
      DecodeOne(std::string_view(src).substr(pos), &length);
      append(std::string_view(src).substr(pos, length));
      pos += length;
    }
    return out;
  }
  size_t pos = 0;
  while (remaining > 0) {
    size_t hit = FindLinear(src, from, pos);
    if (hit == std::string::npos) break;
    append(std::string_view(src).substr(pos, hit - pos));
    append(to);
    pos = hit + from.size();
    --remaining;
  }
  append(std::string_view(src).substr(pos));
  return out;
}

}  // namespace pagoda::scheduler::text::jinja
