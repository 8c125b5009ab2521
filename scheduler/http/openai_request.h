// ParseOpenAiRequest: the JSON body of POST /v1/completions or /v1/chat/completions, as the
// public GenerateRequest proto plus what only the HTTP answer needs (streaming, the shape of
// logprobs, the chat messages to render).
//
// Contract: never crashes on any input. Checks JSON syntax, the body's shape and each field's
// type, and refuses with a 400 naming the field:
//  * fields this server does not implement and that would change the result (echo, suffix,
//    best_of != n, ...) when set to a non-default value;
//  * tools that are not [{"type": "function", "function": {"name": ..., "parameters": {...}}}],
//    a tool_choice that is not "none", "auto", "required" or {"type": "function", "function":
//    {"name": NAME}} naming one of the tools, "required" or a named function without tools;
//  * a response_format (or vLLM's guided_json / guided_regex / guided_choice / guided_grammar,
//    or llama.cpp's grammar / json_schema) that is malformed, or more than one of them; a
//    well-formed one becomes GenerateRequest.constraint, checked by Validate like a gRPC one;
//  * unknown fields (a misspelt sampling field must not be silently ignored).
// Fields that change nothing served here (user, metadata, store, service_tier, ...) are accepted.
// Ranges that the gRPC API shares (temperature, top_p, n, stop strings, prompt length, ...) are
// NOT checked here: the request goes through GenerationService::Validate like a gRPC one, so
// both APIs give the same messages. Defaults follow OpenAI: temperature 1, max_tokens 16 for
// completions and up to the context for chat.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/http/api_error.h"
#include "scheduler/text/output_parser.h"

namespace pagoda::scheduler::http {

// The generation endpoints. /v1/responses is parsed by ParseResponsesRequest (responses_request.h)
// into a kChat request.
enum class Endpoint { kCompletions, kChat, kResponses };

// One chat message as sent; the front end hands it to the chat template (text::ChatMessage).
struct ChatTurn {
  std::string role;           // system, developer, user, assistant, tool
  std::string content;        // text parts concatenated
  bool content_null = false;  // the message's content was null (an assistant's tool calls)
  std::optional<std::string> name;
  std::optional<nlohmann::ordered_json> tool_calls;
  std::optional<std::string> tool_call_id;
  std::optional<std::string> reasoning_content;  // a reasoning model's earlier thinking
};

// tool_choice (chat only). Absent: auto (none when there are no tools).
enum class ToolChoice {
  kNone,      // the tools are rendered; the output is not parsed for calls
  kAuto,      // the model chooses; its calls are parsed
  kRequired,  // at least one call, forced by a grammar
  kFunction,  // one call of tool_choice_function, forced by a grammar
};

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty when the client named none
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Logprobs asked for: -1 none; otherwise the number of alternatives per token (0..20).
  int top_logprobs = -1;
  // The prompt (completions) and every generation field; chat prompts are set after rendering.
  pagoda::v1::GenerateRequest generate;
  // Chat only: the conversation and the tools, for the chat template.
  std::vector<ChatTurn> messages;
  std::optional<nlohmann::ordered_json> tools;  // set only when non-empty
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;  // kFunction: the tool's name
  bool parallel_tool_calls = true;   // false: at most one call (the grammar's in kRequired)
  bool add_generation_prompt = true;
  // Chat only, set by the front end after rendering: how the output is split into content,
  // reasoning and tool calls; nullopt: all of it is content.
  std::optional<text::OutputParser::Options> parsing;
};

// Largest accepted nesting of the JSON body (a deeper body is refused before it is parsed).
inline constexpr int kMaxJsonDepth = 64;

// Parses `body` for `endpoint`; on failure returns the 400 to send.
std::optional<ApiError> ParseOpenAiRequest(Endpoint endpoint, std::string_view body,
                                           OpenAiRequest* out);

}  // namespace pagoda::scheduler::http
