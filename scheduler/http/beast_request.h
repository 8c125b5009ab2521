// Between Boost.Beast's parser and HttpRequest, shared by the connections (which parse
// incrementally) and ParseHttpRequest (which parses a whole buffer). Internal to scheduler/http.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>

#include "scheduler/http/http_message.h"

namespace pagoda::scheduler::http {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using BeastParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A parser with `limits` applied.
void ApplyLimits(const HttpLimits& limits, BeastParser* parser);
// The answer to a parse that failed with `ec` (413, 431 or 400).
ApiError ParseError(const boost::beast::error_code& ec, const HttpLimits& limits);
HttpRequest FromBeast(BeastRequest&& request);

}  // namespace pagoda::scheduler::http
