#include "common/grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grammar/gbnf_text.h"

namespace pagoda::grammar {
namespace {

using internal::CodePointSet;

constexpr int64_t kInfinite = -1;  // an unbounded repetition's max

// The pattern's syntax tree. kNull matches nothing (an empty class and what it poisons).
struct Node {
  enum Kind { kNull, kEmpty, kSet, kSeq, kAlt, kRepeat };
  Kind kind = kEmpty;
  CodePointSet set;         // kSet
  std::vector<Node> kids;   // kSeq, kAlt, kRepeat (one kid)
  int64_t min = 0;          // kRepeat
  int64_t max = kInfinite;  // kRepeat

  static Node Null() { return Node{kNull, {}, {}, 0, 0}; }
  static Node Empty() { return Node{kEmpty, {}, {}, 0, 0}; }
  static Node Set(CodePointSet s) {
    if (s.empty()) return Null();
    return Node{kSet, std::move(s), {}, 0, 0};
  }
};

// Simplifying constructors: kNull and kEmpty never appear inside a sequence, kNull never
// inside an alternation.
Node MakeSeq(std::vector<Node> kids) {
  std::vector<Node> out;
  for (auto& k : kids) {
    if (k.kind == Node::kNull) return Node::Null();
    if (k.kind == Node::kEmpty) continue;
    if (k.kind == Node::kSeq) {
      for (auto& kk : k.kids) out.push_back(std::move(kk));
    } else {
      out.push_back(std::move(k));
    }
  }
  if (out.empty()) return Node::Empty();
  if (out.size() == 1) return std::move(out[0]);
  return Node{Node::kSeq, {}, std::move(out), 0, 0};
}

Node MakeAlt(std::vector<Node> kids) {
  std::vector<Node> out;
  for (auto& k : kids) {
    if (k.kind != Node::kNull) out.push_back(std::move(k));
  }
  if (out.empty()) return Node::Null();
  if (out.size() == 1) return std::move(out[0]);
  return Node{Node::kAlt, {}, std::move(out), 0, 0};
}

Node MakeRepeat(Node kid, int64_t min, int64_t max) {
  if (max == 0 || kid.kind == Node::kEmpty) return Node::Empty();
  if (kid.kind == Node::kNull) return min == 0 ? Node::Empty() : Node::Null();
  if (min == 1 && max == 1) return kid;
  Node n{Node::kRepeat, {}, {}, min, max};
  n.kids.push_back(std::move(kid));
  return n;
}

bool Nullable(const Node& n) {
  switch (n.kind) {
    case Node::kNull:
    case Node::kSet:
      return false;
    case Node::kEmpty:
      return true;
    case Node::kSeq:
      return std::all_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::kAlt:
      return std::any_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::kRepeat:
      return n.min == 0 || Nullable(n.kids[0]);
  }
  return false;
}

// The non-empty texts `n` matches.
Node NonEmpty(const Node& n) {
  if (!Nullable(n)) return n;
  switch (n.kind) {
    case Node::kNull:
    case Node::kEmpty:
      return Node::Null();
    case Node::kSet:
      return n;
    case Node::kAlt: {
      std::vector<Node> kids;
      for (const auto& k : n.kids) kids.push_back(NonEmpty(k));
      return MakeAlt(std::move(kids));
    }
    case Node::kSeq: {
      // Every kid is nullable: the first non-empty kid i, then anything of the rest.
      std::vector<Node> alternatives;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        std::vector<Node> seq;
        seq.push_back(NonEmpty(n.kids[i]));
        for (size_t j = i + 1; j < n.kids.size(); ++j) seq.push_back(n.kids[j]);
        alternatives.push_back(MakeSeq(std::move(seq)));
      }
      return MakeAlt(std::move(alternatives));
    }
    case Node::kRepeat:
      // A concatenation of up to `max` matches of the kid, some non-empty: drop the empty ones.
      return MakeRepeat(NonEmpty(n.kids[0]), 1, n.max);
  }
  return Node::Null();
}

// Rewrites unbounded repetitions of nullable kids (see regex.h).
Node NormalizeRepeats(Node n) {
  for (auto& k : n.kids) k = NormalizeRepeats(std::move(k));
  if (n.kind == Node::kRepeat && n.max == kInfinite && Nullable(n.kids[0])) {
    return MakeRepeat(NonEmpty(n.kids[0]), 0, kInfinite);
  }
  return n;
}

int64_t Saturate(int64_t v) { return std::min<int64_t>(v, int64_t{1} << 40); }

// Grammar size after the engine expands bounded repetitions.
int64_t ExpandedSize(const Node& n) {
  switch (n.kind) {
    case Node::kNull:
    case Node::kEmpty:
    case Node::kSet:
      return 1;
    case Node::kSeq:
    case Node::kAlt: {
      int64_t total = 1;
      for (const auto& k : n.kids) total = Saturate(total + ExpandedSize(k));
      return total;
    }
    case Node::kRepeat: {
      int64_t copies = n.max == kInfinite ? n.min + 1 : n.max;
      return Saturate(1 + Saturate(ExpandedSize(n.kids[0]) * std::max<int64_t>(copies, 1)));
    }
  }
  return 1;
}

// Lengths in characters: [min, max], max kInfinite when unbounded.
std::pair<int64_t, int64_t> Lengths(const Node& n) {
  switch (n.kind) {
    case Node::kNull:
    case Node::kEmpty:
      return {0, 0};
    case Node::kSet:
      return {1, 1};
    case Node::kSeq: {
      int64_t lo = 0, hi = 0;
      for (const auto& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo = Saturate(lo + a);
        hi = (hi == kInfinite || b == kInfinite) ? kInfinite : Saturate(hi + b);
      }
      return {lo, hi};
    }
    case Node::kAlt: {
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (const auto& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo = std::min(lo, a);
        hi = (hi == kInfinite || b == kInfinite) ? kInfinite : std::max(hi, b);
      }
      return {lo, hi};
    }
    case Node::kRepeat: {
      auto [a, b] = Lengths(n.kids[0]);
      int64_t lo = Saturate(a * n.min);
      int64_t hi =
          (n.max == kInfinite && b != 0) || b == kInfinite ? kInfinite : Saturate(b * n.max);
      return {lo, hi};
    }
  }
  return {0, 0};
}

CodePointSet DigitSet() { return CodePointSet::Range('0', '9'); }
CodePointSet WordSet() {
  CodePointSet s = CodePointSet::Range('a', 'z');
  s.Add('A', 'Z');
  s.Add('0', '9');
  s.Add('_', '_');
  return s;
}
// ECMA-262 WhiteSpace and LineTerminator.
CodePointSet SpaceSet() {
  CodePointSet s = CodePointSet::Range(0x09, 0x0D);
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) {
    s.Add(c, c);
  }
  s.Add(0x2000, 0x200A);
  return s;
}
CodePointSet DotSet() {
  CodePointSet s = CodePointSet::Of('\n');
  s.Add('\r', '\r');
  s.Add(0x2028, 0x2029);
  return s.Complement();
}

struct TopAlternative {
  Node node;
  bool anchored_start = false;
  bool anchored_end = false;
};

class Parser {
 public:
  Parser(std::string_view pattern, const RegexOptions& options) : p_(pattern), options_(options) {}

  absl::StatusOr<std::vector<TopAlternative>> ParseTop() {
    std::vector<TopAlternative> alternatives;
    while (true) {
      TopAlternative alt;
      if (Peek('^')) {
        ++pos_;
        alt.anchored_start = true;
      }
      auto seq = ParseSeq(/*top=*/true, &alt.anchored_end);
      if (!seq.ok()) return seq.status();
      alt.node = std::move(*seq);
      alternatives.push_back(std::move(alt));
      if (pos_ >= p_.size()) break;
      if (p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return Error("unmatched ')'", pos_);
    }
    return alternatives;
  }

 private:
  absl::Status Error(std::string_view what, size_t offset) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex: %s at byte %d of the pattern", std::string(what), offset));
  }
  absl::Status Unsupported(std::string_view what, size_t offset) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex: %s at byte %d is not supported (see regex.h for the dialect)",
                        std::string(what), offset));
  }
  bool Peek(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  absl::StatusOr<Node> ParseAlt() {
    std::vector<Node> alternatives;
    while (true) {
      auto seq = ParseSeq(/*top=*/false, nullptr);
      if (!seq.ok()) return seq.status();
      alternatives.push_back(std::move(*seq));
      if (!Peek('|')) break;
      ++pos_;
    }
    return MakeAlt(std::move(alternatives));
  }

  // A sequence up to `|`, `)` or the end. At the top level a final `$` sets *anchored_end.
  absl::StatusOr<Node> ParseSeq(bool top, bool* anchored_end) {
    std::vector<Node> items;
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      size_t start = pos_;
      char c = p_[pos_];
      if (c == '$') {
        ++pos_;
        if (top && (pos_ == p_.size() || p_[pos_] == '|')) {
          *anchored_end = true;
          break;
        }
        return Unsupported("'$' other than at the end of the pattern", start);
      }
      if (c == '^') return Unsupported("'^' other than at the start of the pattern", start);
      if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat", start);
      if (c == '{') {
        // In Unicode mode a `{` that is not a quantifier is an error; so is one with nothing
        // before it.
        return Error("'{' with nothing to repeat", start);
      }
      auto atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      auto quantified = ParseQuantifiers(std::move(*atom));
      if (!quantified.ok()) return quantified.status();
      items.push_back(std::move(*quantified));
    }
    return MakeSeq(std::move(items));
  }

  absl::StatusOr<Node> ParseQuantifiers(Node atom) {
    if (pos_ >= p_.size()) return atom;
    size_t start = pos_;
    int64_t min, max;
    char c = p_[pos_];
    if (c == '*') {
      min = 0, max = kInfinite, ++pos_;
    } else if (c == '+') {
      min = 1, max = kInfinite, ++pos_;
    } else if (c == '?') {
      min = 0, max = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      auto m = ParseNumber(start);
      if (!m.ok()) return m.status();
      min = *m;
      max = min;
      if (Peek(',')) {
        ++pos_;
        if (Peek('}')) {
          max = kInfinite;
        } else {
          auto n = ParseNumber(start);
          if (!n.ok()) return n.status();
          max = *n;
        }
      }
      if (!Peek('}')) return Error("malformed quantifier {m,n}", start);
      ++pos_;
      if (max != kInfinite && max < min) return Error("quantifier {m,n} with n < m", start);
      if (min > options_.max_repetition || max > options_.max_repetition) {
        return absl::InvalidArgumentError(
            absl::StrFormat("regex: quantifier at byte %d repeats more than max_repetition (%d)",
                            start, options_.max_repetition));
      }
    } else {
      return atom;
    }
    if (Peek('?')) ++pos_;  // lazy: the same language
    if (pos_ < p_.size() &&
        (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' || p_[pos_] == '{')) {
      return Error("nothing to repeat", pos_);
    }
    return MakeRepeat(std::move(atom), min, max);
  }

  absl::StatusOr<int64_t> ParseNumber(size_t quantifier_start) {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = std::min<int64_t>(v * 10 + (p_[pos_] - '0'), int64_t{1} << 40);
      ++pos_;
    }
    if (pos_ == start) return Error("malformed quantifier {m,n}", quantifier_start);
    return v;
  }

  absl::StatusOr<Node> ParseAtom() {
    size_t start = pos_;
    char c = p_[pos_];
    switch (c) {
      case '.':
        ++pos_;
        return Node::Set(DotSet());
      case '(': {
        if (++depth_ > options_.max_nesting) {
          return absl::InvalidArgumentError(
              absl::StrFormat("regex: groups nest deeper than max_nesting (%d) at byte %d",
                              options_.max_nesting, start));
        }
        ++pos_;
        if (Peek('?')) {
          std::string_view rest = p_.substr(pos_);
          if (rest.starts_with("?:")) {
            pos_ += 2;
          } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
            return Unsupported("lookahead", start);
          } else if (rest.starts_with("?<=") || rest.starts_with("?<!")) {
            return Unsupported("lookbehind", start);
          } else if (rest.starts_with("?<")) {
            size_t close = rest.find('>');
            if (close == std::string_view::npos || close == 2) {
              return Error("malformed group name", start);
            }
            for (size_t i = 2; i < close; ++i) {
              char n = rest[i];
              bool ok = (n >= 'a' && n <= 'z') || (n >= 'A' && n <= 'Z') || n == '_' || n == '$' ||
                        (i > 2 && n >= '0' && n <= '9');
              if (!ok) return Error("malformed group name", start);
            }
            pos_ += close + 1;
          } else {
            return Unsupported("group modifier '(?'", start);
          }
        }
        auto inner = ParseAlt();
        if (!inner.ok()) return inner.status();
        if (!Peek(')')) return Error("unterminated group '('", start);
        ++pos_;
        --depth_;
        return std::move(*inner);
      }
      case '[':
        return ParseClass();
      case '\\':
        return ParseEscapeAtom();
      case ')':
        return Error("unmatched ')'", start);
      case ']':
        return Error("lone ']'", start);
      case '}':
        return Error("lone '}'", start);
      default:
        break;
    }
    int64_t cp = internal::DecodeUtf8(p_, &pos_);
    if (cp < 0) return Error("invalid UTF-8", start);
    return Node::Set(CodePointSet::Of(static_cast<uint32_t>(cp)));
  }

  // After a backslash outside a class.
  absl::StatusOr<Node> ParseEscapeAtom() {
    size_t start = pos_;
    ++pos_;
    if (pos_ >= p_.size()) return Error("'\\' at the end of the pattern", start);
    char c = p_[pos_];
    if (c == 'b' || c == 'B') return Unsupported("word boundary assertion \\b / \\B", start);
    if (c >= '1' && c <= '9') return Unsupported("backreference", start);
    if (c == 'k') return Unsupported("named backreference \\k", start);
    auto set = ParseEscape(start, /*in_class=*/false);
    if (!set.ok()) return set.status();
    return Node::Set(std::move(*set));
  }

  // An escape at p_[pos_] (the character after the backslash at `start`): one character or
  // a class escape. Advances past it.
  absl::StatusOr<CodePointSet> ParseEscape(size_t start, bool in_class) {
    char c = p_[pos_++];
    switch (c) {
      case 'd':
        return DigitSet();
      case 'D':
        return DigitSet().Complement();
      case 'w':
        return WordSet();
      case 'W':
        return WordSet().Complement();
      case 's':
        return SpaceSet();
      case 'S':
        return SpaceSet().Complement();
      case 'n':
        return CodePointSet::Of('\n');
      case 'r':
        return CodePointSet::Of('\r');
      case 't':
        return CodePointSet::Of('\t');
      case 'f':
        return CodePointSet::Of('\f');
      case 'v':
        return CodePointSet::Of('\v');
      case 'b':  // only reached inside a class: backspace
        return CodePointSet::Of(0x08);
      case '0':
        if (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
          return Unsupported("octal escape", start);
        }
        return CodePointSet::Of(0);
      case 'c': {
        if (pos_ < p_.size() &&
            ((p_[pos_] >= 'a' && p_[pos_] <= 'z') || (p_[pos_] >= 'A' && p_[pos_] <= 'Z'))) {
          return CodePointSet::Of(static_cast<uint32_t>(p_[pos_++]) % 32);
        }
        return Error("malformed control escape \\c", start);
      }
      case 'x': {
        auto v = ParseHex(2, start);
        if (!v.ok()) return v.status();
        return CodePointSet::Of(*v);
      }
      case 'u': {
        auto v = ParseUnicodeEscape(start);
        if (!v.ok()) return v.status();
        return CodePointSet::Of(*v);
      }
      case 'p':
      case 'P':
        return Unsupported("Unicode property escape \\p", start);
      case '-':
        if (in_class) return CodePointSet::Of('-');
        return Error("'\\-' outside a class", start);
      default:
        break;
    }
    static constexpr std::string_view kSyntax = "^$\\.*+?()[]{}|/";
    if (kSyntax.find(c) != std::string_view::npos) {
      return CodePointSet::Of(static_cast<unsigned char>(c));
    }
    if (in_class && c >= '1' && c <= '9') return Unsupported("backreference", start);
    return Error("unknown escape '\\" + std::string(1, c) + "'", start);
  }

  absl::StatusOr<uint32_t> ParseHex(int digits, size_t start) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size()) return Error("malformed hex escape", start);
      char h = p_[pos_];
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return Error("malformed hex escape", start);
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // \uHHHH (a surrogate pair written as two of them is one character), or \u{H...}.
  absl::StatusOr<uint32_t> ParseUnicodeEscape(size_t start) {
    uint32_t v;
    if (Peek('{')) {
      ++pos_;
      v = 0;
      size_t digits = 0;
      while (pos_ < p_.size() && p_[pos_] != '}') {
        auto d = ParseHex(1, start);
        if (!d.ok()) return d.status();
        v = v * 16 + *d;
        if (++digits > 8 || v > internal::kMaxCodePoint) {
          return Error("\\u{...} beyond U+10FFFF", start);
        }
      }
      if (!Peek('}') || digits == 0) return Error("malformed \\u{...} escape", start);
      ++pos_;
    } else {
      auto h = ParseHex(4, start);
      if (!h.ok()) return h.status();
      v = *h;
      if (v >= 0xD800 && v <= 0xDBFF && p_.substr(pos_).starts_with("\\u")) {
        size_t save = pos_;
        pos_ += 2;
        auto lo = ParseHex(4, start);
        if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF) {
          return 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00);
        }
        pos_ = save;
      }
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
      return Unsupported("lone surrogate (UTF-8 cannot encode it)", start);
    }
    return v;
  }

  absl::StatusOr<Node> ParseClass() {
    size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (Peek('^')) {
      negated = true;
      ++pos_;
    }
    CodePointSet set;
    while (true) {
      if (pos_ >= p_.size()) return Error("unterminated class '['", start);
      if (p_[pos_] == ']') {
        ++pos_;
        break;
      }
      size_t item_start = pos_;
      auto lo = ParseClassAtom();
      if (!lo.ok()) return lo.status();
      if (Peek('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        auto hi = ParseClassAtom();
        if (!hi.ok()) return hi.status();
        int64_t a = lo->Single(), b = hi->Single();
        if (a < 0 || b < 0) return Error("class escape in a range", item_start);
        if (a > b) return Error("range out of order in class", item_start);
        set.Add(static_cast<uint32_t>(a), static_cast<uint32_t>(b));
      } else {
        set.Add(*lo);
      }
    }
    return Node::Set(negated ? set.Complement() : set);
  }

  absl::StatusOr<CodePointSet> ParseClassAtom() {
    size_t start = pos_;
    if (p_[pos_] == '\\') {
      ++pos_;
      if (pos_ >= p_.size()) return Error("'\\' at the end of the pattern", start);
      return ParseEscape(start, /*in_class=*/true);
    }
    int64_t cp = internal::DecodeUtf8(p_, &pos_);
    if (cp < 0) return Error("invalid UTF-8", start);
    return CodePointSet::Of(static_cast<uint32_t>(cp));
  }

  std::string_view p_;
  const RegexOptions& options_;
  size_t pos_ = 0;
  int depth_ = 0;
};

class Emitter {
 public:
  explicit Emitter(bool json) : json_(json) {}

  // `n` as a GBNF expression; `atom` asks for something a quantifier can follow.
  std::string Emit(const Node& n, bool atom) const {
    switch (n.kind) {
      case Node::kNull:  // never emitted: the callers remove kNull first
      case Node::kEmpty:
        return "\"\"";
      case Node::kSet:
        return SetText(n.set);
      case Node::kSeq: {
        std::vector<std::string> parts;
        std::string literal;  // consecutive single characters, merged
        bool have_literal = false;
        auto flush = [&] {
          if (have_literal) parts.push_back(internal::GbnfLiteral(literal));
          literal.clear();
          have_literal = false;
        };
        for (const auto& k : n.kids) {
          int64_t c = k.kind == Node::kSet ? k.set.Single() : -1;
          if (c >= 0) {
            literal += Spelling(static_cast<uint32_t>(c));
            have_literal = true;
          } else {
            flush();
            parts.push_back(Emit(k, /*atom=*/true));
          }
        }
        flush();
        std::string out;
        for (size_t i = 0; i < parts.size(); ++i) out += (i ? " " : "") + parts[i];
        // A literal of several characters is one element too, but a group says so plainly.
        return atom ? "( " + out + " )" : out;
      }
      case Node::kAlt: {
        // An empty alternative makes the rest optional (`a|` is `( a )?`).
        std::vector<const Node*> kids;
        for (const auto& k : n.kids) {
          if (k.kind != Node::kEmpty) kids.push_back(&k);
        }
        bool optional = kids.size() < n.kids.size();
        std::string out;
        for (size_t i = 0; i < kids.size(); ++i) {
          out += (i ? " | " : "") + Emit(*kids[i], /*atom=*/kids.size() == 1 && optional);
        }
        if (optional) return kids.size() == 1 ? out + "?" : "( " + out + " )?";
        return atom ? "( " + out + " )" : out;
      }
      case Node::kRepeat: {
        std::string kid = Emit(n.kids[0], /*atom=*/true);
        if (n.min == 0 && n.max == 1) return kid + "?";
        if (n.min == 0 && n.max == kInfinite) return kid + "*";
        if (n.min == 1 && n.max == kInfinite) return kid + "+";
        if (n.max == kInfinite) return absl::StrCat(kid, "{", n.min, ",}");
        if (n.min == n.max) return absl::StrCat(kid, "{", n.min, "}");
        return absl::StrCat(kid, "{", n.min, ",", n.max, "}");
      }
    }
    return "\"\"";
  }

 private:
  std::string Spelling(uint32_t c) const {
    std::string utf8;
    internal::AppendUtf8(c, &utf8);
    if (!json_) return utf8;
    std::string quoted = internal::JsonQuote(utf8);
    return quoted.substr(1, quoted.size() - 2);
  }
  std::string SetText(const CodePointSet& s) const {
    return json_ ? internal::JsonCharGbnf(s) : internal::GbnfCharClass(s);
  }

  bool json_;
};

// The whole-text language (search wrapping and length bounds applied).
absl::StatusOr<Node> Translate(std::string_view pattern, const RegexOptions& options) {
  if (pattern.size() > static_cast<size_t>(options.max_pattern_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex: pattern of %d bytes exceeds max_pattern_bytes (%d)", pattern.size(),
                        options.max_pattern_bytes));
  }
  Parser parser(pattern, options);
  auto top = parser.ParseTop();
  if (!top.ok()) return top.status();

  std::vector<Node> alternatives;
  Node any_text = MakeRepeat(Node::Set(CodePointSet::All()), 0, kInfinite);
  bool single_anchored = top->size() == 1 && (*top)[0].anchored_start && (*top)[0].anchored_end;
  for (auto& alt : *top) {
    if (!options.search) {
      alternatives.push_back(std::move(alt.node));
      continue;
    }
    std::vector<Node> seq;
    if (!alt.anchored_start) seq.push_back(any_text);
    seq.push_back(std::move(alt.node));
    if (!alt.anchored_end) seq.push_back(any_text);
    alternatives.push_back(MakeSeq(std::move(seq)));
  }
  Node n = NormalizeRepeats(MakeAlt(std::move(alternatives)));

  int64_t min_len = options.min_length;
  int64_t max_len = options.max_length;
  if (min_len > 0 || max_len >= 0) {
    if (max_len >= 0 && min_len > max_len) {
      return absl::InvalidArgumentError("regex: minimum length exceeds maximum length");
    }
    auto [lo, hi] = Lengths(n);
    bool implied = lo >= min_len && (max_len < 0 || (hi != kInfinite && hi <= max_len));
    if (!implied) {
      bool whole = !options.search || single_anchored;
      const Node* set = nullptr;
      int64_t rmin = 1, rmax = 1;
      if (whole && n.kind == Node::kSet) {
        set = &n;
      } else if (whole && n.kind == Node::kRepeat && n.kids[0].kind == Node::kSet) {
        set = &n.kids[0];
        rmin = n.min;
        rmax = n.max;
      }
      if (set == nullptr) {
        return absl::InvalidArgumentError(
            "regex: length bounds (minLength / maxLength) together with this pattern cannot be "
            "enforced (only a single class, possibly repeated, anchored at both ends, or a "
            "pattern whose lengths already lie within the bounds)");
      }
      int64_t new_min = std::max(rmin, min_len);
      int64_t new_max = rmax;
      if (max_len >= 0) new_max = rmax == kInfinite ? max_len : std::min(rmax, max_len);
      if (new_max != kInfinite && new_min > new_max) {
        return absl::InvalidArgumentError(
            "regex: no text matches the pattern within the length bounds");
      }
      if (new_min > options.max_repetition || new_max > options.max_repetition) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "regex: length bounds repeat more than max_repetition (%d)", options.max_repetition));
      }
      n = MakeRepeat(Node::Set(set->set), new_min, new_max);
    }
  }
  if (n.kind == Node::kNull) {
    return absl::InvalidArgumentError("regex: the pattern matches nothing");
  }
  int64_t size = ExpandedSize(n);
  if (size > options.max_expanded_nodes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex: the pattern expands to more than max_expanded_nodes (%d) nodes",
                        options.max_expanded_nodes));
  }
  return n;
}

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, std::string_view rule_prefix,
                                        std::string* helper_rules, const RegexOptions& options) {
  auto n = Translate(pattern, options);
  if (!n.ok()) return n.status();
  return Emitter(options.json_string).Emit(*n, /*atom=*/false);
}

absl::StatusOr<std::string> RegexGrammar(std::string_view pattern, const RegexOptions& options) {
  std::string helpers;
  auto expr = RegexToGbnf(pattern, "re", &helpers, options);
  if (!expr.ok()) return expr.status();
  return absl::StrCat("root ::= ", *expr, "\n", helpers);
}

}  // namespace pagoda::grammar
