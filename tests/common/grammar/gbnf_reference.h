// A small, slow reference recognizer for the GBNF that json_schema.cc and regex.cc emit, for
// their tests: it answers "is this whole text a sentence of the grammar" by computing, for
// each expression and start position, the set of positions where a match can end (memoized per
// rule and position). It exists so the translators can be tested independently of the
// production matcher (grammar.h), and tests compare the two where both are built.
//
// CheckedGrammar runs a text through both: the production Grammar/Matcher (grammar.h), whose
// answer it returns, and the reference, and fails the test where they disagree or where
// Grammar::FromGbnf rejects the translators' output.
//
// It reads the dialect's subset the translators use: `name ::= body` one per line, `|`,
// `( )`, literals with \n \r \t \\ \" \xHH \uHHHH escapes, classes [...] / [^...] with the same
// escapes plus \[ \] \- , `.`, `* + ?` and `{m}` `{m,}` `{m,n}`. A syntax error, an undefined
// rule or left recursion is a test failure (the ADD_FAILURE below), not a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/grammar/grammar.h"
#include "gtest/gtest.h"

namespace pagoda::grammar::testing {

class ReferenceGrammar {
 public:
  explicit ReferenceGrammar(std::string_view gbnf) {
    size_t line_start = 0;
    while (line_start < gbnf.size()) {
      size_t end = gbnf.find('\n', line_start);
      if (end == std::string_view::npos) end = gbnf.size();
      std::string_view line = gbnf.substr(line_start, end - line_start);
      line_start = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      size_t sep = line.find("::=");
      if (sep == std::string_view::npos) {
        Fail("no ::= in line");
        return;
      }
      std::string name(Trim(line.substr(0, sep)));
      text_ = line.substr(sep + 3);
      pos_ = 0;
      auto body = ParseAlt();
      SkipSpace();
      if (!ok_) return;
      if (pos_ != text_.size()) {
        Fail("trailing text in rule " + name);
        return;
      }
      if (rules_.contains(name)) {
        Fail("rule defined twice: " + name);
        return;
      }
      rules_[name] = std::move(body);
    }
    if (!rules_.contains("root")) Fail("no root rule");
  }

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  // Whether the whole of `text` (UTF-8) is a sentence of the root rule.
  bool Accepts(std::string_view text) {
    if (!ok_) return false;
    std::vector<uint32_t> cps;
    if (!Decode(text, &cps)) return false;
    input_ = &cps;
    memo_.clear();
    in_progress_.clear();
    auto ends = MatchRule("root", 0);
    input_ = nullptr;
    return ends.contains(static_cast<int>(cps.size()));
  }

 private:
  struct Expr;
  using ExprPtr = std::shared_ptr<Expr>;
  struct Expr {
    enum Kind { kAlt, kSeq, kLiteral, kClass, kAny, kRef, kRepeat } kind;
    std::vector<ExprPtr> kids;
    std::vector<uint32_t> literal;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool negated = false;
    std::string ref;
    int64_t min = 0, max = -1;
  };

  void Fail(const std::string& why) {
    if (ok_) {
      ok_ = false;
      error_ = why;
      ADD_FAILURE() << "reference GBNF: " << why;
    }
  }
  static std::string_view Trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
      s.remove_suffix(1);
    }
    return s;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  static bool Decode(std::string_view s, std::vector<uint32_t>* out) {
    size_t i = 0;
    while (i < s.size()) {
      auto b = static_cast<unsigned char>(s[i]);
      int len = b < 0x80             ? 1
                : (b & 0xE0) == 0xC0 ? 2
                : (b & 0xF0) == 0xE0 ? 3
                : (b & 0xF8) == 0xF0 ? 4
                                     : 0;
      if (len == 0 || i + len > s.size()) return false;
      uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
      for (int k = 1; k < len; ++k) {
        auto cb = static_cast<unsigned char>(s[i + k]);
        if ((cb & 0xC0) != 0x80) return false;
        c = (c << 6) | (cb & 0x3F);
      }
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
      out->push_back(c);
      i += len;
    }
    return true;
  }

  ExprPtr ParseAlt() {
    auto alt = std::make_shared<Expr>(Expr{Expr::kAlt, {}, {}, {}, false, {}, 0, -1});
    while (ok_) {
      alt->kids.push_back(ParseSeq());
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    return alt;
  }

  ExprPtr ParseSeq() {
    auto seq = std::make_shared<Expr>(Expr{Expr::kSeq, {}, {}, {}, false, {}, 0, -1});
    while (ok_) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')') break;
      ExprPtr atom = ParseAtom();
      if (!ok_) break;
      // Quantifiers.
      while (pos_ < text_.size() && ok_) {
        char c = text_[pos_];
        int64_t lo, hi;
        if (c == '*') {
          lo = 0, hi = -1, ++pos_;
        } else if (c == '+') {
          lo = 1, hi = -1, ++pos_;
        } else if (c == '?') {
          lo = 0, hi = 1, ++pos_;
        } else if (c == '{') {
          size_t close = text_.find('}', pos_);
          if (close == std::string_view::npos) {
            Fail("unterminated {");
            break;
          }
          std::string inside(text_.substr(pos_ + 1, close - pos_ - 1));
          size_t comma = inside.find(',');
          lo = std::stoll(inside.substr(0, comma));
          if (comma == std::string::npos) {
            hi = lo;
          } else if (comma + 1 == inside.size()) {
            hi = -1;
          } else {
            hi = std::stoll(inside.substr(comma + 1));
          }
          pos_ = close + 1;
        } else {
          break;
        }
        auto rep = std::make_shared<Expr>(Expr{Expr::kRepeat, {atom}, {}, {}, false, {}, lo, hi});
        atom = rep;
      }
      seq->kids.push_back(atom);
    }
    return seq;
  }

  uint32_t ParseChar() {  // one (possibly escaped) character of a literal or class
    auto b = static_cast<unsigned char>(text_[pos_]);
    if (b == '\\') {
      ++pos_;
      if (pos_ >= text_.size()) {
        Fail("dangling escape");
        return 0;
      }
      char e = text_[pos_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos_ >= text_.size()) {
            Fail("short hex escape");
            return v;
          }
          char h = text_[pos_++];
          int d = (h >= '0' && h <= '9')   ? h - '0'
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                           : -1;
          if (d < 0) Fail("bad hex digit");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        return v;
      };
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          return static_cast<unsigned char>(e);
        default:
          Fail(std::string("unknown escape \\") + e);
          return 0;
      }
    }
    std::vector<uint32_t> one;
    size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    if (!Decode(text_.substr(pos_, len), &one) || one.size() != 1) {
      Fail("invalid UTF-8 in grammar");
      return 0;
    }
    pos_ += len;
    return one[0];
  }

  ExprPtr ParseAtom() {
    char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      auto inner = ParseAlt();
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        Fail("unterminated (");
        return inner;
      }
      ++pos_;
      return inner;
    }
    if (c == '"') {
      ++pos_;
      auto lit = std::make_shared<Expr>(Expr{Expr::kLiteral, {}, {}, {}, false, {}, 0, -1});
      while (ok_ && pos_ < text_.size() && text_[pos_] != '"') lit->literal.push_back(ParseChar());
      if (pos_ >= text_.size()) Fail("unterminated literal");
      ++pos_;
      return lit;
    }
    if (c == '[') {
      ++pos_;
      auto cls = std::make_shared<Expr>(Expr{Expr::kClass, {}, {}, {}, false, {}, 0, -1});
      if (pos_ < text_.size() && text_[pos_] == '^') {
        cls->negated = true;
        ++pos_;
      }
      while (ok_ && pos_ < text_.size() && text_[pos_] != ']') {
        uint32_t lo = ParseChar();
        uint32_t hi = lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          hi = ParseChar();
        }
        cls->ranges.emplace_back(lo, hi);
      }
      if (pos_ >= text_.size()) Fail("unterminated class");
      ++pos_;
      return cls;
    }
    if (c == '.') {
      ++pos_;
      return std::make_shared<Expr>(Expr{Expr::kAny, {}, {}, {}, false, {}, 0, -1});
    }
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '-' || text_[pos_] == '_')) {
      ++pos_;
    }
    if (pos_ == start) {
      Fail(std::string("unexpected character '") + c + "'");
      return nullptr;
    }
    auto ref = std::make_shared<Expr>(Expr{Expr::kRef, {}, {}, {}, false, {}, 0, -1});
    ref->ref = std::string(text_.substr(start, pos_ - start));
    return ref;
  }

  std::set<int> MatchRule(const std::string& name, int pos) {
    auto key = std::make_pair(name, pos);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    auto rule = rules_.find(name);
    if (rule == rules_.end()) {
      Fail("undefined rule " + name);
      return {};
    }
    if (!in_progress_.insert(key).second) {
      Fail("left recursion through " + name);
      return {};
    }
    auto ends = Match(*rule->second, pos);
    in_progress_.erase(key);
    memo_[key] = ends;
    return ends;
  }

  std::set<int> Match(const Expr& e, int pos) {
    const auto& in = *input_;
    switch (e.kind) {
      case Expr::kAlt: {
        std::set<int> out;
        for (const auto& k : e.kids) {
          auto s = Match(*k, pos);
          out.insert(s.begin(), s.end());
        }
        return out;
      }
      case Expr::kSeq: {
        std::set<int> cur = {pos};
        for (const auto& k : e.kids) {
          std::set<int> next;
          for (int p : cur) {
            auto s = Match(*k, p);
            next.insert(s.begin(), s.end());
          }
          cur = std::move(next);
          if (cur.empty()) break;
        }
        return cur;
      }
      case Expr::kLiteral: {
        if (pos + e.literal.size() > in.size()) return {};
        for (size_t i = 0; i < e.literal.size(); ++i) {
          if (in[pos + i] != e.literal[i]) return {};
        }
        return {pos + static_cast<int>(e.literal.size())};
      }
      case Expr::kClass: {
        if (pos >= static_cast<int>(in.size())) return {};
        bool member = false;
        for (const auto& [lo, hi] : e.ranges) member = member || (in[pos] >= lo && in[pos] <= hi);
        if (member != e.negated) return {pos + 1};
        return {};
      }
      case Expr::kAny:
        if (pos >= static_cast<int>(in.size())) return {};
        return {pos + 1};
      case Expr::kRef:
        return MatchRule(e.ref, pos);
      case Expr::kRepeat: {
        std::set<int> cur = {pos};
        std::set<int> out;
        std::set<int> seen;
        for (int64_t count = 0;; ++count) {
          if (count >= e.min) out.insert(cur.begin(), cur.end());
          if (e.max >= 0 && count >= e.max) break;
          std::set<int> next;
          for (int p : cur) {
            auto s = Match(*e.kids[0], p);
            next.insert(s.begin(), s.end());
          }
          if (count >= e.min) {  // past the minimum, only new positions matter
            std::set<int> fresh;
            for (int p : next) {
              if (seen.insert(p).second) fresh.insert(p);
            }
            next = std::move(fresh);
          }
          if (next.empty()) break;
          cur = std::move(next);
        }
        return out;
      }
    }
    return {};
  }

  std::map<std::string, ExprPtr> rules_;
  std::string_view text_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
  const std::vector<uint32_t>* input_ = nullptr;
  std::map<std::pair<std::string, int>, std::set<int>> memo_;
  std::set<std::pair<std::string, int>> in_progress_;
};

class CheckedGrammar {
 public:
  explicit CheckedGrammar(const std::string& gbnf) : gbnf_(gbnf), reference_(gbnf) {
    auto g = Grammar::FromGbnf(gbnf);
    if (!g.ok()) {
      ADD_FAILURE() << "Grammar::FromGbnf rejected the translation: " << g.status() << "\n" << gbnf;
      return;
    }
    grammar_ = *g;
  }

  bool ok() const { return grammar_ != nullptr && reference_.ok(); }

  // Whether the whole of `text` is accepted (Matcher: Advance then Accepting).
  bool Accepts(std::string_view text) {
    if (!ok()) return false;
    Matcher m(grammar_);
    bool production = m.Advance(text) && m.Accepting();
    bool reference = reference_.Accepts(text);
    EXPECT_EQ(production, reference) << "Matcher and the reference disagree on \"" << text << "\"\n"
                                     << gbnf_;
    return production;
  }

 private:
  std::string gbnf_;
  ReferenceGrammar reference_;
  std::shared_ptr<const Grammar> grammar_;
};

}  // namespace pagoda::grammar::testing
