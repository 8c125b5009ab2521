// HTTP framing: ParseHttpRequest with the server's limits, and the answers' serialization.
#include "scheduler/http/http_message.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda::scheduler::http {
namespace {

TEST(HttpMessageTest, ParsesRequestsWithLengthOrChunks) {
  HttpLimits limits;
  HttpRequest r;
  ASSERT_FALSE(
      ParseHttpRequest("POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\n"
                       "Content-Length: 2\r\n\r\n{}",
                       limits, &r));
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/completions");
  EXPECT_EQ(r.authorization, "Bearer k");
  EXPECT_EQ(r.body, "{}");
  EXPECT_TRUE(r.keep_alive);
  ASSERT_FALSE(
      ParseHttpRequest("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                       "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                       limits, &r));
  EXPECT_EQ(r.body, "abcde");
  EXPECT_FALSE(r.keep_alive);
  ASSERT_FALSE(ParseHttpRequest("GET /health HTTP/1.0\r\n\r\n", limits, &r));
  EXPECT_FALSE(r.keep_alive);
}

TEST(HttpMessageTest, TakesTheTenantHeaderWhateverItsCase) {
  HttpLimits limits;
  HttpRequest r;
  ASSERT_FALSE(ParseHttpRequest(
      "POST /v1/completions HTTP/1.1\r\nx-pagoda-tenant: team-a\r\nContent-Length: 0\r\n\r\n",
      limits, &r));
  EXPECT_EQ(r.tenant, "team-a");
  ASSERT_FALSE(ParseHttpRequest("GET /health HTTP/1.1\r\n\r\n", limits, &r));
  EXPECT_EQ(r.tenant, "") << "absent: empty (the front end then falls back)";
}

TEST(HttpMessageTest, RefusesWhatBreaksTheLimitsOrTheSyntax) {
  HttpLimits limits;
  limits.max_body_bytes = 4;
  limits.max_header_bytes = 64;
  HttpRequest r;
  std::optional<ApiError> e =
      ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde", limits, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_NE(e->message.find("--http-max-body-bytes"), std::string::npos);
  e = ParseHttpRequest("GET / HTTP/1.1\r\nX: " + std::string(100, 'x') + "\r\n\r\n", limits, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 431);
  e = ParseHttpRequest("NOT HTTP\r\n\r\n", limits, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  e = ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", limits, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  // No bytes at all, and a start line cut short: partial messages, not a parser assertion.
  for (std::string_view cut : {"", "GET / HT"}) {
    e = ParseHttpRequest(cut, limits, &r);
    ASSERT_TRUE(e) << "'" << cut << "'";
    EXPECT_EQ(e->status, 400);
  }
}

TEST(HttpMessageTest, SerializesAnswers) {
  EXPECT_EQ(HttpResponse(200, "application/json", "{}", true),
            "HTTP/1.1 200 OK\r\nServer: pagoda\r\nConnection: keep-alive\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  const std::string busy = ErrorResponse(MakeError(429, "full", "rate_limit_error"), false);
  EXPECT_NE(busy.find("HTTP/1.1 429 Too Many Requests\r\n"), std::string::npos);
  EXPECT_NE(busy.find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(busy.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(busy.find(R"({"error":{"code":null,"message":"full","param":null,)"),
            std::string::npos);
  EXPECT_EQ(Chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(Chunk(std::string(26, 'a')).substr(0, 4), "1a\r\n");
  EXPECT_EQ(Chunk(""), "");
  EXPECT_NE(EventStreamHead(true).find("Transfer-Encoding: chunked\r\n"), std::string::npos);
}

TEST(HttpMessageTest, ErrorsFromStatuses) {
  EXPECT_EQ(FromStatus(absl::InvalidArgumentError("temperature must be in [0, 100]")).param,
            "temperature");
  EXPECT_EQ(FromStatus(absl::InvalidArgumentError("the prompt is empty")).param, "");
  EXPECT_EQ(FromStatus(absl::ResourceExhaustedError("queue")).status, 429);
  EXPECT_EQ(FromStatus(absl::ResourceExhaustedError("queue")).code, "queue_full");
  EXPECT_EQ(FromStatus(absl::UnavailableError("draining")).status, 503);
  EXPECT_EQ(FromStatus(absl::InternalError("boom")).status, 500);
}

// A predicted-wait refusal: 429, Retry-After its estimate, OpenAI's error shape with the message.
TEST(HttpMessageTest, PredictedWaitRefusalCarriesItsRetryAfter) {
  const absl::Status refused = absl::ResourceExhaustedError(
      "predicted time to first token 12.5 s exceeds --max-predicted-wait-s 2 s");
  const ApiError e = FromStatus(refused, 13);
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.type, "rate_limit_error");
  EXPECT_EQ(e.code, "predicted_wait_too_long");
  EXPECT_EQ(e.retry_after_s, 13);
  const std::string answer = ErrorResponse(e, true);
  EXPECT_NE(answer.find("HTTP/1.1 429 Too Many Requests\r\n"), std::string::npos);
  EXPECT_NE(answer.find("Retry-After: 13\r\n"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("Retry-After: 1\r\n"), std::string::npos) << "one header only";
  EXPECT_NE(answer.find(R"("message":"predicted time to first token 12.5 s exceeds)"),
            std::string::npos)
      << answer;
  // The estimate applies only to 429s.
  EXPECT_EQ(FromStatus(absl::UnavailableError("draining"), 13).status, 503);
}

}  // namespace
}  // namespace pagoda::scheduler::http
