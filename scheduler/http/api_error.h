// ApiError: an OpenAI-style error answer, {"error": {"message", "type", "param", "code"}}, with
// its HTTP status.
//
// Mapping of absl status codes (the engine's and the validation's) onto HTTP:
//   INVALID_ARGUMENT 400, NOT_FOUND 404, UNAUTHENTICATED 401, RESOURCE_EXHAUSTED 429 (queue
//   limits and predicted-wait admission; the answer carries Retry-After: retry_after_s, which
//   the caller sets from a predicted-wait refusal's payload, else 1), UNAVAILABLE 503
//   (draining, no worker), DEADLINE_EXCEEDED 504, CANCELLED 499, anything else 500.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace pagoda::scheduler::http {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;          // the request field at fault; empty = null
  std::string code;           // empty = null
  int64_t retry_after_s = 1;  // 429 only: the Retry-After header's seconds

  // The JSON body.
  std::string Body() const;
};

// An error of `status` (type invalid_request_error unless given).
ApiError MakeError(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = "", std::string code = "");
// 400 naming `param`.
ApiError BadRequest(std::string message, std::string param = "");
// The answer for a failed status from the engine or the validation. `retry_after_s`: the
// seconds of a predicted-wait refusal (RetryAfterSeconds in scheduler/service), for its 429.
ApiError FromStatus(const absl::Status& status,
                    std::optional<int64_t> retry_after_s = std::nullopt);

}  // namespace pagoda::scheduler::http
