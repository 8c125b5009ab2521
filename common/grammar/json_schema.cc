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
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/status_macros.h"

namespace pagoda::grammar {
namespace {

using internal::Compiler;
using internal::ErrorAt;
using Json = nlohmann::ordered_json;

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

// Pieces longer than this that are written more than once become rules (Compiler::Shared).
constexpr size_t kMaxInlineSharedBytes = 64;

}  // namespace

namespace internal {

std::string Child(const std::string& path, std::string_view token) {
  return path + "/" + EscapePointerToken(token);
}
std::string Child(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

absl::Status ErrorAt(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("JSON Schema at \"#", path, "\": ", message));
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

absl::StatusOr<std::string> Compiler::CompileSchema() {
  RETURN_IF_ERROR(CheckOptions());
  auto root = RefTarget("", "root", root_);
  if (!root.ok()) return root.status();
  RETURN_IF_ERROR(CheckProductive());
  return Finish();
}

std::string Compiler::CompileJsonObject() {
  Use("json-object");
  rules_.insert(rules_.begin(), Rule{"root", "json-object", kTrue, "", true});
  return *Finish();
}

int Compiler::And(std::vector<int> kids) {
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

int Compiler::Or(std::vector<int> kids) {
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

int Compiler::RefFormula(int rule) {
  formulas_.push_back({Formula::kRef, rule, {}});
  return static_cast<int>(formulas_.size()) - 1;
}

absl::Status Compiler::CheckOptions() {
  if (options_.max_integer_digits < 1 || options_.max_integer_digits > kMaxDigits) {
    return absl::InvalidArgumentError("SchemaOptions: max_integer_digits must be in [1, 18]");
  }
  if (options_.max_fraction_digits < 0 || options_.max_exponent_digits < 0 ||
      options_.max_whitespace < 0 || options_.max_repetition < 1) {
    return absl::InvalidArgumentError("SchemaOptions: negative limit");
  }
  return absl::OkStatus();
}

std::string Compiler::UniqueName(std::string_view hint) {
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

int Compiler::AddRule(std::string name, std::string body, int req, std::string path) {
  rules_.push_back(Rule{std::move(name), std::move(body), req, std::move(path), true, 0});
  return static_cast<int>(rules_.size()) - 1;
}

std::string Compiler::Use(const std::string& name) {
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
    std::string frac = options_.max_fraction_digits > 0
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

std::string Compiler::UseFormat(const std::string& format) {
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
    std::string frac = options_.max_fraction_digits > 0
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

std::pair<int64_t, int64_t> Compiler::FormatLengths(const std::string& format) const {
  int64_t f = options_.max_fraction_digits;
  if (format == "date") return {10, 10};
  if (format == "time") return {9, 14 + (f > 0 ? f + 1 : 0)};
  if (format == "date-time") return {20, 25 + (f > 0 ? f + 1 : 0)};
  if (format == "uuid") return {36, 36};
  if (format == "ipv4") return {7, 15};
  return {5, 3 * 16 + 2 + 1 + 4 * 32 + 3};  // email
}

absl::Status Compiler::Budget(const std::string& path, int64_t count) {
  total_repetition_ += count;
  if (total_repetition_ > options_.max_total_repetition) {
    return ErrorAt(path, absl::StrFormat("the grammar repeats more than "
                                         "max_total_repetition (%d) elements in all",
                                         options_.max_total_repetition));
  }
  return absl::OkStatus();
}

absl::StatusOr<Compiler::Piece> Compiler::RefTarget(const std::string& pointer,
                                                    const std::string& name_hint,
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

absl::StatusOr<Compiler::Piece> Compiler::Ref(const Json& ref, const std::string& path) {
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

absl::StatusOr<Compiler::Piece> Compiler::Compile(const Json& schema, const std::string& path,
                                                  int depth) {
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

Compiler::Piece Compiler::Shared(Piece piece, const std::string& path, std::string_view name_hint) {
  if (piece.text.size() <= kMaxInlineSharedBytes) return piece;
  const int index = AddRule(UniqueName(name_hint), std::move(piece.text), piece.req, path);
  return Piece{rules_[index].name, RefFormula(index)};
}

absl::StatusOr<Compiler::Piece> Compiler::CompileObject(const Json& schema,
                                                        const std::string& path) {
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

absl::Status Compiler::CheckForms(const Json& s, const std::string& path) {
  auto count = [&](const char* key) -> absl::Status {
    if (!s.contains(key)) return absl::OkStatus();
    const Json& v = s[key];
    bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
              (v.is_number_float() && v.get<double>() >= 0 &&
               v.get<double>() == std::floor(v.get<double>()));
    if (!ok) return ErrorAt(Child(path, key), absl::StrCat(key, " must be a non-negative integer"));
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

int64_t Compiler::Count(const Json& s, const char* key, int64_t fallback) {
  if (!s.contains(key)) return fallback;
  double d = s[key].get<double>();
  return d > 1e15 ? int64_t{1000000000000000} : static_cast<int64_t>(d);
}

bool Compiler::Eval(int f, const std::vector<bool>& productive) const {
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

absl::Status Compiler::CheckProductive() {
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

absl::StatusOr<std::string> Compiler::Finish() {
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

}  // namespace internal

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
