// RequestReader: reads the fields of one JSON request object of the OpenAI-compatible API (chat,
// completions, responses) with one set of rules and messages. Each typed read checks the field's
// type and range and fails with a 400 naming the field; the first error wins and later reads do
// nothing; RefuseUnknown refuses the first field no read asked about, so that a misspelt field
// that would change the result is never silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "nlohmann/json.hpp"
#include "scheduler/http/api_error.h"

namespace pagoda::scheduler::http {

// The deepest nesting of arrays and objects in `body` (strings skipped), counted without
// parsing, so that a pathological body never reaches the JSON parser.
int NestingDepth(std::string_view body);

class RequestReader {
 public:
  using json = nlohmann::ordered_json;

  // `object` must outlive the reader.
  explicit RequestReader(const json& object) : object_(object) {}

  const std::optional<ApiError>& error() const { return error_; }
  bool ok() const { return !error_; }
  void Fail(std::string message, const std::string& param);
  // The field, or null when absent or JSON null; marks it as known.
  const json* Get(const std::string& name);

  std::optional<bool> Bool(const std::string& name);
  std::optional<double> Number(const std::string& name);
  // An integer in [lo, hi] (a float with an integral value counts: some clients send 16.0).
  std::optional<int64_t> Integer(const std::string& name, int64_t lo, int64_t hi);
  std::optional<int64_t> IntegerValue(const json& v, const std::string& name, int64_t lo,
                                      int64_t hi);
  std::optional<std::string> String(const std::string& name);
  // A field this server does not implement: accepted only when absent or `is_default`.
  void Unsupported(const std::string& name, bool (*is_default)(const json&),
                   const std::string& why = "");
  // Fields that change nothing here: accepted as they are.
  void Ignore(std::initializer_list<const char*> names);
  // Refuses the first field no Get/Ignore asked about.
  void RefuseUnknown();

 private:
  const json& object_;
  absl::flat_hash_set<std::string> known_;
  std::optional<ApiError> error_;
};

// Defaults of fields this server does not implement (RequestReader::Unsupported).
bool IsFalse(const nlohmann::ordered_json& v);
bool IsZero(const nlohmann::ordered_json& v);
bool IsEmpty(const nlohmann::ordered_json& v);  // an empty array, object or string

}  // namespace pagoda::scheduler::http
