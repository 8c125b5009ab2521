#include "scheduler/http/api_error.h"

#include <nlohmann/json.hpp>

namespace pagoda::scheduler::http {
namespace {

// The field a validation message is about, when it starts with one ("temperature must be ...",
// "cache_salt has ..."); empty otherwise.
std::string LeadingField(const std::string& message) {
  const size_t space = message.find(' ');
  if (space == std::string::npos || space == 0) return "";
  const std::string word = message.substr(0, space);
  for (char c : word) {
    if (!(c == '_' || (c >= 'a' && c <= 'z'))) return "";
  }
  const std::string rest = message.substr(space + 1);
  if (rest.rfind("must ", 0) != 0 && rest.rfind("has ", 0) != 0) return "";
  return word;
}

}  // namespace

std::string ApiError::Body() const {
  nlohmann::json error = {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

ApiError MakeError(int status, std::string message, std::string type, std::string param,
                   std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError BadRequest(std::string message, std::string param) {
  return MakeError(400, std::move(message), "invalid_request_error", std::move(param));
}

ApiError FromStatus(const absl::Status& status, std::optional<int64_t> retry_after_s) {
  ApiError e = MakeError(400, std::string(status.message()));
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.status = 400;
      e.param = LeadingField(e.message);
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      e.code = "not_found";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = retry_after_s ? "predicted_wait_too_long" : "queue_full";
      if (retry_after_s) e.retry_after_s = *retry_after_s;
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.status = 504;
      e.type = "timeout";
      break;
    case absl::StatusCode::kCancelled:
      e.status = 499;
      e.type = "cancelled";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

}  // namespace pagoda::scheduler::http
