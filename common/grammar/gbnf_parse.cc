// GBNF text -> one expression tree per rule (gbnf_tree.h).
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grammar/automaton.h"
#include "common/grammar/gbnf_tree.h"
#include "common/status_macros.h"

namespace pagoda::grammar::internal {
namespace {

// Sorts, merges and removes surrogates; with `negate`, the complement over Unicode scalars.
Ranges Normalize(Ranges in, bool negate) {
  std::sort(in.begin(), in.end());
  Ranges merged;
  for (const auto& r : in) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    Ranges comp;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.first > next) comp.push_back({next, r.first - 1});
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged = std::move(comp);
  }
  Ranges out;
  for (const auto& r : merged) {
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.first < 0xD800) out.push_back({r.first, 0xD7FF});
    if (r.second > 0xDFFF) out.push_back({0xE000, r.second});
  }
  return out;
}

class Parser {
 public:
  Parser(std::string_view src, const Limits& limits) : src_(src), limits_(limits) {}

  absl::Status Parse() {
    SkipSpace(true);
    while (pos_ < src_.size()) {
      RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    for (size_t r = 0; r < names_.size(); ++r) {
      if (bodies_[r] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("undefined rule '%s' (used at %s)", names_[r], Where(first_use_[r])));
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return absl::InvalidArgumentError("grammar has no 'root' rule");
    root_ = root->second;
    return absl::OkStatus();
  }

  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Expr>> bodies_;
  int32_t root_ = 0;

 private:
  std::string Where(size_t pos) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return absl::StrFormat("%d:%d", line, static_cast<int>(pos - line_start) + 1);
  }
  absl::Status Error(size_t pos, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("GBNF syntax error at %s: %s", Where(pos), what));
  }

  bool AtEnd() const { return pos_ >= src_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  static bool IsWordChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }

  // Skips blanks and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (pos_ < src_.size() && IsWordChar(src_[pos_])) ++pos_;
    return src_.substr(start, pos_ - start);
  }

  int32_t RuleId(std::string_view name, size_t use_pos) {
    auto it = ids_.find(absl::string_view(name.data(), name.size()));
    if (it != ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(names_.size());
    ids_.emplace(std::string(name), id);
    names_.emplace_back(name);
    bodies_.emplace_back();
    first_use_.push_back(use_pos);
    return id;
  }

  absl::Status ParseRule() {
    const size_t name_pos = pos_;
    std::string_view name = ParseName();
    if (name.empty()) return Error(pos_, "expecting a rule name");
    SkipSpace(false);
    if (src_.substr(pos_, 3) != "::=") return Error(pos_, "expecting ::=");
    pos_ += 3;
    SkipSpace(true);
    const int32_t id = RuleId(name, name_pos);
    if (bodies_[id] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rule '%s' defined twice (at %s)", name, Where(name_pos)));
    }
    if (static_cast<int64_t>(names_.size()) > limits_.max_rules) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grammar has more than max_rules = %d rules", limits_.max_rules));
    }
    auto body = std::make_unique<Expr>();
    RETURN_IF_ERROR(ParseAlternates(false, 0, body.get()));
    if (Peek() == '\r') ++pos_;
    if (Peek() == '\n') {
      ++pos_;
    } else if (!AtEnd()) {
      return Error(pos_, "expecting newline or end of rule");
    }
    bodies_[id] = std::move(body);
    return absl::OkStatus();
  }

  absl::Status ParseAlternates(bool nested, int32_t nesting, Expr* out) {
    out->kind = Expr::kAlt;
    while (true) {
      Expr seq;
      RETURN_IF_ERROR(ParseSequence(nested, nesting, &seq));
      out->depth = std::max(out->depth, seq.depth + 1);
      out->kids.push_back(std::move(seq));
      if (Peek() != '|') break;
      ++pos_;
      SkipSpace(true);
    }
    if (out->kids.size() == 1) {
      Expr only = std::move(out->kids[0]);
      *out = std::move(only);
    }
    return absl::OkStatus();
  }

  absl::Status ParseSequence(bool nested, int32_t nesting, Expr* out) {
    out->kind = Expr::kSeq;
    while (!AtEnd()) {
      const char c = Peek();
      const size_t item_pos = pos_;
      Expr item;
      if (c == '"') {
        ++pos_;
        item.kind = Expr::kLiteral;
        while (true) {
          if (AtEnd()) return Error(item_pos, "unterminated literal");
          if (Peek() == '"') {
            ++pos_;
            break;
          }
          uint32_t cp = 0;
          RETURN_IF_ERROR(ParseChar(&cp));
          item.text.push_back(cp);
        }
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (Peek() == '^') {
          negate = true;
          ++pos_;
        }
        Ranges ranges;
        while (true) {
          if (AtEnd()) return Error(item_pos, "unterminated character class");
          if (Peek() == ']') {
            ++pos_;
            break;
          }
          uint32_t lo = 0, hi = 0;
          RETURN_IF_ERROR(ParseChar(&lo));
          hi = lo;
          if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < src_.size()) {
            ++pos_;
            const size_t hi_pos = pos_;
            RETURN_IF_ERROR(ParseChar(&hi));
            if (hi < lo) return Error(hi_pos, "character range out of order");
          }
          ranges.push_back({lo, hi});
        }
        item.kind = Expr::kClass;
        item.ranges = Normalize(std::move(ranges), negate);
      } else if (c == '.') {
        ++pos_;
        item.kind = Expr::kClass;
        item.ranges = Normalize({{0, kMaxCodePoint}}, false);
      } else if (IsWordChar(c)) {
        std::string_view name = ParseName();
        item.kind = Expr::kRef;
        item.rule = RuleId(name, item_pos);
        if (static_cast<int64_t>(names_.size()) > limits_.max_rules) {
          return absl::InvalidArgumentError(
              absl::StrFormat("grammar has more than max_rules = %d rules", limits_.max_rules));
        }
      } else if (c == '(') {
        if (nesting + 1 > kMaxNesting) {
          return Error(pos_, absl::StrFormat("groups nested deeper than %d", kMaxNesting));
        }
        ++pos_;
        SkipSpace(true);
        RETURN_IF_ERROR(ParseAlternates(true, nesting + 1, &item));
        if (Peek() != ')') return Error(pos_, "expecting ')'");
        ++pos_;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return Error(pos_, absl::StrFormat("expecting an item before '%c'", c));
      } else {
        break;
      }
      SkipSpace(nested);
      // Repetition operators, which may stack (`x*?`).
      while (!AtEnd()) {
        const char op = Peek();
        int32_t min = 0, max = 0;
        if (op == '*') {
          min = 0, max = -1;
          ++pos_;
        } else if (op == '+') {
          min = 1, max = -1;
          ++pos_;
        } else if (op == '?') {
          min = 0, max = 1;
          ++pos_;
        } else if (op == '{') {
          RETURN_IF_ERROR(ParseBraces(&min, &max));
        } else {
          break;
        }
        Expr rep;
        rep.kind = Expr::kRepeat;
        rep.min = min;
        rep.max = max;
        rep.depth = item.depth + 1;
        rep.kids.push_back(std::move(item));
        item = std::move(rep);
        // Checked per operator, not once after them: `"a"` and 100,000 `*` would otherwise
        // build (and recursively destroy) a tree 100,000 levels deep.
        if (item.depth + nesting > kMaxNesting) {
          return Error(item_pos, absl::StrFormat("expression nested deeper than %d", kMaxNesting));
        }
        SkipSpace(nested);
      }
      if (item.depth + nesting > kMaxNesting) {
        return Error(item_pos, absl::StrFormat("expression nested deeper than %d", kMaxNesting));
      }
      out->depth = std::max(out->depth, item.depth + 1);
      out->kids.push_back(std::move(item));
    }
    if (out->kids.size() == 1) {
      Expr only = std::move(out->kids[0]);
      *out = std::move(only);
    }
    return absl::OkStatus();
  }

  absl::Status ParseInt(int32_t* out) {
    const size_t start = pos_;
    int64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (Peek() - '0'), int64_t{1} << 40);
      ++pos_;
    }
    if (pos_ == start) return Error(pos_, "expecting an integer");
    if (v > limits_.max_repetition) {
      return absl::InvalidArgumentError(
          absl::StrFormat("repetition count at %s exceeds max_repetition = %d", Where(start),
                          limits_.max_repetition));
    }
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }

  absl::Status ParseBraces(int32_t* min, int32_t* max) {
    const size_t open = pos_;
    ++pos_;
    SkipSpace(false);
    RETURN_IF_ERROR(ParseInt(min));
    SkipSpace(false);
    *max = *min;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      if (Peek() >= '0' && Peek() <= '9') {
        RETURN_IF_ERROR(ParseInt(max));
        SkipSpace(false);
      } else {
        *max = -1;
      }
    }
    if (Peek() != '}') return Error(pos_, "expecting '}'");
    ++pos_;
    if (*max >= 0 && *max < *min) return Error(open, "repetition {m,n} with n < m");
    return absl::OkStatus();
  }

  absl::Status ParseHex(int digits, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return Error(pos_, absl::StrFormat("expecting %d hex digits", digits));
      }
      v = v * 16 + d;
      ++pos_;
    }
    *out = v;
    return absl::OkStatus();
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  absl::Status ParseChar(uint32_t* cp) {
    const size_t start = pos_;
    const auto c = static_cast<uint8_t>(Peek());
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) return Error(start, "unterminated escape");
      const char e = Peek();
      ++pos_;
      switch (e) {
        case 'x':
          RETURN_IF_ERROR(ParseHex(2, cp));
          break;
        case 'u':
          RETURN_IF_ERROR(ParseHex(4, cp));
          break;
        case 'U':
          RETURN_IF_ERROR(ParseHex(8, cp));
          break;
        case 'n':
          *cp = '\n';
          break;
        case 'r':
          *cp = '\r';
          break;
        case 't':
          *cp = '\t';
          break;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          *cp = static_cast<uint8_t>(e);
          break;
        default:
          return Error(start, absl::StrFormat("unknown escape '\\%c'", e));
      }
      if (*cp > kMaxCodePoint || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
        return Error(start, "escape is not a Unicode scalar value");
      }
      return absl::OkStatus();
    }
    int len;
    uint32_t v;
    if (c < 0x80) {
      len = 1, v = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, v = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, v = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, v = c & 0x07;
    } else {
      return Error(start, "invalid UTF-8");
    }
    if (pos_ + len > src_.size()) return Error(start, "invalid UTF-8");
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(src_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return Error(start, "invalid UTF-8");
      v = (v << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMinForLength[len] || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
      return Error(start, "invalid UTF-8");
    }
    pos_ += len;
    *cp = v;
    return absl::OkStatus();
  }

  std::string_view src_;
  const Limits& limits_;
  size_t pos_ = 0;
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<size_t> first_use_;
};

}  // namespace

absl::StatusOr<ParsedGbnf> ParseGbnf(std::string_view gbnf, const Limits& limits) {
  Parser parser(gbnf, limits);
  RETURN_IF_ERROR(parser.Parse());
  return ParsedGbnf{
      .names = std::move(parser.names_), .bodies = std::move(parser.bodies_), .root = parser.root_};
}

}  // namespace pagoda::grammar::internal
