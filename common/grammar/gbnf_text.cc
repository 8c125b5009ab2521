#include "common/grammar/gbnf_text.h"

#include <algorithm>
#include <cstdio>

namespace pagoda::grammar::internal {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

std::string Hex(uint32_t c, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*X", digits, c);
  return buf;
}

// One code point inside a class.
std::string ClassChar(uint32_t c) {
  switch (c) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\\':
      return "\\\\";
    case ']':
      return "\\]";
    case '[':
      return "\\[";
    case '-':
      return "\\-";
    case '"':
      return "\\\"";
    case '^':
      return "\\x5E";
    default:
      break;
  }
  if (c < 0x20 || c == 0x7F) return "\\x" + Hex(c, 2);
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  if (c <= 0xFFFF) return "\\u" + Hex(c, 4);
  std::string out;
  AppendUtf8(c, &out);
  return out;
}

std::string ClassBody(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::string out;
  for (const auto& [lo, hi] : ranges) {
    out += ClassChar(lo);
    if (hi == lo + 1) {
      out += ClassChar(hi);
    } else if (hi > lo) {
      out += "-" + ClassChar(hi);
    }
  }
  return out;
}

}  // namespace

CodePointSet CodePointSet::Range(uint32_t lo, uint32_t hi) {
  CodePointSet s;
  s.Add(lo, hi);
  return s;
}

CodePointSet CodePointSet::All() {
  CodePointSet s;
  s.ranges_ = {{0, kSurrogateLo - 1}, {kSurrogateHi + 1, kMaxCodePoint}};
  return s;
}

void CodePointSet::Add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  // Surrogates are never members: split around them.
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) Add(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) Add(kSurrogateHi + 1, hi);
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(ranges_.size() + 1);
  bool placed = false;
  for (const auto& r : ranges_) {
    if (r.second + 1 < lo) {
      out.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) {
        out.emplace_back(lo, hi);
        placed = true;
      }
      out.push_back(r);
    } else {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) out.emplace_back(lo, hi);
  ranges_ = std::move(out);
}

void CodePointSet::Add(const CodePointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) Add(lo, hi);
}

CodePointSet CodePointSet::Complement() const { return All().Minus(*this); }

CodePointSet CodePointSet::Intersect(const CodePointSet& other) const {
  CodePointSet out;
  for (const auto& a : ranges_) {
    for (const auto& b : other.ranges_) {
      uint32_t lo = std::max(a.first, b.first);
      uint32_t hi = std::min(a.second, b.second);
      if (lo <= hi) out.Add(lo, hi);
    }
  }
  return out;
}

CodePointSet CodePointSet::Minus(const CodePointSet& other) const {
  CodePointSet out;
  for (auto [lo, hi] : ranges_) {
    uint32_t cur = lo;
    bool done = false;
    for (const auto& b : other.ranges_) {
      if (b.second < cur || b.first > hi) continue;
      if (b.first > cur) out.Add(cur, b.first - 1);
      if (b.second >= hi) {
        done = true;
        break;
      }
      cur = b.second + 1;
    }
    if (!done) out.Add(cur, hi);
  }
  return out;
}

bool CodePointSet::Contains(uint32_t c) const {
  for (const auto& [lo, hi] : ranges_) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

int64_t CodePointSet::Single() const {
  if (ranges_.size() == 1 && ranges_[0].first == ranges_[0].second) return ranges_[0].first;
  return -1;
}

std::string GbnfLiteral(std::string_view s) {
  std::string out = "\"";
  size_t pos = 0;
  while (pos < s.size()) {
    int64_t c = DecodeUtf8(s, &pos);
    if (c < 0) {  // not reached for valid input; keep the output well-formed anyway
      out += "\\x" + Hex(static_cast<unsigned char>(s[pos]), 2);
      ++pos;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\x" + Hex(static_cast<uint32_t>(c), 2);
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (c <= 0xFFFF) {
          out += "\\u" + Hex(static_cast<uint32_t>(c), 4);
        } else {
          AppendUtf8(static_cast<uint32_t>(c), &out);
        }
    }
  }
  return out + "\"";
}

std::string GbnfCharClass(const CodePointSet& set) {
  if (int64_t c = set.Single(); c >= 0) {
    std::string utf8;
    AppendUtf8(static_cast<uint32_t>(c), &utf8);
    return GbnfLiteral(utf8);
  }
  // The negated form lists the complement; surrogates may join it for free (they never match).
  CodePointSet excluded = set.Complement();
  std::vector<std::pair<uint32_t, uint32_t>> listed = excluded.ranges();
  // Merge ranges that only the surrogate gap separates.
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : listed) {
    if (!merged.empty() && merged.back().second + 1 == kSurrogateLo &&
        r.first == kSurrogateHi + 1) {
      merged.back().second = r.second;
    } else {
      merged.push_back(r);
    }
  }
  if (!excluded.empty() && merged.size() < set.ranges().size()) {
    return "[^" + ClassBody(merged) + "]";
  }
  return "[" + ClassBody(set.ranges()) + "]";
}

std::string JsonCharGbnf(const CodePointSet& set) {
  std::vector<std::string> alternatives;
  CodePointSet raw = set.Intersect(CodePointSet::Range(0x20, kMaxCodePoint))
                         .Minus(CodePointSet::Of('"'))
                         .Minus(CodePointSet::Of('\\'));
  if (!raw.empty()) alternatives.push_back(GbnfCharClass(raw));
  // Escapes with a letter (or the character itself) after the backslash.
  std::string short_escapes;
  static constexpr std::pair<uint32_t, char> kShort[] = {
      {'"', '"'}, {'\\', '\\'}, {0x08, 'b'}, {0x0C, 'f'}, {0x0A, 'n'}, {0x0D, 'r'}, {0x09, 't'}};
  for (const auto& [c, letter] : kShort) {
    if (set.Contains(c)) short_escapes += letter;
  }
  if (short_escapes.size() == 1) {
    alternatives.push_back(GbnfLiteral(std::string("\\") + short_escapes));
  } else if (!short_escapes.empty()) {
    CodePointSet letters;
    for (char l : short_escapes)
      letters.Add(static_cast<unsigned char>(l), static_cast<unsigned char>(l));
    alternatives.push_back("\"\\\\\" " + GbnfCharClass(letters));
  }
  // The other control characters: \u00xx.
  std::vector<uint32_t> unicode_escapes;
  for (uint32_t c = 0; c < 0x20; ++c) {
    bool has_short = c == 0x08 || c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D;
    if (!has_short && set.Contains(c)) unicode_escapes.push_back(c);
  }
  if (unicode_escapes.size() == 27) {
    alternatives.push_back("\"\\\\u00\" ( \"0\" [0-7bef] | \"1\" [0-9a-f] )");
  } else {
    for (uint32_t c : unicode_escapes) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      alternatives.push_back(GbnfLiteral(buf));
    }
  }
  // One element, so that a quantifier may follow: a sequence gets parentheses.
  if (alternatives.size() == 1 && alternatives[0].find(' ') == std::string::npos) {
    return alternatives[0];
  }
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) {
    out += (i == 0 ? " " : " | ") + alternatives[i];
  }
  return out + " )";
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case 0x08:
        out += "\\b";
        break;
      case 0x0C:
        out += "\\f";
        break;
      case 0x0A:
        out += "\\n";
        break;
      case 0x0D:
        out += "\\r";
        break;
      case 0x09:
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

int64_t DecodeUtf8(std::string_view s, size_t* pos) {
  size_t i = *pos;
  if (i >= s.size()) return -1;
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  int len;
  uint32_t c;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return -1;
  }
  if (i + len > s.size()) return -1;
  for (int k = 1; k < len; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return -1;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > kMaxCodePoint || (c >= kSurrogateLo && c <= kSurrogateHi)) return -1;
  *pos = i + len;
  return c;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace pagoda::grammar::internal
