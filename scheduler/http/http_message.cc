#include "scheduler/http/http_message.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "scheduler/http/beast_request.h"

namespace pagoda::scheduler::http {

namespace beast = boost::beast;

void ApplyLimits(const HttpLimits& limits, BeastParser* parser) {
  parser->header_limit(static_cast<uint32_t>(limits.max_header_bytes));
  parser->body_limit(limits.max_body_bytes);
}

ApiError ParseError(const beast::error_code& ec, const HttpLimits& limits) {
  if (ec == beast::http::error::body_limit) {
    return MakeError(413, absl::StrFormat("the body is larger than the limit of %d bytes "
                                          "(--http-max-body-bytes)",
                                          limits.max_body_bytes));
  }
  if (ec == beast::http::error::header_limit) {
    return MakeError(
        431, absl::StrFormat("the request headers exceed %d bytes", limits.max_header_bytes));
  }
  return BadRequest(absl::StrCat("malformed HTTP request: ", ec.message()));
}

HttpRequest FromBeast(BeastRequest&& request) {
  HttpRequest out;
  out.method = std::string(request.method_string().data(), request.method_string().size());
  const std::string target(request.target().data(), request.target().size());
  out.target = target.substr(0, target.find('?'));
  if (auto it = request.find(beast::http::field::authorization); it != request.end()) {
    out.authorization = std::string(it->value().data(), it->value().size());
  }
  if (auto it = request.find(beast::string_view(kTenantHeader.data(), kTenantHeader.size()));
      it != request.end()) {
    out.tenant = std::string(it->value().data(), it->value().size());
  }
  out.keep_alive = request.keep_alive();
  out.body = std::move(request.body());
  return out;
}

std::optional<ApiError> ParseHttpRequest(std::string_view bytes, const HttpLimits& limits,
                                         HttpRequest* out) {
  BeastParser parser;
  ApplyLimits(limits, &parser);
  beast::error_code ec;
  size_t used = 0;
  while (!ec && !parser.is_done() && used < bytes.size()) {
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == beast::http::error::need_more) {
      ec = {};
      if (n == 0) break;  // the rest is an incomplete piece: the request ends early
    }
  }
  if (!ec && !parser.is_done()) {
    // put_eof requires that the parser has seen a byte (Beast asserts it): no bytes at all are
    // a partial message too.
    if (parser.got_some()) parser.put_eof(ec);
    if (!ec && !parser.is_done()) ec = beast::http::error::partial_message;
  }
  if (ec) return ParseError(ec, limits);
  *out = FromBeast(parser.release());
  return std::nullopt;
}

std::string_view StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return status >= 500 ? "Internal Server Error" : "Error";
  }
}

namespace {

std::string Head(int status, bool keep_alive) {
  return absl::StrCat("HTTP/1.1 ", status, " ", std::string(StatusText(status)),
                      "\r\nServer: pagoda\r\nConnection: ", keep_alive ? "keep-alive" : "close",
                      "\r\n");
}

}  // namespace

std::string HttpResponse(int status, std::string_view content_type, std::string_view body,
                         bool keep_alive,
                         const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = Head(status, keep_alive);
  for (const auto& [name, value] : headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  absl::StrAppend(&out, "Content-Type: ", std::string(content_type),
                  "\r\nContent-Length: ", body.size(), "\r\n\r\n");
  out.append(body);
  return out;
}

std::string ErrorResponse(const ApiError& error, bool keep_alive) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (error.status == 429) {
    headers.emplace_back("Retry-After", absl::StrCat(std::max<int64_t>(1, error.retry_after_s)));
  }
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  return HttpResponse(error.status, "application/json", error.Body(), keep_alive, headers);
}

std::string EventStreamHead(bool keep_alive) {
  return absl::StrCat(Head(200, keep_alive),
                      "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n");
}

std::string Chunk(std::string_view data) {
  if (data.empty()) return "";
  std::string out = absl::StrCat(absl::Hex(data.size()), "\r\n");
  out.reserve(out.size() + data.size() + 2);
  out.append(data);
  out.append("\r\n");
  return out;
}

}  // namespace pagoda::scheduler::http
