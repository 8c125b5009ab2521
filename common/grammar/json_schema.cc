#include "common/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grammar/gbnf_text.h"
#include "common/grammar/regex.h"
#include "common/status_macros.h"

namespace pagoda::grammar {
namespace {

using Json = nlohmann::ordered_json;
using internal::CodePointSet;
using internal::GbnfLiteral;

constexpr int64_t kUnbounded = -1;
constexpr int kMaxDigits = 18;  // int64 holds every 18-digit magnitude

const std::set<std::string, std::less<>>& Annotations() {
  static const auto* kSet = new std::set<std::string, std::less<>>{
      "title",   "description", "$comment",        "examples",        "default",
      "$schema", "$id",         "deprecated",      "readOnly",        "writeOnly",
      "$defs",   "definitions", "contentEncoding", "contentMediaType"};
  return *kSet;
}

// Keywords that constrain values, and the type they constrain ("" for every type).
const std::map<std::string, std::string, std::less<>>& Constraints() {
  static const auto* kMap = new std::map<std::string, std::string, std::less<>>{
      {"type", ""},
      {"enum", ""},
      {"const", ""},
      {"anyOf", ""},
      {"oneOf", ""},
      {"allOf", ""},
      {"$ref", ""},
      {"properties", "object"},
      {"required", "object"},
      {"additionalProperties", "object"},
      {"items", "array"},
      {"prefixItems", "array"},
      {"additionalItems", "array"},
      {"minItems", "array"},
      {"maxItems", "array"},
      {"minLength", "string"},
      {"maxLength", "string"},
      {"pattern", "string"},
      {"format", "string"},
      {"minimum", "number"},
      {"maximum", "number"},
      {"exclusiveMinimum", "number"},
      {"exclusiveMaximum", "number"},
  };
  return *kMap;
}

const std::vector<std::string>& TypeNames() {
  static const auto* kNames = new std::vector<std::string>{"null",   "boolean", "object", "array",
                                                           "number", "integer", "string"};
  return *kNames;
}

std::string EscapePointerToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Child(const std::string& path, std::string_view token) {
  return path + "/" + EscapePointerToken(token);
}
std::string Child(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

absl::Status ErrorAt(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("JSON Schema at \"#", path, "\": ", message));
}

bool ValidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (internal::DecodeUtf8(s, &pos) < 0) return false;
  }
  return true;
}

// A non-negative decimal magnitude: integer part and fraction digits (no trailing zeros).
struct Magnitude {
  int64_t ip = 0;
  std::string frac;
};

int Compare(const Magnitude& a, const Magnitude& b) {
  if (a.ip != b.ip) return a.ip < b.ip ? -1 : 1;
  int c = a.frac.compare(b.frac);  // lexicographic is numeric for normalized fractions
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// A bound read from the schema: a signed decimal, or a magnitude of 1e18 or more.
struct Number {
  bool negative = false;
  bool huge = false;
  Magnitude m;
};

int CompareSigned(const Number& a, const Number& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = Compare(a.m, b.m);
  return a.negative ? -c : c;
}

absl::StatusOr<Number> ReadNumber(const Json& v, const std::string& path) {
  Number n;
  constexpr uint64_t kHuge = 1000000000000000000ULL;  // 1e18
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u >= kHuge) {
      n.huge = true;
    } else {
      n.m.ip = static_cast<int64_t>(u);
    }
    return n;
  }
  if (v.is_number_integer()) {
    auto i = v.get<int64_t>();
    n.negative = i < 0;
    if (i <= -static_cast<int64_t>(kHuge) || i >= static_cast<int64_t>(kHuge)) {
      n.huge = true;
    } else {
      n.m.ip = i < 0 ? -i : i;
    }
    return n;
  }
  if (!v.is_number_float()) return ErrorAt(path, "must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) return ErrorAt(path, "must be a finite number");
  n.negative = std::signbit(d) && d != 0;
  if (std::fabs(d) >= 1e18) {
    n.huge = true;
    return n;
  }
  char buf[400];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::fixed);
  std::string text(buf, res.ptr);
  size_t dot = text.find('.');
  std::string ip = text.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : text.substr(dot + 1);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  n.m.ip = std::stoll(ip);
  n.m.frac = frac;
  return n;
}

int64_t Pow10(int k) {
  int64_t v = 1;
  for (int i = 0; i < k; ++i) v *= 10;
  return v;
}

int DigitCount(int64_t v) {
  int n = 1;
  while (v >= 10) v /= 10, ++n;
  return n;
}

bool HasTopLevelBar(const std::string& e) {
  int depth = 0;
  bool in_literal = false;
  bool in_class = false;
  for (size_t i = 0; i < e.size(); ++i) {
    char c = e[i];
    if (in_literal || in_class) {
      if (c == '\\') {
        ++i;
      } else if ((in_literal && c == '"') || (in_class && c == ']')) {
        in_literal = in_class = false;
      }
      continue;
    }
    if (c == '"') in_literal = true;
    if (c == '[') in_class = true;
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == '|' && depth == 0) return true;
  }
  return false;
}

std::string Group(const std::string& e) { return HasTopLevelBar(e) ? "( " + e + " )" : e; }

std::string Alternatives(const std::vector<std::string>& alts) {
  return absl::StrJoin(alts, " | ");
}

std::string DigitClass(int lo, int hi) {
  if (lo == hi) return absl::StrCat("\"", lo, "\"");
  if (lo == 0 && hi == 9) return "[0-9]";
  return absl::StrCat("[", lo, "-", hi, "]");
}

std::string AnyDigits(int64_t lo, int64_t hi) {
  if (hi == 0) return "";
  if (lo == 1 && hi == 1) return "[0-9]";
  if (lo == hi) return absl::StrCat("[0-9]{", lo, "}");
  return absl::StrCat("[0-9]{", lo, ",", hi, "}");
}

std::string Cat(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

// Digit strings of one length n, from x to y (x <= y, both n digits): exact.
std::string SameLengthRange(const std::string& x, const std::string& y) {
  size_t n = x.size();
  if (n == 0) return "";
  std::string xt = x.substr(1), yt = y.substr(1);
  if (x[0] == y[0]) {
    return Cat(DigitClass(x[0] - '0', x[0] - '0'), Group(SameLengthRange(xt, yt)));
  }
  bool low_tail = xt.find_first_not_of('0') == std::string::npos;
  bool high_tail = yt.find_first_not_of('9') == std::string::npos;
  int first_full = low_tail ? x[0] - '0' : x[0] - '0' + 1;
  int last_full = high_tail ? y[0] - '0' : y[0] - '0' - 1;
  std::vector<std::string> alts;
  if (!low_tail) {
    alts.push_back(Cat(DigitClass(x[0] - '0', x[0] - '0'),
                       Group(SameLengthRange(xt, std::string(n - 1, '9')))));
  }
  if (first_full <= last_full) {
    alts.push_back(Cat(DigitClass(first_full, last_full), AnyDigits(n - 1, n - 1)));
  }
  if (!high_tail) {
    alts.push_back(Cat(DigitClass(y[0] - '0', y[0] - '0'),
                       Group(SameLengthRange(std::string(n - 1, '0'), yt))));
  }
  return Alternatives(alts);
}

// The integers in [a, b] (0 <= a <= b < 1e18) without leading zeros, one piece per length.
std::vector<std::pair<int, std::string>> NonNegativeIntegerRange(int64_t a, int64_t b) {
  std::vector<std::pair<int, std::string>> pieces;
  if (a > b) return pieces;
  if (a == 0) {
    pieces.emplace_back(1, "\"0\"");
    a = 1;
    if (b == 0) return pieces;
  }
  for (int len = DigitCount(a); len <= DigitCount(b); ++len) {
    int64_t lo = std::max(a, Pow10(len - 1));
    int64_t hi = std::min(b, Pow10(len) - 1);
    if (lo <= hi) pieces.emplace_back(len, SameLengthRange(std::to_string(lo), std::to_string(hi)));
  }
  return pieces;
}

// The integers in [a, b] as alternatives, lengths whose every value is in range merged
// ([1-9] [0-9]{2,14} rather than one alternative per length).
std::vector<std::string> IntegerAlternatives(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int run_first = 0, run_last = 0;  // a run of full lengths
  auto flush = [&] {
    if (run_first == 0) return;
    alts.push_back(Cat("[1-9]", AnyDigits(run_first - 1, run_last - 1)));
    run_first = 0;
  };
  for (const auto& [len, piece] : NonNegativeIntegerRange(a, b)) {
    bool full = len > 1 && a <= Pow10(len - 1) && b >= Pow10(len) - 1;
    if (full) {
      if (run_first == 0) run_first = len;
      run_last = len;
      continue;
    }
    flush();
    alts.push_back(piece);
  }
  flush();
  return alts;
}

// Fraction digit strings s (of at most r digits; empty meaning no fraction) with
// lo <= 0.s <= hi, each side optional and possibly exclusive; lo/hi are the bounds' remaining
// fraction digits ("" is zero).
struct FractionLanguage {
  bool empty_ok = false;
  std::optional<std::string> nonempty;
};

FractionLanguage Fraction(std::optional<std::string> lo, bool lo_excl,
                          const std::optional<std::string>& hi, bool hi_excl, int r) {
  if (lo && lo->empty() && !lo_excl) lo.reset();  // >= 0 holds for every fraction
  FractionLanguage out;
  bool lo_zero_ok = !lo || (lo->empty() && !lo_excl);
  bool hi_zero_ok = !hi || !hi->empty() || !hi_excl;
  out.empty_ok = lo_zero_ok && hi_zero_ok;
  if (r <= 0) return out;
  if (!lo && !hi) {
    out.nonempty = AnyDigits(1, r);
    return out;
  }
  // Digits that share the same remaining constraints form one alternative.
  struct State {
    std::optional<std::string> lo, hi;
    bool operator==(const State&) const = default;
  };
  std::vector<std::string> alts;
  int d = 0;
  while (d <= 9) {
    auto state_of = [&](int digit, State* s) {
      if (lo) {
        int l0 = lo->empty() ? 0 : (*lo)[0] - '0';
        if (digit < l0) return false;
        if (digit == l0) s->lo = lo->empty() ? "" : lo->substr(1);
      }
      if (hi) {
        int h0 = hi->empty() ? 0 : (*hi)[0] - '0';
        if (digit > h0) return false;
        if (digit == h0) s->hi = hi->empty() ? "" : hi->substr(1);
      }
      return true;
    };
    State s;
    if (!state_of(d, &s)) {
      ++d;
      continue;
    }
    int e = d;
    while (e + 1 <= 9) {
      State t;
      if (!state_of(e + 1, &t) || !(t == s)) break;
      ++e;
    }
    if (!s.lo && !s.hi) {
      alts.push_back(Cat(DigitClass(d, e), AnyDigits(0, r - 1)));
    } else {
      FractionLanguage rest = Fraction(s.lo, lo_excl, s.hi, hi_excl, r - 1);
      std::string digit = DigitClass(d, e);
      if (rest.nonempty && rest.empty_ok) {
        alts.push_back(Cat(digit, "( " + *rest.nonempty + " )?"));
      } else if (rest.nonempty) {
        alts.push_back(Cat(digit, Group(*rest.nonempty)));
      } else if (rest.empty_ok) {
        alts.push_back(digit);
      }
    }
    d = e + 1;
  }
  if (!alts.empty()) out.nonempty = Alternatives(alts);
  return out;
}

// "( . F )?", ". F", "" (no fraction) or nothing at all.
std::optional<std::string> FractionText(const FractionLanguage& f) {
  if (f.nonempty) {
    std::string dotted = Cat("\".\"", Group(*f.nonempty));
    return f.empty_ok ? "( " + dotted + " )?" : dotted;
  }
  if (f.empty_ok) return std::string();
  return std::nullopt;
}

struct Bound {
  Magnitude m;
  bool excl = false;
};

// Non-negative decimals x with lower <= x <= upper (upper absent: below 10^digits), at most
// 15 significant digits and `max_frac` fraction digits. Alternatives, each a full sequence.
std::vector<std::string> NonNegativeDecimalRange(const Bound& lower,
                                                 const std::optional<Bound>& upper, int digits,
                                                 int max_frac) {
  std::vector<std::string> alts;
  if (upper) {
    int c = Compare(lower.m, upper->m);
    if (c > 0 || (c == 0 && (lower.excl || upper->excl))) return alts;
  }
  auto frac_cap = [&](int64_t ip) {
    if (ip == 0) return max_frac;
    return std::max(0, std::min(max_frac, 15 - DigitCount(ip)));
  };
  auto add = [&](const std::string& int_text, int cap, const std::optional<std::string>& lo,
                 bool lo_excl, const std::optional<std::string>& hi, bool hi_excl) {
    auto frac = FractionText(Fraction(lo, lo_excl, hi, hi_excl, cap));
    if (frac) alts.push_back(Cat(int_text, *frac));
  };
  int64_t ia = lower.m.ip;
  int64_t ib = upper ? upper->m.ip : Pow10(digits) - 1;
  std::string ia_text = absl::StrCat("\"", ia, "\"");
  if (upper && ia == ib) {
    add(ia_text, frac_cap(ia), lower.m.frac, lower.excl, upper->m.frac, upper->excl);
    return alts;
  }
  add(ia_text, frac_cap(ia), lower.m.frac, lower.excl, std::nullopt, false);
  for (const auto& [len, piece] : NonNegativeIntegerRange(ia + 1, upper ? ib - 1 : ib)) {
    int cap = std::max(0, std::min(max_frac, 15 - len));
    add(Group(piece), cap, std::nullopt, false, std::nullopt, false);
  }
  if (upper) {
    add(absl::StrCat("\"", ib, "\""), frac_cap(ib), std::nullopt, false, upper->m.frac,
        upper->excl);
  }
  return alts;
}

std::string Repeat(const std::string& atom, int64_t lo, int64_t hi) {
  if (hi == kUnbounded) {
    if (lo == 0) return atom + "*";
    if (lo == 1) return atom + "+";
    return absl::StrCat(atom, "{", lo, ",}");
  }
  if (lo == 0 && hi == 1) return atom + "?";
  if (lo == hi) return lo == 1 ? atom : absl::StrCat(atom, "{", lo, "}");
  return absl::StrCat(atom, "{", lo, ",", hi, "}");
}

// Pieces longer than this that are written more than once become rules (Compiler::Shared).
constexpr size_t kMaxInlineSharedBytes = 64;

class Compiler {
 public:
  Compiler(const Json& root, const SchemaOptions& options) : root_(root), options_(options) {
    formulas_.push_back({Formula::kTrue, -1, {}});
    formulas_.push_back({Formula::kFalse, -1, {}});
    for (const char* name : {"root", "ws", "json-value", "json-object", "json-array", "json-string",
                             "json-char", "json-number", "json-integer"}) {
      names_.insert(name);
    }
  }

  absl::StatusOr<std::string> CompileSchema() {
    RETURN_IF_ERROR(CheckOptions());
    auto root = RefTarget("", "root", root_);
    if (!root.ok()) return root.status();
    RETURN_IF_ERROR(CheckProductive());
    return Finish();
  }

  std::string CompileJsonObject() {
    Use("json-object");
    rules_.insert(rules_.begin(), Rule{"root", "json-object", kTrue, "", true});
    return *Finish();
  }

 private:
  static constexpr int kTrue = 0;
  static constexpr int kFalse = 1;

  // Whether a piece of grammar can derive a finite text: a formula over the rules it requires.
  struct Formula {
    enum Kind { kTrue, kFalse, kRef, kAnd, kOr };
    Kind kind;
    int rule;
    std::vector<int> kids;
  };
  struct Piece {
    std::string text;
    int req = kTrue;
  };
  struct Rule {
    std::string name;
    std::string body;
    int req = kTrue;
    std::string path;
    bool done = false;
    int consumed_at_start = 0;
  };

  int And(std::vector<int> kids) {
    std::vector<int> k;
    for (int f : kids) {
      if (f == kFalse) return kFalse;
      if (f != kTrue) k.push_back(f);
    }
    if (k.empty()) return kTrue;
    if (k.size() == 1) return k[0];
    formulas_.push_back({Formula::kAnd, -1, std::move(k)});
    return static_cast<int>(formulas_.size()) - 1;
  }
  int Or(std::vector<int> kids) {
    std::vector<int> k;
    for (int f : kids) {
      if (f == kTrue) return kTrue;
      if (f != kFalse) k.push_back(f);
    }
    if (k.empty()) return kFalse;
    if (k.size() == 1) return k[0];
    formulas_.push_back({Formula::kOr, -1, std::move(k)});
    return static_cast<int>(formulas_.size()) - 1;
  }
  int RefFormula(int rule) {
    formulas_.push_back({Formula::kRef, rule, {}});
    return static_cast<int>(formulas_.size()) - 1;
  }

  absl::Status CheckOptions() {
    if (options_.max_integer_digits < 1 || options_.max_integer_digits > kMaxDigits) {
      return absl::InvalidArgumentError("SchemaOptions: max_integer_digits must be in [1, 18]");
    }
    if (options_.max_fraction_digits < 0 || options_.max_exponent_digits < 0 ||
        options_.max_whitespace < 0 || options_.max_repetition < 1) {
      return absl::InvalidArgumentError("SchemaOptions: negative limit");
    }
    return absl::OkStatus();
  }

  std::string UniqueName(std::string_view hint) {
    std::string base;
    for (char c : hint) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      base += ok ? c : '-';
      if (base.size() >= 40) break;
    }
    if (base.empty()) base = "r";
    std::string name = base;
    for (int i = 2; names_.contains(name); ++i) name = absl::StrCat(base, "-", i);
    names_.insert(name);
    return name;
  }

  int AddRule(std::string name, std::string body, int req, std::string path) {
    rules_.push_back(Rule{std::move(name), std::move(body), req, std::move(path), true, 0});
    return static_cast<int>(rules_.size()) - 1;
  }

  std::string Ws() const { return options_.max_whitespace > 0 ? " ws " : " "; }

  // The shared rules of plain JSON, added on first use.
  std::string Use(const std::string& name) {
    if (used_.contains(name)) return name;
    used_.insert(name);
    std::string ws = Ws();
    if (options_.max_whitespace > 0) {
      Use("ws");
    }
    // ( x ws ( "," ws x ws )* )?, within max_unbounded_items.
    auto items = [&](const std::string& x) {
      int64_t n = options_.max_unbounded_items;
      if (n == 0) return std::string();
      return "( " + x + ws + Repeat("( \",\"" + ws + x + ws + ")", 0, n < 0 ? kUnbounded : n - 1) +
             " )? ";
    };
    if (name == "ws") {
      AddRule("ws", Repeat("[ \\t\\n\\r]", 0, options_.max_whitespace), kTrue, "");
    } else if (name == "json-value") {
      AddRule(name,
              absl::StrCat(Use("json-object"), " | ", Use("json-array"), " | ", Use("json-string"),
                           " | ", Use("json-number"), " | \"true\" | \"false\" | \"null\""),
              kTrue, "");
    } else if (name == "json-object") {
      std::string member = Use("json-string") + ws + "\":\"" + ws + Use("json-value");
      AddRule(name, "\"{\"" + ws + items(member) + "\"}\"", kTrue, "");
    } else if (name == "json-array") {
      AddRule(name, "\"[\"" + ws + items(Use("json-value")) + "\"]\"", kTrue, "");
    } else if (name == "json-string") {
      int64_t n = options_.max_string_length;
      AddRule(name, "\"\\\"\" " + Repeat(Use("json-char"), 0, n < 0 ? kUnbounded : n) + " \"\\\"\"",
              kTrue, "");
    } else if (name == "json-char") {
      AddRule(name, internal::JsonCharGbnf(CodePointSet::All()), kTrue, "");
    } else if (name == "json-number") {
      std::string exp =
          options_.max_exponent_digits > 0
              ? " ( [eE] [-+]? " + Repeat("[0-9]", 1, options_.max_exponent_digits) + " )?"
              : "";
      std::string frac =
          options_.max_fraction_digits > 0
              ? " ( \".\" " + Repeat("[0-9]", 1, options_.max_fraction_digits) + " )?"
              : "";
      AddRule(name,
              "\"-\"? ( \"0\" | [1-9] " + AnyDigits(0, options_.max_integer_digits - 1) + " )" +
                  frac + exp,
              kTrue, "");
    } else if (name == "json-integer") {
      AddRule(name, "\"0\" | \"-\"? [1-9] " + AnyDigits(0, options_.max_integer_digits - 1), kTrue,
              "");
    }
    return name;
  }

  // A shared rule for a format's text (between the quotes).
  std::string UseFormat(const std::string& format) {
    std::string name = "fmt-" + format;
    if (used_.contains(name)) return name;
    used_.insert(name);
    names_.insert(name);
    std::string body;
    if (format == "date") {
      std::string leap =
          "[0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | "
          "[13579] [26] ) \"00\"";
      body =
          "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
          "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
          "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | ( " +
          leap + " ) \"-02-29\"";
    } else if (format == "time") {
      std::string hour = "( [01] [0-9] | \"2\" [0-3] )";
      std::string frac =
          options_.max_fraction_digits > 0
              ? " ( \".\" " + Repeat("[0-9]", 1, options_.max_fraction_digits) + " )?"
              : "";
      body = hour + " \":\" [0-5] [0-9] \":\" [0-5] [0-9]" + frac + " ( \"Z\" | [+\\-] " + hour +
             " \":\" [0-5] [0-9] )";
    } else if (format == "date-time") {
      body = UseFormat("date") + " \"T\" " + UseFormat("time");
    } else if (format == "uuid") {
      body =
          "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
          "[0-9a-fA-F]{12}";
    } else if (format == "email") {
      CodePointSet atom = CodePointSet::Range('a', 'z');
      atom.Add('A', 'Z');
      atom.Add('0', '9');
      for (char c : std::string_view("!#$%&'*+/=?^_`{|}~-")) {
        atom.Add(static_cast<unsigned char>(c), static_cast<unsigned char>(c));
      }
      // Bounded so that every answer can finish (RFC 5321 allows 64 characters of local part
      // and 253 of domain): at most three atoms of 16 characters, and two to four labels of
      // at most 32.
      std::string a = internal::GbnfCharClass(atom) + "{1,16}";
      std::string label = "[a-zA-Z0-9] ( [a-zA-Z0-9\\-]{0,30} [a-zA-Z0-9] )?";
      body = a + " ( \".\" " + a + " ){0,2} \"@\" " + label + " ( \".\" " + label + " ){1,3}";
    } else if (format == "ipv4") {
      std::string octet =
          "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )";
      body = octet + " ( \".\" " + octet + " ){3}";
    }
    AddRule(name, body, kTrue, "");
    return name;
  }

  // Length ranges of the formats' texts (characters), for minLength / maxLength.
  std::pair<int64_t, int64_t> FormatLengths(const std::string& format) const {
    int64_t f = options_.max_fraction_digits;
    if (format == "date") return {10, 10};
    if (format == "time") return {9, 14 + (f > 0 ? f + 1 : 0)};
    if (format == "date-time") return {20, 25 + (f > 0 ? f + 1 : 0)};
    if (format == "uuid") return {36, 36};
    if (format == "ipv4") return {7, 15};
    return {5, 3 * 16 + 2 + 1 + 4 * 32 + 3};  // email
  }

  absl::Status Budget(const std::string& path, int64_t count) {
    total_repetition_ += count;
    if (total_repetition_ > options_.max_total_repetition) {
      return ErrorAt(path, absl::StrFormat("the grammar repeats more than "
                                           "max_total_repetition (%d) elements in all",
                                           options_.max_total_repetition));
    }
    return absl::OkStatus();
  }

  // ---- $ref -------------------------------------------------------------------------------

  // The rule for the schema at `pointer` (compiled once; recursion refers to it by name).
  absl::StatusOr<Piece> RefTarget(const std::string& pointer, const std::string& name_hint,
                                  const Json& target) {
    auto it = ref_rules_.find(pointer);
    if (it != ref_rules_.end()) {
      Rule& rule = rules_[it->second];
      if (!rule.done && rule.consumed_at_start == consumed_) {
        return ErrorAt(pointer, "$ref cycle that consumes no input (left recursion)");
      }
      return Piece{rule.name, RefFormula(it->second)};
    }
    std::string name = pointer.empty() ? "root" : UniqueName(name_hint);
    rules_.push_back(Rule{name, "", kFalse, pointer, false, consumed_});
    int index = static_cast<int>(rules_.size()) - 1;
    ref_rules_[pointer] = index;
    auto piece = Compile(target, pointer, depth_ + 1);
    if (!piece.ok()) return piece.status();
    rules_[index].body = piece->text;
    rules_[index].req = piece->req;
    rules_[index].done = true;
    return Piece{name, RefFormula(index)};
  }

  absl::StatusOr<Piece> Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return ErrorAt(Child(path, "$ref"), "$ref must be a string");
    std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      return ErrorAt(Child(path, "$ref"), absl::StrCat("$ref \"", r,
                                                       "\" is not supported (only \"#\" and JSON "
                                                       "Pointers into this schema, \"#/...\")"));
    }
    // Percent-decoding, then JSON Pointer tokens.
    std::string decoded;
    for (size_t i = 1; i < r.size(); ++i) {
      if (r[i] == '%' && i + 2 < r.size() && std::isxdigit(static_cast<unsigned char>(r[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(r[i + 2]))) {
        decoded += static_cast<char>(std::stoi(r.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += r[i];
      }
    }
    if (!decoded.empty() && decoded[0] != '/') {
      return ErrorAt(Child(path, "$ref"),
                     absl::StrCat("$ref \"", r, "\" is not supported ($anchor names are not)"));
    }
    const Json* node = &root_;
    std::string pointer;
    std::string last = "root";
    size_t pos = 0;
    while (pos < decoded.size()) {
      size_t next = decoded.find('/', pos + 1);
      std::string raw =
          decoded.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      pos = next == std::string::npos ? decoded.size() : next;
      std::string token;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
          token += raw[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          token += raw[i];
        }
      }
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
                 std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        return ErrorAt(Child(path, "$ref"), absl::StrCat("$ref \"", r, "\" resolves to nothing"));
      }
      pointer = Child(pointer, token);
      last = token;
    }
    return RefTarget(pointer, last, *node);
  }

  // ---- schemas ----------------------------------------------------------------------------

  absl::StatusOr<Piece> Compile(const Json& schema, const std::string& path, int depth) {
    if (++nodes_ > options_.max_nodes) {
      return ErrorAt(path, absl::StrFormat("the schema has more than max_nodes (%d) subschemas",
                                           options_.max_nodes));
    }
    if (depth > options_.max_depth) {
      return ErrorAt(
          path, absl::StrFormat("subschemas nest deeper than max_depth (%d)", options_.max_depth));
    }
    int saved_depth = depth_;
    depth_ = depth;
    auto piece = CompileObject(schema, path);
    depth_ = saved_depth;
    // Checked as the text grows, not only at the end: a piece that some construct repeats could
    // otherwise grow past any memory before Finish() sees it.
    if (piece.ok() && piece->text.size() > static_cast<size_t>(options_.max_gbnf_bytes)) {
      return ErrorAt(path, absl::StrFormat("the grammar exceeds max_gbnf_bytes (%d bytes)",
                                           options_.max_gbnf_bytes));
    }
    return piece;
  }

  // A piece the caller writes more than once: longer texts become a rule of their own, used by
  // name, so that nested repetitions (arrays of arrays of ...) grow the grammar linearly, not
  // by a factor per level.
  Piece Shared(Piece piece, const std::string& path, std::string_view name_hint) {
    if (piece.text.size() <= kMaxInlineSharedBytes) return piece;
    const int index = AddRule(UniqueName(name_hint), std::move(piece.text), piece.req, path);
    return Piece{rules_[index].name, RefFormula(index)};
  }

  absl::StatusOr<Piece> CompileObject(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Piece{Use("json-value"), kTrue};
      return ErrorAt(path, "the schema false accepts no value");
    }
    if (!schema.is_object()) return ErrorAt(path, "a schema must be an object or a boolean");
    std::set<std::string> present;  // constraint keywords
    for (const auto& [key, value] : schema.items()) {
      if (Annotations().contains(key)) {
        if ((key == "$defs" || key == "definitions") && !value.is_object()) {
          return ErrorAt(Child(path, key), absl::StrCat(key, " must be an object"));
        }
        continue;
      }
      if (!Constraints().contains(key)) {
        return ErrorAt(Child(path, key), absl::StrCat("keyword \"", key,
                                                      "\" is not supported (it cannot be "
                                                      "enforced by the grammar)"));
      }
      present.insert(key);
    }
    RETURN_IF_ERROR(CheckForms(schema, path));
    auto others = [&](std::initializer_list<std::string_view> allowed) -> std::string {
      for (const auto& k : present) {
        if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) return k;
      }
      return "";
    };
    if (present.contains("$ref")) {
      if (auto k = others({"$ref"}); !k.empty()) {
        return ErrorAt(Child(path, k), absl::StrCat("\"", k, "\" next to $ref is not supported"));
      }
      return Ref(schema["$ref"], path);
    }
    if (present.contains("allOf")) {
      if (auto k = others({"allOf"}); !k.empty()) {
        return ErrorAt(Child(path, k), absl::StrCat("\"", k, "\" next to allOf is not supported"));
      }
      if (schema["allOf"].size() != 1) {
        return ErrorAt(Child(path, "allOf"),
                       "allOf with more than one schema is not supported (the grammar cannot "
                       "intersect them)");
      }
      return Compile(schema["allOf"][0], Child(Child(path, "allOf"), 0), depth_ + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!present.contains(key)) continue;
      if (auto k = others({key}); !k.empty()) {
        return ErrorAt(Child(path, k),
                       absl::StrCat("\"", k, "\" next to ", key, " is not supported"));
      }
      std::vector<std::string> alts;
      std::vector<int> reqs;
      const Json& list = schema[key];
      for (size_t i = 0; i < list.size(); ++i) {
        auto piece = Compile(list[i], Child(Child(path, key), i), depth_ + 1);
        if (!piece.ok()) return piece.status();
        alts.push_back(piece->text);
        reqs.push_back(piece->req);
      }
      return Piece{alts.size() == 1 ? alts[0] : "( " + Alternatives(alts) + " )", Or(reqs)};
    }

    // The types this schema generates.
    std::vector<std::string> types;
    if (present.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else {
        for (const auto& e : t) types.push_back(e.get<std::string>());
      }
    }
    if (present.contains("enum") || present.contains("const")) {
      if (auto k = others({"enum", "const", "type"}); !k.empty()) {
        return ErrorAt(Child(path, k),
                       absl::StrCat("\"", k, "\" next to enum/const is not supported"));
      }
      return Enum(schema, path, types);
    }
    if (types.empty()) {
      std::set<std::string> implied;
      for (const auto& k : present) implied.insert(Constraints().at(k));
      for (const auto& name : TypeNames()) {
        if (implied.contains(name)) types.push_back(name);
      }
      if (types.empty()) return Piece{Use("json-value"), kTrue};
    }
    bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    std::vector<std::string> alts;
    std::vector<int> reqs;
    for (const auto& type : types) {
      absl::StatusOr<Piece> piece;
      if (type == "null") {
        piece = Piece{"\"null\"", kTrue};
      } else if (type == "boolean") {
        piece = Piece{"( \"true\" | \"false\" )", kTrue};
      } else if (type == "integer") {
        if (has_number) continue;  // every integer is a number
        piece = Numeric(schema, path, /*integer=*/true);
      } else if (type == "number") {
        piece = Numeric(schema, path, /*integer=*/false);
      } else if (type == "string") {
        piece = String(schema, path);
      } else if (type == "array") {
        piece = Array(schema, path);
      } else {
        piece = Object(schema, path);
      }
      if (!piece.ok()) return piece.status();
      alts.push_back(piece->text);
      reqs.push_back(piece->req);
    }
    if (alts.size() == 1) return Piece{alts[0], reqs[0]};
    return Piece{"( " + Alternatives(alts) + " )", Or(reqs)};
  }

  // The forms of the keywords' values (malformed schemas), whatever types are generated.
  absl::Status CheckForms(const Json& s, const std::string& path) {
    auto count = [&](const char* key) -> absl::Status {
      if (!s.contains(key)) return absl::OkStatus();
      const Json& v = s[key];
      bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                (v.is_number_float() && v.get<double>() >= 0 &&
                 v.get<double>() == std::floor(v.get<double>()));
      if (!ok)
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a non-negative integer"));
      return absl::OkStatus();
    };
    for (const char* key : {"minItems", "maxItems", "minLength", "maxLength"}) {
      RETURN_IF_ERROR(count(key));
    }
    for (const char* key : {"minimum", "maximum"}) {
      if (s.contains(key) && !s[key].is_number()) {
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a number"));
      }
    }
    for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      const Json& v = s[key];
      if (v.is_boolean()) {  // draft 4: a flag on minimum / maximum
        const char* base = key[9] == 'M' && key[10] == 'i' ? "minimum" : "maximum";
        if (!s.contains(base)) {
          return ErrorAt(Child(path, key), absl::StrCat("boolean ", key, " needs ", base));
        }
      } else if (!v.is_number()) {
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a number"));
      }
    }
    for (const char* key : {"pattern", "format", "$ref"}) {
      if (s.contains(key) && !s[key].is_string()) {
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a string"));
      }
    }
    for (const char* key : {"anyOf", "oneOf", "allOf", "prefixItems"}) {
      if (s.contains(key) && (!s[key].is_array() || s[key].empty())) {
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a non-empty array"));
      }
    }
    if (s.contains("enum") && (!s["enum"].is_array() || s["enum"].empty())) {
      return ErrorAt(Child(path, "enum"), "enum must be a non-empty array");
    }
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<Json> names;
      if (t.is_string()) {
        names.push_back(t);
      } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) names.push_back(e);
      } else {
        return ErrorAt(Child(path, "type"), "type must be a string or a non-empty array");
      }
      std::set<std::string> seen;
      for (const auto& n : names) {
        if (!n.is_string() || std::find(TypeNames().begin(), TypeNames().end(),
                                        n.get<std::string>()) == TypeNames().end()) {
          return ErrorAt(Child(path, "type"), absl::StrCat("unknown type ", n.dump()));
        }
        if (!seen.insert(n.get<std::string>()).second) {
          return ErrorAt(Child(path, "type"), "type lists a name twice");
        }
      }
    }
    if (s.contains("properties") && !s["properties"].is_object()) {
      return ErrorAt(Child(path, "properties"), "properties must be an object");
    }
    if (s.contains("required")) {
      const Json& r = s["required"];
      bool ok = r.is_array();
      if (ok) {
        for (const auto& e : r) ok = ok && e.is_string();
      }
      if (!ok) return ErrorAt(Child(path, "required"), "required must be an array of strings");
    }
    for (const char* key : {"additionalProperties", "additionalItems"}) {
      if (s.contains(key) && !s[key].is_boolean() && !s[key].is_object()) {
        return ErrorAt(Child(path, key), absl::StrCat(key, " must be a schema"));
      }
    }
    if (s.contains("items") && !s["items"].is_boolean() && !s["items"].is_object() &&
        !s["items"].is_array()) {
      return ErrorAt(Child(path, "items"), "items must be a schema");
    }
    if (s.contains("minItems") && s.contains("maxItems") &&
        s["minItems"].get<double>() > s["maxItems"].get<double>()) {
      return ErrorAt(Child(path, "minItems"), "minItems exceeds maxItems");
    }
    if (s.contains("minLength") && s.contains("maxLength") &&
        s["minLength"].get<double>() > s["maxLength"].get<double>()) {
      return ErrorAt(Child(path, "minLength"), "minLength exceeds maxLength");
    }
    if (s.contains("minimum") && s.contains("maximum") &&
        s["minimum"].get<double>() > s["maximum"].get<double>()) {
      return ErrorAt(Child(path, "minimum"), "minimum exceeds maximum");
    }
    return absl::OkStatus();
  }

  static int64_t Count(const Json& s, const char* key, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    double d = s[key].get<double>();
    return d > 1e15 ? int64_t{1000000000000000} : static_cast<int64_t>(d);
  }

  // ---- enum / const -----------------------------------------------------------------------

  absl::StatusOr<Piece> Enum(const Json& s, const std::string& path,
                             const std::vector<std::string>& types) {
    std::vector<const Json*> values;
    std::string key = s.contains("enum") ? "enum" : "const";
    if (s.contains("enum") && s.contains("const")) {
      return ErrorAt(Child(path, "const"), "const next to enum is not supported");
    }
    if (key == "enum") {
      for (const auto& v : s["enum"]) values.push_back(&v);
    } else {
      values.push_back(&s["const"]);
    }
    auto has_type = [&](const Json& v) {
      if (types.empty()) return true;
      for (const auto& t : types) {
        if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) ||
            (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
            (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" && v.is_number() &&
             (!v.is_number_float() || v.get<double>() == std::floor(v.get<double>())))) {
          return true;
        }
      }
      return false;
    };
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const Json* v : values) {
      if (!has_type(*v)) continue;
      std::string text;
      try {
        text = v->dump();
      } catch (const nlohmann::json::exception&) {
        return ErrorAt(Child(path, key), "a value holds invalid UTF-8");
      }
      enum_bytes_ += static_cast<int64_t>(text.size());
      if (enum_bytes_ > options_.max_enum_bytes) {
        return ErrorAt(Child(path, key), absl::StrFormat("enum/const values exceed "
                                                         "max_enum_bytes (%d)",
                                                         options_.max_enum_bytes));
      }
      if (seen.insert(text).second) alts.push_back(GbnfLiteral(text));
    }
    if (alts.empty()) return ErrorAt(Child(path, key), "no value has the schema's type");
    if (alts.size() == 1) return Piece{alts[0], kTrue};
    return Piece{"( " + Alternatives(alts) + " )", kTrue};
  }

  // ---- numbers ----------------------------------------------------------------------------

  struct SignedBound {
    Number n;
    bool excl = false;
  };

  // The tighter of minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum.
  absl::StatusOr<std::optional<SignedBound>> ReadBound(const Json& s, const std::string& path,
                                                       bool lower) {
    const char* inclusive_key = lower ? "minimum" : "maximum";
    const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<SignedBound> best;
    auto consider = [&](const char* key, bool excl) -> absl::Status {
      auto n = ReadNumber(s[key], Child(path, key));
      if (!n.ok()) return n.status();
      if (n->huge) {
        // Beyond 1e18: on the open side it bounds nothing the grammar writes.
        if (n->negative == lower) return absl::OkStatus();
        return ErrorAt(Child(path, key), absl::StrCat(key, " beyond 1e18 is not supported"));
      }
      SignedBound b{*n, excl};
      if (b.n.m.ip == 0 && b.n.m.frac.empty()) b.n.negative = false;
      if (!best) {
        best = b;
      } else {
        int c = CompareSigned(b.n, best->n);
        if ((lower && c > 0) || (!lower && c < 0) || (c == 0 && excl)) best = b;
      }
      return absl::OkStatus();
    };
    bool draft4_excl =
        s.contains(exclusive_key) && s[exclusive_key].is_boolean() && s[exclusive_key].get<bool>();
    if (s.contains(inclusive_key)) RETURN_IF_ERROR(consider(inclusive_key, draft4_excl));
    if (s.contains(exclusive_key) && s[exclusive_key].is_number()) {
      RETURN_IF_ERROR(consider(exclusive_key, true));
    }
    return best;
  }

  absl::StatusOr<Piece> Numeric(const Json& s, const std::string& path, bool integer) {
    auto lower = ReadBound(s, path, true);
    if (!lower.ok()) return lower.status();
    auto upper = ReadBound(s, path, false);
    if (!upper.ok()) return upper.status();
    if (!*lower && !*upper) return Piece{Use(integer ? "json-integer" : "json-number"), kTrue};
    int digits = options_.max_integer_digits;
    for (const auto* b : {&*lower, &*upper}) {
      if (*b) digits = std::max(digits, DigitCount((*b)->n.m.ip));
    }
    std::string where = Child(path, *lower ? "minimum" : "maximum");
    if (*lower && *upper) {
      int c = CompareSigned((*lower)->n, (*upper)->n);
      if (c > 0 || (c == 0 && ((*lower)->excl || (*upper)->excl))) {
        return ErrorAt(where, "the bounds leave no number");
      }
    }
    std::vector<std::string> alts;
    if (integer) {
      int64_t limit = Pow10(digits) - 1;
      int64_t lo = -limit, hi = limit;
      if (*lower) {
        const SignedBound& b = **lower;
        int64_t v = b.n.negative ? -b.n.m.ip : b.n.m.ip;
        if (b.n.m.frac.empty()) {
          lo = b.excl ? v + 1 : v;
        } else {
          lo = b.n.negative ? v : v + 1;  // ceil
        }
      }
      if (*upper) {
        const SignedBound& b = **upper;
        int64_t v = b.n.negative ? -b.n.m.ip : b.n.m.ip;
        if (b.n.m.frac.empty()) {
          hi = b.excl ? v - 1 : v;
        } else {
          hi = b.n.negative ? v - 1 : v;  // floor
        }
      }
      if (lo > hi) return ErrorAt(where, "the bounds leave no integer");
      if (lo < 0) {
        auto neg = IntegerAlternatives(std::max<int64_t>(1, -hi), -lo);
        if (!neg.empty()) alts.push_back("\"-\" " + Group(Alternatives(neg)));
      }
      if (hi >= 0) {
        for (auto& piece : IntegerAlternatives(std::max<int64_t>(0, lo), hi)) alts.push_back(piece);
      }
    } else {
      // v >= 0: [max(lower, 0), upper]; v < 0: -x with x in (max(-upper, 0), -lower].
      bool pos_empty = *upper && (*upper)->n.negative;
      if (!pos_empty) {
        Bound lo{{0, ""}, false};
        if (*lower && !(*lower)->n.negative) lo = Bound{(*lower)->n.m, (*lower)->excl};
        std::optional<Bound> hi;
        if (*upper) hi = Bound{(*upper)->n.m, (*upper)->excl};
        for (auto& a : NonNegativeDecimalRange(lo, hi, digits, options_.max_fraction_digits)) {
          alts.push_back(a);
        }
      }
      bool neg_empty = *lower && !(*lower)->n.negative;
      if (!neg_empty) {
        Bound lo{{0, ""}, true};
        if (*upper && (*upper)->n.negative) lo = Bound{(*upper)->n.m, (*upper)->excl};
        std::optional<Bound> hi;
        if (*lower) hi = Bound{(*lower)->n.m, (*lower)->excl};
        auto neg = NonNegativeDecimalRange(lo, hi, digits, options_.max_fraction_digits);
        if (!neg.empty()) alts.push_back("\"-\" " + Group(Alternatives(neg)));
      }
    }
    if (alts.empty()) return ErrorAt(where, "the bounds leave no number the grammar can write");
    return Piece{"( " + Alternatives(alts) + " )", kTrue};
  }

  // ---- strings ----------------------------------------------------------------------------

  absl::StatusOr<Piece> String(const Json& s, const std::string& path) {
    int64_t min_len = Count(s, "minLength", 0);
    int64_t explicit_max = Count(s, "maxLength", kUnbounded);
    if (explicit_max > options_.max_repetition) explicit_max = options_.max_repetition;
    int64_t max_len = Count(
        s, "maxLength", options_.max_string_length < 0 ? kUnbounded : options_.max_string_length);
    if (min_len > options_.max_repetition) {
      return ErrorAt(
          Child(path, "minLength"),
          absl::StrFormat("minLength exceeds max_repetition (%d)", options_.max_repetition));
    }
    if (max_len > options_.max_repetition) max_len = options_.max_repetition;
    std::string quote = "\"\\\"\"";
    bool has_length = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      std::string format = s["format"].get<std::string>();
      static const std::set<std::string> kFormats = {"date", "time",  "date-time",
                                                     "uuid", "email", "ipv4"};
      if (!kFormats.contains(format)) {
        return ErrorAt(Child(path, "format"),
                       absl::StrCat("format \"", format, "\" is not supported"));
      }
      if (s.contains("pattern")) {
        return ErrorAt(Child(path, "pattern"), "pattern next to format is not supported");
      }
      if (has_length) {
        auto [lo, hi] = FormatLengths(format);
        if (lo < min_len ||
            (explicit_max != kUnbounded && (hi == kUnbounded || hi > explicit_max))) {
          return ErrorAt(Child(path, "format"),
                         absl::StrCat("format \"", format,
                                      "\" together with minLength/maxLength is not supported"));
        }
      }
      return Piece{quote + " " + UseFormat(format) + " " + quote, kTrue};
    }
    if (s.contains("pattern")) {
      RegexOptions ro;
      ro.search = true;
      ro.json_string = true;
      ro.max_repetition = options_.max_repetition;
      ro.min_length = static_cast<int32_t>(min_len);
      ro.max_length = static_cast<int32_t>(explicit_max);
      std::string helpers;
      std::string pattern = s["pattern"].get<std::string>();
      if (!ValidUtf8(pattern)) return ErrorAt(Child(path, "pattern"), "invalid UTF-8");
      auto expr = RegexToGbnf(pattern, "re", &helpers, ro);
      if (!expr.ok()) return ErrorAt(Child(path, "pattern"), std::string(expr.status().message()));
      RETURN_IF_ERROR(Budget(Child(path, "pattern"), static_cast<int64_t>(pattern.size())));
      return Piece{quote + " " + Group(*expr) + " " + quote, kTrue};
    }
    if (max_len != kUnbounded) RETURN_IF_ERROR(Budget(path, max_len));
    RETURN_IF_ERROR(Budget(path, min_len));
    return Piece{quote + " " + Repeat(Use("json-char"), min_len, max_len) + " " + quote, kTrue};
  }

  // ---- arrays -----------------------------------------------------------------------------

  absl::StatusOr<Piece> Array(const Json& s, const std::string& path) {
    std::vector<Piece> prefix;
    std::optional<Piece> item;  // nullopt: no items after the prefix
    bool tuple_items = s.contains("items") && s["items"].is_array();
    if (tuple_items && s.contains("prefixItems")) {
      return ErrorAt(Child(path, "items"), "items as an array next to prefixItems");
    }
    std::string prefix_key = tuple_items ? "items" : "prefixItems";
    std::string item_key = tuple_items ? "additionalItems" : "items";
    ++consumed_;
    if (s.contains(prefix_key)) {
      const Json& list = s[prefix_key];
      for (size_t i = 0; i < list.size(); ++i) {
        auto p = Compile(list[i], Child(Child(path, prefix_key), i), depth_ + 1);
        if (!p.ok()) return p.status();
        prefix.push_back(*p);
      }
    }
    if (!s.contains(item_key) || (s[item_key].is_boolean() && s[item_key].get<bool>())) {
      item = Piece{Use("json-value"), kTrue};
    } else if (!s[item_key].is_boolean()) {
      auto p = Compile(s[item_key], Child(path, item_key), depth_ + 1);
      if (!p.ok()) return p.status();
      item = Shared(*std::move(p), Child(path, item_key), "item");  // written twice below
    }
    --consumed_;
    int64_t k = static_cast<int64_t>(prefix.size());
    int64_t lo = Count(s, "minItems", 0);
    int64_t hi = Count(s, "maxItems", kUnbounded);
    if (!s.contains("maxItems") && options_.max_unbounded_items >= 0) {
      hi = std::max<int64_t>(options_.max_unbounded_items, std::min(lo, k));
    }
    if (!item) hi = hi == kUnbounded ? k : std::min(hi, k);
    if (hi != kUnbounded && lo > hi) {
      return ErrorAt(Child(path, "minItems"),
                     "minItems exceeds the number of items prefixItems/items allow");
    }
    if (lo > options_.max_repetition) {
      return ErrorAt(
          Child(path, "minItems"),
          absl::StrFormat("minItems exceeds max_repetition (%d)", options_.max_repetition));
    }
    if (hi > options_.max_repetition) hi = options_.max_repetition;
    if (hi != kUnbounded && hi < k) {
      prefix.resize(static_cast<size_t>(hi));
      k = hi;
    }
    std::string ws = Ws();
    std::string sep = "\",\"" + ws;
    std::vector<int> reqs;
    std::string body;
    if (k == 0) {
      if (hi != 0) {
        int64_t more_lo = std::max<int64_t>(lo - 1, 0);
        int64_t more_hi = hi == kUnbounded ? kUnbounded : hi - 1;
        RETURN_IF_ERROR(Budget(path, std::max(more_lo, more_hi)));
        body = item->text + ws + Repeat("( " + sep + item->text + ws + ")", more_lo, more_hi);
        if (lo == 0) {
          body = "( " + body + " )?";
        } else {
          reqs.push_back(item->req);
        }
      }
    } else {
      // Items after the prefix, once all k prefix items are present.
      std::string tail;
      if (item && (hi == kUnbounded || hi > k)) {
        int64_t more_lo = std::max<int64_t>(lo - k, 0);
        int64_t more_hi = hi == kUnbounded ? kUnbounded : hi - k;
        RETURN_IF_ERROR(Budget(path, std::max(more_lo, more_hi)));
        tail = Repeat("( " + sep + item->text + ws + ")", more_lo, more_hi);
        if (more_lo > 0) reqs.push_back(item->req);
      }
      // Innermost first: prefix item j (1-based) is required when j <= minItems.
      std::string inner = tail;
      for (int64_t j = k; j >= 1; --j) {
        std::string element = Cat(prefix[j - 1].text + ws, inner);
        if (j <= lo) reqs.push_back(prefix[j - 1].req);
        if (j == 1) {
          inner = j <= lo ? element : "( " + element + " )?";
        } else {
          std::string with_sep = sep + element;
          inner = j <= lo ? with_sep : "( " + with_sep + " )?";
        }
      }
      body = inner;
    }
    return Piece{Cat("\"[\"" + ws + body, "\"]\""), And(reqs)};
  }

  // ---- objects ----------------------------------------------------------------------------

  struct Slot {
    std::string member;  // key ws ":" ws value
    int req = kTrue;
    enum Kind { kRequired, kOptional, kRepeated } kind;
  };

  // JSON string literals (quotes included) whose content is not one of `names`.
  std::string KeyNotIn(const std::vector<std::string>& names, const std::string& base) {
    struct TrieNode {
      std::map<uint32_t, int> children;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const auto& name : names) {
      int node = 0;
      size_t pos = 0;
      while (pos < name.size()) {
        auto c = static_cast<uint32_t>(internal::DecodeUtf8(name, &pos));
        auto it = trie[node].children.find(c);
        if (it == trie[node].children.end()) {
          trie.push_back({});
          int fresh = static_cast<int>(trie.size()) - 1;
          trie[node].children[c] = fresh;
          node = fresh;
        } else {
          node = it->second;
        }
      }
      trie[node].terminal = true;
    }
    std::string quote = "\"\\\"\"";
    std::string any_rest = Repeat(Use("json-char"), 0, kUnbounded) + " " + quote;
    std::vector<std::string> node_names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) node_names[i] = UniqueName(base + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      const TrieNode& n = trie[i];
      std::vector<std::string> alts;
      if (!n.terminal) alts.push_back(quote);
      CodePointSet others = CodePointSet::All();
      for (const auto& [c, child] : n.children) others = others.Minus(CodePointSet::Of(c));
      alts.push_back(internal::JsonCharGbnf(others) + " " + any_rest);
      for (const auto& [c, child] : n.children) {
        std::string utf8;
        internal::AppendUtf8(c, &utf8);
        std::string spelled = internal::JsonQuote(utf8);
        alts.push_back(GbnfLiteral(spelled.substr(1, spelled.size() - 2)) + " " +
                       node_names[child]);
      }
      AddRule(node_names[i], Alternatives(alts), kTrue, "");
    }
    return quote + " " + node_names[0];
  }

  absl::StatusOr<Piece> Object(const Json& s, const std::string& path) {
    std::string ws = Ws();
    std::vector<Slot> slots;
    std::vector<std::string> names;
    std::set<std::string> required;
    if (s.contains("required")) {
      for (const auto& r : s["required"]) required.insert(r.get<std::string>());
    }
    bool has_properties = s.contains("properties");
    const Json* additional =
        s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    bool closed =
        additional ? additional->is_boolean() && !additional->get<bool>() : has_properties;
    ++consumed_;
    auto member = [&](const std::string& name, const Piece& value) {
      return GbnfLiteral(internal::JsonQuote(name)) + ws + "\":\"" + ws + value.text;
    };
    std::optional<Piece> extra_value;
    if (!additional || (additional->is_boolean() && additional->get<bool>())) {
      extra_value = Piece{"json-value", kTrue};  // the rule is added where it is used
    } else if (!additional->is_boolean()) {
      auto p = Compile(*additional, Child(path, "additionalProperties"), depth_ + 1);
      if (!p.ok()) return p.status();
      extra_value = *p;
    }
    if (has_properties) {
      for (const auto& [name, schema] : s["properties"].items()) {
        if (!ValidUtf8(name)) return ErrorAt(Child(path, "properties"), "invalid UTF-8 in a name");
        auto p = Compile(schema, Child(Child(path, "properties"), name), depth_ + 1);
        if (!p.ok()) return p.status();
        bool req = required.contains(name);
        slots.push_back(
            {member(name, *p), req ? p->req : kTrue, req ? Slot::kRequired : Slot::kOptional});
        names.push_back(name);
      }
    }
    for (const auto& name : required) {  // required names that properties does not declare
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      if (!ValidUtf8(name)) return ErrorAt(Child(path, "required"), "invalid UTF-8 in a name");
      if (!extra_value) {
        return ErrorAt(Child(path, "required"),
                       absl::StrCat("required property \"", name,
                                    "\" is not in properties and additionalProperties is false"));
      }
      if (extra_value->text == "json-value") Use("json-value");
      slots.push_back({member(name, *extra_value), extra_value->req, Slot::kRequired});
      names.push_back(name);
    }
    --consumed_;
    if (!closed && extra_value) {
      if (extra_value->text == "json-value") Use("json-value");
      std::string key = KeyNotIn(names, UniqueName("obj"));
      slots.push_back({key + ws + "\":\"" + ws + extra_value->text, kTrue, Slot::kRepeated});
    }
    std::vector<int> reqs;
    for (const auto& slot : slots) reqs.push_back(slot.req);

    std::string sep = options_.max_whitespace > 0 ? "ws \",\" ws " : "\",\" ";
    auto form = [&](const Slot& slot) {
      switch (slot.kind) {
        case Slot::kRequired:
          return sep + slot.member;
        case Slot::kOptional:
          return "( " + sep + slot.member + " )?";
        case Slot::kRepeated:
          return Repeat(
              "( " + sep + slot.member + " )", 0,
              options_.max_unbounded_items < 0 ? kUnbounded : options_.max_unbounded_items);
      }
      return std::string();
    };
    std::string body;
    auto first_required = std::find_if(
        slots.begin(), slots.end(), [](const Slot& slot) { return slot.kind == Slot::kRequired; });
    if (first_required != slots.end()) {
      // Optional members before the first required one end with a comma; the rest start
      // with one.
      for (auto it = slots.begin(); it != first_required; ++it) {
        body += "( " + it->member + " " + sep + ")? ";
      }
      body += first_required->member;
      for (auto it = first_required + 1; it != slots.end(); ++it) body += " " + form(*it);
    } else if (!slots.empty()) {
      // All optional: the first member present, then the rest (rest-i rules keep it linear).
      std::string base = UniqueName("obj");
      std::vector<std::string> rest(slots.size() + 1);
      for (size_t i = slots.size(); i-- > 1;) {
        std::string body_i = form(slots[i]);
        if (!rest[i + 1].empty()) body_i += " " + rest[i + 1];
        rest[i] = UniqueName(base + "-rest");
        AddRule(rest[i], body_i, kTrue, path);
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < slots.size(); ++i) {
        std::string a = slots[i].member;
        if (slots[i].kind == Slot::kRepeated) a += " " + form(slots[i]);
        if (!rest[i + 1].empty()) a += " " + rest[i + 1];
        alts.push_back(a);
      }
      body = "( " + Alternatives(alts) + " )?";
    }
    std::string text = "\"{\"" + ws + (body.empty() ? "" : body + ws) + "\"}\"";
    return Piece{text, And(reqs)};
  }

  // ---- checks and output ------------------------------------------------------------------

  bool Eval(int f, const std::vector<bool>& productive) const {
    const Formula& x = formulas_[f];
    switch (x.kind) {
      case Formula::kTrue:
        return true;
      case Formula::kFalse:
        return false;
      case Formula::kRef:
        return productive[x.rule];
      case Formula::kAnd:
        for (int k : x.kids) {
          if (!Eval(k, productive)) return false;
        }
        return true;
      case Formula::kOr:
        for (int k : x.kids) {
          if (Eval(k, productive)) return true;
        }
        return false;
    }
    return false;
  }

  // Every rule must derive some finite text, or a walk that enters it never ends.
  absl::Status CheckProductive() {
    std::vector<bool> productive(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < rules_.size(); ++i) {
        if (!productive[i] && Eval(rules_[i].req, productive)) {
          productive[i] = true;
          changed = true;
        }
      }
    }
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!productive[i]) {
        return ErrorAt(rules_[i].path,
                       "no finite value matches this schema (its $ref recursion never ends)");
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Finish() {
    std::string out;
    // The root first, then the rest in the order they were made (deterministic).
    for (const auto& rule : rules_) {
      if (rule.name == "root") out += rule.name + " ::= " + rule.body + "\n";
    }
    for (const auto& rule : rules_) {
      if (rule.name != "root") out += rule.name + " ::= " + rule.body + "\n";
    }
    if (out.size() > static_cast<size_t>(options_.max_gbnf_bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "JSON Schema: the grammar exceeds max_gbnf_bytes (%d bytes)", options_.max_gbnf_bytes));
    }
    return out;
  }

  const Json& root_;
  const SchemaOptions& options_;
  std::vector<Formula> formulas_;
  std::vector<Rule> rules_;
  std::set<std::string> names_;
  std::set<std::string> used_;
  absl::flat_hash_map<std::string, int> ref_rules_;
  int64_t nodes_ = 0;
  int64_t enum_bytes_ = 0;
  int64_t total_repetition_ = 0;
  int depth_ = 0;
  int consumed_ = 0;  // containers opened on the way here (a byte consumed)
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const SchemaOptions& options) {
  Compiler compiler(schema, options);
  return compiler.CompileSchema();
}

std::string JsonObjectGbnf(const SchemaOptions& options) {
  Compiler compiler(nlohmann::ordered_json::object(), options);
  return compiler.CompileJsonObject();
}

}  // namespace pagoda::grammar
