// The JSON Schema compiler behind JsonSchemaToGbnf (json_schema.h), internal to common/grammar.
// One Compiler walks one schema and writes GBNF rules; its methods live by concept:
//   json_schema.cc             the walk: options, shared JSON rules, formats, $ref, dispatch by
//                              type, keyword checks, productivity and the output;
//   json_schema_numbers.cc     enum/const and numbers: exact decimal ranges from minimum,
//                              maximum, exclusive bounds and multipleOf-free digit languages;
//   json_schema_containers.cc  strings (lengths, patterns, formats), arrays and objects.
// Nothing here is part of the grammar library's interface.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grammar/json_schema.h"
#include "nlohmann/json.hpp"

namespace pagoda::grammar::internal {

using Json = nlohmann::ordered_json;

constexpr int64_t kUnbounded = -1;
constexpr int kMaxDigits = 18;  // int64 holds every 18-digit magnitude

// A non-negative decimal magnitude: integer part and fraction digits (no trailing zeros).
struct Magnitude {
  int64_t ip = 0;
  std::string frac;
};

// A bound read from the schema: a signed decimal, or a magnitude of 1e18 or more.
struct Number {
  bool negative = false;
  bool huge = false;
  Magnitude m;
};

// The GBNF text helpers the three files share (json_schema.cc).
// "JSON Schema at "#PATH": MESSAGE" as INVALID_ARGUMENT.
absl::Status ErrorAt(const std::string& path, const std::string& message);
// The JSON Pointer of a member or item of `path`.
std::string Child(const std::string& path, std::string_view token);
std::string Child(const std::string& path, size_t index);
// `e` in parentheses when it has a top-level alternative.
std::string Group(const std::string& e);
std::string Alternatives(const std::vector<std::string>& alts);
std::string DigitClass(int lo, int hi);
std::string AnyDigits(int64_t lo, int64_t hi);
std::string Cat(const std::string& a, const std::string& b);
// `atom` repeated lo..hi times (hi kUnbounded: no upper bound), in GBNF's shortest form.
std::string Repeat(const std::string& atom, int64_t lo, int64_t hi);

// One compilation: a schema into GBNF rules (CompileSchema), or the grammar of any JSON object
// (CompileJsonObject). Each rule keeps the schema path it came from and a formula over the rules
// it requires, so that a schema whose rules can derive no finite text is refused
// (CheckProductive) rather than compiled into a grammar no walk can finish. Budget() bounds the
// work by SchemaOptions. Not reusable: one Compiler per schema.
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

  absl::StatusOr<std::string> CompileSchema();
  std::string CompileJsonObject();

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

  int And(std::vector<int> kids);
  int Or(std::vector<int> kids);
  int RefFormula(int rule);

  absl::Status CheckOptions();
  // A rule name not yet used, made from `hint`.
  std::string UniqueName(std::string_view hint);
  int AddRule(std::string name, std::string body, int req, std::string path);

  std::string Ws() const { return options_.max_whitespace > 0 ? " ws " : " "; }

  // The shared rules of plain JSON, added on first use.
  std::string Use(const std::string& name);

  // A shared rule for a format's text (between the quotes).
  std::string UseFormat(const std::string& format);

  // Length ranges of the formats' texts (characters), for minLength / maxLength.
  std::pair<int64_t, int64_t> FormatLengths(const std::string& format) const;

  absl::Status Budget(const std::string& path, int64_t count);

  // ---- $ref -------------------------------------------------------------------------------

  // The rule for the schema at `pointer` (compiled once; recursion refers to it by name).
  absl::StatusOr<Piece> RefTarget(const std::string& pointer, const std::string& name_hint,
                                  const Json& target);

  absl::StatusOr<Piece> Ref(const Json& ref, const std::string& path);

  // ---- schemas ----------------------------------------------------------------------------

  absl::StatusOr<Piece> Compile(const Json& schema, const std::string& path, int depth);

  // A piece the caller writes more than once: longer texts become a rule of their own, used by
  // name, so that nested repetitions (arrays of arrays of ...) grow the grammar linearly, not
  // by a factor per level.
  Piece Shared(Piece piece, const std::string& path, std::string_view name_hint);

  absl::StatusOr<Piece> CompileObject(const Json& schema, const std::string& path);

  // The forms of the keywords' values (malformed schemas), whatever types are generated.
  absl::Status CheckForms(const Json& s, const std::string& path);

  static int64_t Count(const Json& s, const char* key, int64_t fallback);

  // ---- enum / const -----------------------------------------------------------------------

  absl::StatusOr<Piece> Enum(const Json& s, const std::string& path,
                             const std::vector<std::string>& types);

  // ---- numbers ----------------------------------------------------------------------------

  struct SignedBound {
    Number n;
    bool excl = false;
  };

  // The tighter of minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum.
  absl::StatusOr<std::optional<SignedBound>> ReadBound(const Json& s, const std::string& path,
                                                       bool lower);

  absl::StatusOr<Piece> Numeric(const Json& s, const std::string& path, bool integer);

  // ---- strings ----------------------------------------------------------------------------

  absl::StatusOr<Piece> String(const Json& s, const std::string& path);

  // ---- arrays -----------------------------------------------------------------------------

  absl::StatusOr<Piece> Array(const Json& s, const std::string& path);

  // ---- objects ----------------------------------------------------------------------------

  struct Slot {
    std::string member;  // key ws ":" ws value
    int req = kTrue;
    enum Kind { kRequired, kOptional, kRepeated } kind;
  };

  // JSON string literals (quotes included) whose content is not one of `names`.
  std::string KeyNotIn(const std::vector<std::string>& names, const std::string& base);

  absl::StatusOr<Piece> Object(const Json& s, const std::string& path);

  // ---- checks and output ------------------------------------------------------------------

  bool Eval(int f, const std::vector<bool>& productive) const;

  // Every rule must derive some finite text, or a walk that enters it never ends.
  absl::Status CheckProductive();

  absl::StatusOr<std::string> Finish();

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

}  // namespace pagoda::grammar::internal
