// libFuzzer target: arbitrary bytes as an HTTP request to the OpenAI-compatible API, through
// ParseHttpRequest (the HTTP/1.1 framing with the server's limits, Beast's parser) and, for the
// generation paths, ParseOpenAiRequest and ParseResponsesRequest (OpenAI JSON ->
// pagoda.v1.GenerateRequest), the Responses API's input items -> chat turns, then the error and
// answer encoders. (The GenerateRequest's own checks are fuzzed by validation_fuzz.)
// Invariants:
//  * every input is accepted or refused with an ApiError of status 400, 413 or 431 and a
//    non-empty message whose JSON body parses; never a crash, a hang or an exception;
//  * an accepted request's body fits the body limit;
//  * an accepted OpenAI request is self-consistent: stream_options only with stream, logprobs
//    within 0..20, n and max_tokens never 0 when given, a prompt set for completions and
//    messages for chat; its proto round-trips through its serialization;
//  * an accepted Responses request has input items that ConversationTurns takes (or refuses only
//    for an unresolved item_reference), stream_options only with stream, an echo object;
//  * the answers built from it (chunks, error events) are valid JSON.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "scheduler/http/api_error.h"
#include "scheduler/http/http_message.h"
#include "scheduler/http/openai_request.h"
#include "scheduler/http/openai_response.h"
#include "scheduler/http/responses_request.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

using scheduler::http::ApiError;
using scheduler::http::Endpoint;
using scheduler::http::HttpLimits;
using scheduler::http::HttpRequest;
using scheduler::http::OpenAiRequest;

void CheckErrorBody(const ApiError& e) {
  if (e.message.empty()) FuzzFail("an error without a message");
  const nlohmann::json body = nlohmann::json::parse(e.Body(), nullptr, false);
  if (body.is_discarded() || !body.contains("error")) FuzzFail("an error body that is not JSON");
}

void CheckOpenAi(Endpoint endpoint, const std::string& body) {
  OpenAiRequest r;
  if (std::optional<ApiError> e = ParseOpenAiRequest(endpoint, body, &r)) {
    if (e->status != 400) FuzzFail("a JSON refusal that is not a 400");
    return CheckErrorBody(*e);
  }
  if (r.include_usage && !r.stream) FuzzFail("include_usage without stream");
  if (r.top_logprobs < -1 || r.top_logprobs > 20) FuzzFail("logprobs out of range");
  if (endpoint == Endpoint::kCompletions &&
      r.generate.prompt_case() == pagoda::v1::GenerateRequest::PROMPT_NOT_SET) {
    FuzzFail("a completion without a prompt");
  }
  if (endpoint == Endpoint::kChat && r.messages.empty()) FuzzFail("a chat without messages");
  pagoda::v1::GenerateRequest copy;
  if (!copy.ParseFromString(r.generate.SerializeAsString())) FuzzFail("proto round trip");
  scheduler::http::AnswerHeader header{.endpoint = endpoint,
                                       .id = "x",
                                       .created = 1,
                                       .model = r.model,
                                       .usage_in_chunks = r.include_usage};
  const std::string chunk = scheduler::http::ChunkEvent(
      header, 0, r.messages.empty() ? r.generate.text() : r.messages[0].content, true, "stop",
      nullptr);
  if (nlohmann::json::parse(chunk.substr(6), nullptr, false).is_discarded()) {
    FuzzFail("a chunk that is not JSON");
  }
}

void CheckResponses(const std::string& body) {
  scheduler::http::ResponsesRequest r;
  if (std::optional<ApiError> e = ParseResponsesRequest(body, &r)) {
    if (e->status != 400) FuzzFail("a Responses refusal that is not a 400");
    return CheckErrorBody(*e);
  }
  if (!r.input.is_array() || r.input.empty()) FuzzFail("Responses input without items");
  if (!r.echo.is_object()) FuzzFail("Responses echo is not an object");
  bool references = false;
  for (const auto& item : r.input) references |= item.value("type", "") == "item_reference";
  std::vector<scheduler::http::ChatTurn> turns;
  std::optional<ApiError> e = ConversationTurns(r.input, r.instructions, "input", &turns);
  if (e && !references) FuzzFail("checked input items that ConversationTurns refuses");
  if (e) CheckErrorBody(*e);
  pagoda::v1::GenerateRequest copy;
  if (!copy.ParseFromString(r.chat.generate.SerializeAsString())) FuzzFail("proto round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  HttpLimits limits;
  limits.max_body_bytes = 8192;
  limits.max_header_bytes = 2048;
  HttpRequest request;
  if (std::optional<ApiError> e = ParseHttpRequest(AsText(data, size), limits, &request)) {
    if (e->status != 400 && e->status != 413 && e->status != 431) FuzzFail("HTTP status");
    CheckErrorBody(*e);
    return 0;
  }
  if (request.body.size() > limits.max_body_bytes) FuzzFail("a body over the limit");
  if (request.target == "/v1/completions") CheckOpenAi(Endpoint::kCompletions, request.body);
  if (request.target == "/v1/chat/completions") CheckOpenAi(Endpoint::kChat, request.body);
  if (request.target == "/v1/responses") CheckResponses(request.body);
  return 0;
}

}  // namespace pagoda::fuzz
