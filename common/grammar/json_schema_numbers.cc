// See json_schema_compiler.h.
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
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/status_macros.h"

namespace pagoda::grammar::internal {
namespace {

int Compare(const Magnitude& a, const Magnitude& b) {
  if (a.ip != b.ip) return a.ip < b.ip ? -1 : 1;
  int c = a.frac.compare(b.frac);  // lexicographic is numeric for normalized fractions
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

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

}  // namespace

absl::StatusOr<Compiler::Piece> Compiler::Enum(const Json& s, const std::string& path,
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

absl::StatusOr<std::optional<Compiler::SignedBound>> Compiler::ReadBound(const Json& s,
                                                                         const std::string& path,
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

absl::StatusOr<Compiler::Piece> Compiler::Numeric(const Json& s, const std::string& path,
                                                  bool integer) {
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

}  // namespace pagoda::grammar::internal
