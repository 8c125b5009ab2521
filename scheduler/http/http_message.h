// HTTP/1.1 framing for the OpenAI front end: a request as the router sees it (without Beast's
// types), the parse of one request from raw bytes (Boost.Beast's parser; used by the fuzz target
// and the tests, while connections use the same parser incrementally), and the serialization of
// answers: whole ones with Content-Length, streams with chunked transfer encoding.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/http/api_error.h"

namespace pagoda::scheduler::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/completions" (query string stripped)
  std::string authorization;
  std::string tenant;  // the X-Pagoda-Tenant header (kTenantHeader); empty when absent
  std::string body;
  bool keep_alive = true;
};

// Names the tenant a request is served as (checked by the front end, not here).
inline constexpr std::string_view kTenantHeader = "X-Pagoda-Tenant";

struct HttpLimits {
  size_t max_body_bytes = size_t{8} << 20;
  size_t max_header_bytes = size_t{16} << 10;
};

// Parses one whole request from `bytes` (the framing the connection's parser applies): 413 over
// the body limit, 431 over the header limit, 400 for malformed HTTP or a truncated request.
std::optional<ApiError> ParseHttpRequest(std::string_view bytes, const HttpLimits& limits,
                                         HttpRequest* out);

// The reason phrase of an HTTP status ("Not Found").
std::string_view StatusText(int status);

// A whole answer with Content-Length. `headers` are extra header lines (name, value).
std::string HttpResponse(int status, std::string_view content_type, std::string_view body,
                         bool keep_alive,
                         const std::vector<std::pair<std::string, std::string>>& headers = {});
// An error answer: the error's JSON, plus Retry-After (error.retry_after_s) on 429 and
// WWW-Authenticate on 401.
std::string ErrorResponse(const ApiError& error, bool keep_alive);
// The head of a server-sent-event stream (chunked transfer encoding).
std::string EventStreamHead(bool keep_alive);
// One chunk of a chunked body; empty `data` gives nothing (the terminator is kLastChunk).
std::string Chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace pagoda::scheduler::http
