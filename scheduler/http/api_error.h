// ApiError: an OpenAI-style error answer, {"error": {"message", "type", "param", "code"}}, with
// its HTTP status.
//
// Mapping of absl status codes (the engine's and the validation's) onto HTTP:
//   INVALID_ARGUMENT 400, NOT_FOUND 404, UNAUTHENTICATED 401, RESOURCE_EXHAUSTED 429 (queue
//   limits; the answer carries Retry-After), UNAVAILABLE 503 (draining, no worker),
//   DEADLINE_EXCEEDED 504, CANCELLED 499, anything else 500.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace pagoda::scheduler::http {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty = null
  std::string code;   // empty = null

  // The JSON body.
  std::string Body() const;
};

// An error of `status` (type invalid_request_error unless given).
ApiError MakeError(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = "", std::string code = "");
// 400 naming `param`.
ApiError BadRequest(std::string message, std::string param = "");
// The answer for a failed status from the engine or the validation.
ApiError FromStatus(const absl::Status& status);

}  // namespace pagoda::scheduler::http
