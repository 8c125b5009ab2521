// GBNF parsing, compilation to the byte-level automaton (automaton.h), and the Matcher.
//
// Compilation: the text is parsed into one expression tree per rule; each rule becomes an NFA
// over bytes (code-point sets split into UTF-8 byte-range sequences; groups and repetitions
// built inline, so `x*` is a loop rather than a recursive helper rule; references to other
// rules become call edges, except small non-recursive rules, which are inlined); the NFA is
// determinized by subset construction, call edges acting as symbols. Then nullability and the
// left-recursion check run on the result. Every stage counts against Limits so that hostile
// input costs bounded time and memory.
#include "common/grammar/grammar.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grammar/automaton.h"
#include "common/status_macros.h"

namespace pagoda::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Deepest nesting of groups and repetition operators: bounds every recursion over the tree.
constexpr int32_t kMaxNesting = 200;
// Rules whose inlined NFA is at most this many states are built into their callers, through at
// most kMaxInlineDepth nested inlinings.
constexpr int32_t kInlineStates = 256;
constexpr int32_t kMaxInlineDepth = 16;
// States with more edges than this get a 256-entry table, within kMaxTableEntries in all.
constexpr uint32_t kTableEdges = 6;
constexpr size_t kMaxTableEntries = size_t{1} << 22;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code points, inclusive

struct Expr {
  enum Kind : uint8_t { kSeq, kAlt, kLiteral, kClass, kRef, kRepeat };
  Kind kind = kSeq;
  int32_t depth = 1;         // nesting of this subtree
  std::vector<Expr> kids;    // kSeq, kAlt; kRepeat: kids[0]
  std::u32string text;       // kLiteral
  Ranges ranges;             // kClass: sorted, disjoint, no surrogates
  int32_t rule = -1;         // kRef
  int32_t min = 0, max = 0;  // kRepeat; max -1: unbounded
};

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

int EncodeUtf8(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// One code-point range whose UTF-8 encodings are exactly the byte strings b0 b1 .. with each
// b_i in [lo[i], hi[i]].
struct ByteSeq {
  int len;
  uint8_t lo[4], hi[4];
};

// Splits [lo, hi] (no surrogates) into ranges that encode as byte-range sequences: first at
// the encoded-length boundaries, then wherever a continuation byte does not span its full
// 0x80..0xBF range under a shared prefix.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      SplitUtf8(lo, end, out);
      SplitUtf8(end + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSeq seq;
  uint8_t a[4], b[4];
  seq.len = EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  for (int i = 0; i < seq.len; ++i) {
    seq.lo[i] = a[i];
    seq.hi[i] = b[i];
  }
  out->push_back(seq);
}

// ---------------------------------------------------------------------------------------------
// Parser

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

// ---------------------------------------------------------------------------------------------
// Compiler: expression trees -> per-rule NFAs -> DFAs.

struct NfaState {
  std::vector<Automaton::Edge> edges;
  std::vector<int32_t> eps;
  std::vector<Automaton::Call> calls;  // ret: an NFA state
};

class Compiler {
 public:
  Compiler(const Parser& parser, const Limits& limits) : p_(parser), limits_(limits) {}

  absl::StatusOr<std::unique_ptr<Automaton>> Compile() {
    auto a = std::make_unique<Automaton>();
    a_ = a.get();
    const int32_t n = static_cast<int32_t>(p_.names_.size());
    a->rule_names = p_.names_;
    a->root = p_.root_;
    a->rule_start.assign(n, -1);
    ComputeInlining();
    for (int32_t r = 0; r < n; ++r) {
      if (auto s = CompileRule(r); !s.ok()) return s;
    }
    FinishStates();
    if (auto s = CheckLeftRecursion(); !s.ok()) return s;
    return a;
  }

 private:
  absl::Status TooBig() const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grammar needs more than max_states = %d automaton states", limits_.max_states));
  }

  // Rules not on a reference cycle whose NFA is small are built into their callers. Tarjan's
  // strongly connected components (iterative) give the cycles, callees before callers, so
  // each rule's inlined size is computed after its callees'.
  void ComputeInlining() {
    const int32_t n = static_cast<int32_t>(p_.names_.size());
    inline_size_.assign(n, -1);
    std::vector<std::vector<int32_t>> refs(n);
    for (int32_t r = 0; r < n; ++r) CollectRefs(*p_.bodies_[r], &refs[r]);
    std::vector<int32_t> index(n, -1), low(n, 0), scc_stack;
    std::vector<uint8_t> on_stack(n, 0);
    int32_t counter = 0;
    for (int32_t r0 = 0; r0 < n; ++r0) {
      if (index[r0] >= 0) continue;
      std::vector<std::pair<int32_t, size_t>> dfs{{r0, 0}};
      index[r0] = low[r0] = counter++;
      scc_stack.push_back(r0);
      on_stack[r0] = 1;
      while (!dfs.empty()) {
        auto& [r, i] = dfs.back();
        if (i < refs[r].size()) {
          const int32_t next = refs[r][i++];
          if (index[next] < 0) {
            index[next] = low[next] = counter++;
            scc_stack.push_back(next);
            on_stack[next] = 1;
            dfs.push_back({next, 0});
          } else if (on_stack[next]) {
            low[r] = std::min(low[r], index[next]);
          }
          continue;
        }
        const int32_t done = r;
        dfs.pop_back();
        if (!dfs.empty()) low[dfs.back().first] = std::min(low[dfs.back().first], low[done]);
        if (low[done] != index[done]) continue;
        std::vector<int32_t> scc;
        int32_t x;
        do {
          x = scc_stack.back();
          scc_stack.pop_back();
          on_stack[x] = 0;
          scc.push_back(x);
        } while (x != done);
        const bool self_loop =
            std::find(refs[done].begin(), refs[done].end(), done) != refs[done].end();
        if (scc.size() > 1 || self_loop) continue;  // on a cycle: always a call
        const int64_t size = ExprSize(*p_.bodies_[done]);
        if (size <= kInlineStates) inline_size_[done] = static_cast<int32_t>(size);
      }
    }
  }

  static void CollectRefs(const Expr& e, std::vector<int32_t>* out) {
    if (e.kind == Expr::kRef) out->push_back(e.rule);
    for (const Expr& k : e.kids) CollectRefs(k, out);
  }

  // About how many NFA states the expression needs with inlinable rules built in (a call counts
  // one state).
  int64_t ExprSize(const Expr& e) const {
    switch (e.kind) {
      case Expr::kLiteral: {
        int64_t n = 0;
        uint8_t buf[4];
        for (char32_t c : e.text) n += EncodeUtf8(c, buf);
        return n + 1;
      }
      case Expr::kClass:
        return 4 * static_cast<int64_t>(e.ranges.size()) + 2;
      case Expr::kRef: {
        const int32_t s = inline_size_[e.rule];
        return s >= 0 ? s : 1;
      }
      case Expr::kRepeat: {
        const int64_t k = ExprSize(e.kids[0]);
        const int64_t copies = e.max < 0 ? e.min + 1 : e.max;
        return std::min<int64_t>(k * (copies + 1) + 2, int64_t{1} << 40);
      }
      default: {
        int64_t n = 2;
        for (const Expr& k : e.kids) n = std::min<int64_t>(n + ExprSize(k), int64_t{1} << 40);
        return n;
      }
    }
  }

  int32_t NewState() {
    nfa_.emplace_back();
    return static_cast<int32_t>(nfa_.size()) - 1;
  }

  absl::Status AddRanges(const Ranges& ranges, int32_t from, int32_t to) {
    std::vector<ByteSeq> seqs;
    for (const auto& r : ranges) SplitUtf8(r.first, r.second, &seqs);
    for (const ByteSeq& s : seqs) {
      int32_t cur = from;
      for (int i = 0; i < s.len; ++i) {
        const int32_t next = i + 1 == s.len ? to : NewState();
        nfa_[cur].edges.push_back({s.lo[i], s.hi[i], next});
        cur = next;
      }
    }
    if (static_cast<int64_t>(nfa_.size()) > limits_.max_states) return TooBig();
    return absl::OkStatus();
  }

  // Builds `e` from NFA state `from`; *to receives its end state.
  absl::Status Build(const Expr& e, int32_t from, int32_t* to, int32_t inline_depth) {
    if (static_cast<int64_t>(nfa_.size()) > limits_.max_states) return TooBig();
    switch (e.kind) {
      case Expr::kLiteral: {
        int32_t cur = from;
        for (char32_t c : e.text) {
          uint8_t buf[4];
          const int n = EncodeUtf8(c, buf);
          for (int i = 0; i < n; ++i) {
            const int32_t next = NewState();
            nfa_[cur].edges.push_back({buf[i], buf[i], next});
            cur = next;
          }
        }
        *to = cur;
        return absl::OkStatus();
      }
      case Expr::kClass:
        *to = NewState();
        return AddRanges(e.ranges, from, *to);
      case Expr::kRef:
        if (inline_size_[e.rule] >= 0 && inline_depth < kMaxInlineDepth) {
          return Build(*p_.bodies_[e.rule], from, to, inline_depth + 1);
        }
        *to = NewState();
        nfa_[from].calls.push_back({e.rule, *to});
        return absl::OkStatus();
      case Expr::kSeq: {
        int32_t cur = from;
        for (const Expr& k : e.kids) {
          int32_t next;
          if (auto s = Build(k, cur, &next, inline_depth); !s.ok()) return s;
          cur = next;
        }
        *to = cur;
        return absl::OkStatus();
      }
      case Expr::kAlt: {
        const int32_t end = NewState();
        for (const Expr& k : e.kids) {
          const int32_t start = NewState();
          nfa_[from].eps.push_back(start);
          int32_t kend;
          if (auto s = Build(k, start, &kend, inline_depth); !s.ok()) return s;
          nfa_[kend].eps.push_back(end);
        }
        *to = end;
        return absl::OkStatus();
      }
      case Expr::kRepeat: {
        const Expr& x = e.kids[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          // A fresh start state per copy keeps copies from sharing edges.
          const int32_t start = NewState();
          nfa_[cur].eps.push_back(start);
          if (auto s = Build(x, start, &cur, inline_depth); !s.ok()) return s;
        }
        const int32_t end = NewState();
        nfa_[cur].eps.push_back(end);
        if (e.max < 0) {
          // Loop: end -> x -> end.
          const int32_t start = NewState();
          nfa_[end].eps.push_back(start);
          int32_t kend;
          if (auto s = Build(x, start, &kend, inline_depth); !s.ok()) return s;
          nfa_[kend].eps.push_back(end);
        } else {
          // x{0,k} as x (x (x)?)?)?: each copy may be the last, so the NFA stays unambiguous.
          for (int32_t i = e.min; i < e.max; ++i) {
            const int32_t start = NewState();
            nfa_[cur].eps.push_back(start);
            if (auto s = Build(x, start, &cur, inline_depth); !s.ok()) return s;
            nfa_[cur].eps.push_back(end);
          }
        }
        *to = end;
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown expression");
  }

  void EpsClosure(std::vector<int32_t>* set) {
    ++stamp_;
    std::vector<int32_t>& s = *set;
    for (int32_t x : s) mark_[x] = stamp_;
    for (size_t i = 0; i < s.size(); ++i) {
      for (int32_t y : nfa_[s[i]].eps) {
        if (mark_[y] != stamp_) {
          mark_[y] = stamp_;
          s.push_back(y);
        }
      }
    }
    std::sort(s.begin(), s.end());
  }

  absl::Status CompileRule(int32_t r) {
    nfa_.clear();
    const int32_t start = NewState();
    int32_t end;
    if (auto s = Build(*p_.bodies_[r], start, &end, 0); !s.ok()) return s;
    mark_.assign(nfa_.size(), 0);
    stamp_ = 0;

    // Subset construction. DFA states of this rule are numbered from `base`.
    const int32_t base = static_cast<int32_t>(a_->states.size());
    absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> subsets;
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      EpsClosure(&set);
      auto [it, inserted] = ids.try_emplace(set, base + static_cast<int32_t>(subsets.size()));
      if (inserted) subsets.push_back(std::move(set));
      return it->second;
    };
    a_->rule_start[r] = intern({start});
    int64_t work = 0;
    const int64_t work_limit = int64_t{64} * limits_.max_states;
    struct Pending {
      std::vector<Automaton::Edge> edges;
      std::vector<Automaton::Call> calls;
      bool final;
    };
    std::vector<Pending> built;
    for (size_t i = 0; i < subsets.size(); ++i) {
      if (static_cast<int64_t>(base) + static_cast<int64_t>(subsets.size()) > limits_.max_states) {
        return TooBig();
      }
      Pending out;
      const std::vector<int32_t> set = subsets[i];  // copy: intern() may grow `subsets`
      out.final = std::binary_search(set.begin(), set.end(), end);
      std::vector<Automaton::Edge> edges;
      std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, nfa ret)
      for (int32_t s : set) {
        edges.insert(edges.end(), nfa_[s].edges.begin(), nfa_[s].edges.end());
        for (const auto& c : nfa_[s].calls) calls.push_back({c.rule, c.ret});
      }
      work += static_cast<int64_t>(set.size() + edges.size() + calls.size());
      if (work > work_limit) return TooBig();
      // Elementary byte intervals between edge boundaries.
      std::vector<int> bounds;
      for (const auto& e : edges) {
        bounds.push_back(e.lo);
        bounds.push_back(e.hi + 1);
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        const int lo = bounds[b], hi = bounds[b + 1] - 1;
        std::vector<int32_t> targets;
        for (const auto& e : edges) {
          if (e.lo <= lo && hi <= e.hi) targets.push_back(e.target);
        }
        work += static_cast<int64_t>(edges.size());
        if (targets.empty()) continue;
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        const int32_t t = intern(std::move(targets));
        if (!out.edges.empty() && out.edges.back().target == t && out.edges.back().hi + 1 == lo) {
          out.edges.back().hi = static_cast<uint8_t>(hi);
        } else {
          out.edges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), t});
        }
      }
      std::sort(calls.begin(), calls.end());
      for (size_t c = 0; c < calls.size();) {
        size_t d = c;
        std::vector<int32_t> rets;
        while (d < calls.size() && calls[d].first == calls[c].first)
          rets.push_back(calls[d++].second);
        out.calls.push_back({calls[c].first, intern(std::move(rets))});
        c = d;
      }
      built.push_back(std::move(out));
    }
    for (Pending& p : built) {
      Automaton::State st;
      st.rule = r;
      st.edge_begin = static_cast<uint32_t>(a_->edges.size());
      a_->edges.insert(a_->edges.end(), p.edges.begin(), p.edges.end());
      st.edge_end = static_cast<uint32_t>(a_->edges.size());
      st.call_begin = static_cast<uint32_t>(a_->calls.size());
      a_->calls.insert(a_->calls.end(), p.calls.begin(), p.calls.end());
      st.call_end = static_cast<uint32_t>(a_->calls.size());
      st.flags = p.final ? Automaton::kFinal : 0;
      a_->states.push_back(st);
    }
    return absl::OkStatus();
  }

  void FinishStates() {
    Automaton& a = *a_;
    // Calls name rules; their starts are now known. Nothing to patch: Call::rule stays a rule.
    for (Automaton::State& s : a.states) {
      const bool edges = s.edge_end > s.edge_begin;
      const bool calls = s.call_end > s.call_begin;
      const bool final = (s.flags & Automaton::kFinal) != 0;
      if (edges) s.flags |= Automaton::kHasEdges;
      if (edges && !calls && !final) s.flags |= Automaton::kPlain;
      if (final && !edges && !calls) s.flags |= Automaton::kPureFinal;
      if (s.edge_end - s.edge_begin > kTableEdges && a.tables.size() + 256 <= kMaxTableEntries) {
        s.table = static_cast<int32_t>(a.tables.size());
        a.tables.resize(a.tables.size() + 256, -1);
        for (uint32_t e = s.edge_begin; e < s.edge_end; ++e) {
          for (int b = a.edges[e].lo; b <= a.edges[e].hi; ++b) {
            a.tables[s.table + b] = a.edges[e].target;
          }
        }
      }
    }
  }

  // Nullable rules, then the "may call at a nullable prefix" graph must be acyclic.
  absl::Status CheckLeftRecursion() {
    const Automaton& a = *a_;
    const int32_t n = static_cast<int32_t>(a.rule_start.size());
    std::vector<uint8_t> nullable(n, 0);
    // States of each rule reachable from its start through calls of nullable rules.
    auto prefix_states = [&](int32_t r, std::vector<int32_t>* out) {
      out->clear();
      out->push_back(a.rule_start[r]);
      ++stamp_;
      if (mark_.size() < a.states.size()) mark_.assign(a.states.size(), 0);
      mark_[a.rule_start[r]] = stamp_;
      for (size_t i = 0; i < out->size(); ++i) {
        const auto& s = a.states[(*out)[i]];
        for (uint32_t c = s.call_begin; c < s.call_end; ++c) {
          const int32_t ret = a.calls[c].ret;
          if (nullable[a.calls[c].rule] && mark_[ret] != stamp_) {
            mark_[ret] = stamp_;
            out->push_back(ret);
          }
        }
      }
    };
    mark_.assign(a.states.size(), 0);
    stamp_ = 0;
    std::vector<int32_t> reach;
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        prefix_states(r, &reach);
        for (int32_t s : reach) {
          if (a.states[s].flags & Automaton::kFinal) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> graph(n);
    for (int32_t r = 0; r < n; ++r) {
      prefix_states(r, &reach);
      for (int32_t s : reach) {
        const auto& st = a.states[s];
        for (uint32_t c = st.call_begin; c < st.call_end; ++c) graph[r].push_back(a.calls[c].rule);
      }
      std::sort(graph[r].begin(), graph[r].end());
      graph[r].erase(std::unique(graph[r].begin(), graph[r].end()), graph[r].end());
    }
    // Iterative DFS for a cycle.
    std::vector<uint8_t> color(n, 0);
    std::vector<int32_t> parent(n, -1);
    for (int32_t r0 = 0; r0 < n; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<int32_t, size_t>> stack{{r0, 0}};
      color[r0] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i == graph[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t next = graph[r][i++];
        if (color[next] == 1) {
          std::vector<std::string> path{a.rule_names[next]};
          for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
            path.push_back(a.rule_names[it->first]);
            if (it->first == next) break;
          }
          std::reverse(path.begin(), path.end());
          return absl::InvalidArgumentError(absl::StrFormat(
              "left recursion: rule '%s' can reach itself without consuming input (%s)",
              a.rule_names[next], absl::StrJoin(path, " -> ")));
        }
        if (color[next] == 0) {
          color[next] = 1;
          stack.push_back({next, 0});
        }
      }
    }
    return absl::OkStatus();
  }

  const Parser& p_;
  const Limits& limits_;
  Automaton* a_ = nullptr;
  std::vector<int32_t> inline_size_;
  std::vector<NfaState> nfa_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
};

thread_local internal::Stepper tls_stepper;
thread_local internal::ArenaNodeMaker tls_arena;

}  // namespace

size_t Automaton::MemoryBytes() const {
  size_t n = states.capacity() * sizeof(State) + edges.capacity() * sizeof(Edge) +
             calls.capacity() * sizeof(Call) + tables.capacity() * sizeof(int32_t) +
             rule_start.capacity() * sizeof(int32_t);
  for (const auto& name : rule_names) n += sizeof(std::string) + name.capacity();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Stacks

namespace internal {

uint64_t NodeHash(int32_t state, const StackNode* parent) {
  uint64_t h = (parent != nullptr ? parent->hash : 0x243F6A8885A308D3ull) ^
               (static_cast<uint64_t>(static_cast<uint32_t>(state)) * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return h;
}

int CompareChains(const StackNode* a, const StackNode* b) {
  while (a != b) {
    if (a == nullptr) return -1;
    if (b == nullptr) return 1;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    a = a->parent;
    b = b->parent;
  }
  return 0;
}

StackRef::StackRef(const StackNode* node) : node_(node) {
  if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
}

StackRef::StackRef(const StackRef& other) : node_(other.node_) {
  if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
}

StackRef::~StackRef() {
  // Iterative, so a deep chain is freed without deep recursion.
  const StackNode* n = node_;
  while (n != nullptr && n->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    const StackNode* parent = n->parent;
    delete n;
    n = parent;
  }
}

const StackNode* HeapNodeMaker::Make(int32_t state, const StackNode* parent) {
  auto* n =
      new StackNode{state, parent ? parent->depth + 1 : 1, NodeHash(state, parent), parent, true};
  // The node owns a reference to its parent (heap nodes only have heap parents).
  if (parent != nullptr) parent->refs.fetch_add(1, std::memory_order_relaxed);
  made_.emplace_back(n);
  return n;
}

const StackNode* ArenaNodeMaker::Make(int32_t state, const StackNode* parent) {
  if (used_ == kChunk) {
    if (chunks_.empty() || chunk_index_ + 1 >= chunks_.size()) {
      chunks_.push_back(std::make_unique<StackNode[]>(kChunk));
      chunk_index_ = chunks_.size() - 1;
    } else {
      ++chunk_index_;
    }
    used_ = 0;
  }
  StackNode& n = chunks_[chunk_index_][used_++];
  n.state = state;
  n.depth = parent ? parent->depth + 1 : 1;
  n.hash = NodeHash(state, parent);
  n.parent = parent;
  n.heap = false;
  return &n;
}

void ArenaNodeMaker::Reset() {
  // Keeps a few chunks for the next walk.
  if (chunks_.size() > 64) chunks_.resize(64);
  chunk_index_ = 0;
  used_ = chunks_.empty() ? kChunk : 0;
}

namespace {
bool StackLess(const RawStack& x, const RawStack& y) {
  if (x.state != y.state) return x.state < y.state;
  return CompareChains(x.parent, y.parent) < 0;
}
bool StackEqual(const RawStack& x, const RawStack& y) {
  return x.state == y.state && CompareChains(x.parent, y.parent) == 0;
}
}  // namespace

void Canonicalize(std::vector<RawStack>* stacks) {
  if (stacks->size() < 2) return;
  std::sort(stacks->begin(), stacks->end(), StackLess);
  stacks->erase(std::unique(stacks->begin(), stacks->end(), StackEqual), stacks->end());
}

bool Stepper::Close(const Automaton& a, const std::vector<RawStack>& seeds, NodeMaker& maker,
                    int32_t max_stacks, RawConfig* out) {
  out->clear();
  visited_.clear();
  memo_.clear();
  work_.assign(seeds.begin(), seeds.end());
  // Each visit either yields an output stack, pops a frame or pushes one; the bound keeps a
  // pathological closure (deep nullable frames, wide nullable fan-out) from running long.
  const int64_t max_visits = int64_t{16} * max_stacks + 4096;
  last_visits_ = 0;
  while (!work_.empty()) {
    const RawStack cur = work_.back();
    work_.pop_back();
    if (!visited_.insert({cur.state, cur.parent}).second) continue;
    if (++last_visits_ > max_visits) return false;
    const Automaton::State& s = a.states[cur.state];
    if (s.flags & Automaton::kHasEdges) {
      out->stacks.push_back(cur);
      if (static_cast<int64_t>(out->stacks.size()) > 4 * static_cast<int64_t>(max_stacks)) {
        return false;
      }
    }
    if (s.flags & Automaton::kFinal) {
      if (cur.parent == nullptr) {
        out->accepting = true;
      } else {
        work_.push_back({cur.parent->state, cur.parent->parent});
      }
    }
    for (uint32_t c = s.call_begin; c < s.call_end; ++c) {
      const Automaton::Call& call = a.calls[c];
      const StackNode* parent = cur.parent;
      if (!(a.states[call.ret].flags & Automaton::kPureFinal)) {
        auto [it, inserted] = memo_.try_emplace({call.ret, cur.parent}, nullptr);
        if (inserted) it->second = maker.Make(call.ret, cur.parent);
        parent = it->second;
      }
      work_.push_back({a.rule_start[call.rule], parent});
    }
  }
  Canonicalize(&out->stacks);
  return static_cast<int64_t>(out->stacks.size()) <= max_stacks;
}

bool Stepper::Step(const Automaton& a, const RawConfig& in, uint8_t byte, NodeMaker& maker,
                   int32_t max_stacks, RawConfig* out) {
  seeds_.clear();
  last_visits_ = 0;
  bool plain = true;
  for (const RawStack& s : in.stacks) {
    const int32_t t = a.Next(s.state, byte);
    if (t < 0) continue;
    seeds_.push_back({t, s.parent});
    if (!(a.states[t].flags & Automaton::kPlain)) plain = false;
  }
  if (seeds_.empty()) {
    out->clear();
    return false;
  }
  if (plain) {
    // Every stack moved within its rule: no calls or returns to follow.
    out->accepting = false;
    out->stacks.assign(seeds_.begin(), seeds_.end());
    Canonicalize(&out->stacks);
    return true;
  }
  if (!Close(a, seeds_, maker, max_stacks, out)) {
    out->clear();
    return false;
  }
  return out->alive();
}

void SerializeConfig(const RawConfig& config, std::vector<int32_t>* out) {
  out->clear();
  out->push_back(config.accepting ? 1 : 0);
  for (const RawStack& s : config.stacks) {
    out->push_back(s.parent ? static_cast<int32_t>(s.parent->depth) : 0);
    out->push_back(s.state);
    for (const StackNode* n = s.parent; n != nullptr; n = n->parent) out->push_back(n->state);
  }
}

void MatcherAccess::Get(const Matcher& m, RawConfig* out) {
  out->stacks.clear();
  for (const auto& s : m.stacks_) out->stacks.push_back({s.state, s.parent.get()});
  out->accepting = m.accepting_;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Grammar and Matcher

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::FromGbnf(std::string_view gbnf,
                                                                 const Limits& limits) {
  if (gbnf.size() > limits.max_source_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar text is %d bytes, over max_source_bytes = %d", gbnf.size(),
                        limits.max_source_bytes));
  }
  Parser parser(gbnf, limits);
  if (auto s = parser.Parse(); !s.ok()) return s;
  Compiler compiler(parser, limits);
  auto automaton = compiler.Compile();
  if (!automaton.ok()) return automaton.status();
  return std::make_shared<const Grammar>(std::string(gbnf), *std::move(automaton), limits);
}

Grammar::Grammar(std::string source, std::unique_ptr<Automaton> automaton, Limits limits)
    : source_(std::move(source)), automaton_(std::move(automaton)), limits_(limits) {}

Grammar::~Grammar() = default;

size_t Grammar::memory_bytes() const {
  return sizeof(Grammar) + source_.capacity() + automaton_->MemoryBytes();
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const Automaton& a = grammar_->automaton();
  internal::HeapNodeMaker maker;
  internal::RawConfig config;
  std::vector<internal::RawStack> seeds{{a.rule_start[a.root], nullptr}};
  if (!tls_stepper.Close(a, seeds, maker, grammar_->limits().max_stacks, &config)) return;
  for (const auto& s : config.stacks) stacks_.push_back({s.state, internal::StackRef(s.parent)});
  accepting_ = config.accepting;
}

bool Matcher::Advance(std::string_view bytes) {
  if (bytes.empty()) return true;
  const Automaton& a = grammar_->automaton();
  internal::HeapNodeMaker maker;
  internal::RawConfig cur, next;
  internal::MatcherAccess::Get(*this, &cur);
  for (char c : bytes) {
    if (!tls_stepper.Step(a, cur, static_cast<uint8_t>(c), maker, grammar_->limits().max_stacks,
                          &next)) {
      return false;
    }
    std::swap(cur, next);
  }
  std::vector<Stack> stacks;
  stacks.reserve(cur.stacks.size());
  for (const auto& s : cur.stacks) stacks.push_back({s.state, internal::StackRef(s.parent)});
  stacks_ = std::move(stacks);
  accepting_ = cur.accepting;
  return true;
}

bool Matcher::CanAdvance(std::string_view bytes) const {
  if (bytes.empty()) return true;
  const Automaton& a = grammar_->automaton();
  internal::RawConfig cur, next;
  internal::MatcherAccess::Get(*this, &cur);
  bool ok = true;
  for (char c : bytes) {
    if (!tls_stepper.Step(a, cur, static_cast<uint8_t>(c), tls_arena, grammar_->limits().max_stacks,
                          &next)) {
      ok = false;
      break;
    }
    std::swap(cur, next);
  }
  tls_arena.Reset();
  return ok;
}

bool Matcher::Accepting() const { return accepting_; }

bool Matcher::Complete() const { return accepting_ && stacks_.empty(); }

}  // namespace pagoda::grammar
