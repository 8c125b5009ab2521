#include "scheduler/http/request_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pagoda::scheduler::http {

using json = nlohmann::ordered_json;

int NestingDepth(std::string_view body) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

void RequestReader::Fail(std::string message, const std::string& param) {
  if (!error_) error_ = BadRequest(std::move(message), param);
}

const json* RequestReader::Get(const std::string& name) {
  known_.insert(name);
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> RequestReader::Bool(const std::string& name) {
  const json* v = Get(name);
  if (v == nullptr || !ok()) return std::nullopt;
  if (!v->is_boolean()) {
    Fail(absl::StrCat(name, " must be a boolean"), name);
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<double> RequestReader::Number(const std::string& name) {
  const json* v = Get(name);
  if (v == nullptr || !ok()) return std::nullopt;
  if (!v->is_number()) {
    Fail(absl::StrCat(name, " must be a number"), name);
    return std::nullopt;
  }
  return v->get<double>();
}

std::optional<int64_t> RequestReader::Integer(const std::string& name, int64_t lo, int64_t hi) {
  const json* v = Get(name);
  if (v == nullptr || !ok()) return std::nullopt;
  return IntegerValue(*v, name, lo, hi);
}

std::optional<int64_t> RequestReader::IntegerValue(const json& v, const std::string& name,
                                                   int64_t lo, int64_t hi) {
  auto fail = [&] {
    Fail(absl::StrFormat("%s must be an integer in [%d, %d]", name, lo, hi), name);
    return std::nullopt;
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) {
      return fail();
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return fail();
    return i;
  }
  if (!v.is_number_float()) return fail();
  const double d = v.get<double>();
  // (The bounds of int64_t itself first, so that the cast below is defined.)
  if (!std::isfinite(d) || d != std::floor(d) || d >= 0x1p63 || d < -0x1p63 ||
      static_cast<int64_t>(d) < lo || static_cast<int64_t>(d) > hi) {
    return fail();
  }
  return static_cast<int64_t>(d);
}

std::optional<std::string> RequestReader::String(const std::string& name) {
  const json* v = Get(name);
  if (v == nullptr || !ok()) return std::nullopt;
  if (!v->is_string()) {
    Fail(absl::StrCat(name, " must be a string"), name);
    return std::nullopt;
  }
  return v->get<std::string>();
}

void RequestReader::Unsupported(const std::string& name, bool (*is_default)(const json&),
                                const std::string& why) {
  const json* v = Get(name);
  if (v == nullptr || !ok() || is_default(*v)) return;
  Fail(absl::StrCat(name, " is not supported by this server",
                    why.empty() ? "" : absl::StrCat(" (", why, ")")),
       name);
}

void RequestReader::Ignore(std::initializer_list<const char*> names) {
  for (const char* name : names) known_.insert(name);
}

void RequestReader::RefuseUnknown() {
  if (!ok()) return;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!known_.contains(it.key())) {
      Fail(absl::StrCat("unknown field '", it.key(),
                        "': this server does not support it (fields that would change the "
                        "result are never ignored)"),
           it.key());
      return;
    }
  }
}

bool IsFalse(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsZero(const json& v) { return v.is_number() && v.get<double>() == 0; }
bool IsEmpty(const json& v) {
  return (v.is_array() || v.is_object() || v.is_string()) && v.empty();
}

}  // namespace pagoda::scheduler::http
