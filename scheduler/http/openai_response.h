// The JSON of OpenAI's answers: whole completions (non-streaming), server-sent-event chunks
// (streaming), usage, errors inside a stream.
//
// Shapes follow OpenAI's API reference: /v1/completions answers object "text_completion" with
// choices[i].text; /v1/chat/completions answers "chat.completion" with choices[i].message and
// streams "chat.completion.chunk" with choices[i].delta (the first delta of each choice carries
// the role). Chat answers carry a reasoning model's thinking as message.reasoning_content (and
// delta.reasoning_content), and tool calls as message.tool_calls: [{"id", "type": "function",
// "function": {"name", "arguments"}}] with content null when the answer is only calls; a stream
// sends a call as one delta {"tool_calls": [{"index", "id", "type", "function": {"name",
// "arguments": ""}}]} and then its arguments in pieces {"tool_calls": [{"index", "function":
// {"arguments": "..."}}]}, as OpenAI does. Keys absent when empty. Every chunk of a stream asked
// with include_usage carries "usage": null, and a last chunk with no choices carries the usage.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/http/openai_request.h"

namespace pagoda::scheduler::http {

// What every answer of one request repeats.
struct AnswerHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;                // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;           // Unix seconds
  std::string model;             // the served model name
  bool usage_in_chunks = false;  // stream_options.include_usage
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// A tool call of a chat answer.
struct ToolCallOut {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

// One finished choice of a non-streaming answer.
struct Choice {
  std::string text;
  std::string finish_reason;            // "stop", "length" or "tool_calls"
  nlohmann::json logprobs;              // null unless asked for
  std::string reasoning;                // chat: message.reasoning_content (absent when empty)
  std::vector<ToolCallOut> tool_calls;  // chat: message.tool_calls (absent when empty)
};

// What one chat chunk's delta says beyond the role: content, reasoning, or one piece of a tool
// call (its start when `tool_id` is set, else arguments).
struct ChatDelta {
  std::string_view content;
  std::string_view reasoning;
  int tool_index = -1;  // >= 0: a tool-call piece
  std::string_view tool_id;
  std::string_view tool_name;
  std::string_view tool_arguments;
};

// One generated token's logprob as the answers show it: the token's text (its bytes, which may
// be part of a character) and its most likely alternatives.
struct TokenLogprobText {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// /v1/completions' logprobs object: tokens, token_logprobs, top_logprobs (the alternatives and
// the chosen token, as vLLM returns them), text_offset (byte offsets from `offset`, the text
// before these tokens).
nlohmann::json CompletionLogprobs(const std::vector<TokenLogprobText>& tokens, int64_t offset);
// /v1/chat/completions' logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::json ChatLogprobs(const std::vector<TokenLogprobText>& tokens);

nlohmann::json UsageJson(const Usage& usage);
// The whole non-streaming answer.
std::string CompletionBody(const AnswerHeader& header, const std::vector<Choice>& choices,
                           const Usage& usage);
// "data: {chunk}\n\n" for choice `index`: its new text (chat: with the role when `role`), and
// its finish reason when it ended (empty: null).
std::string ChunkEvent(const AnswerHeader& header, int index, std::string_view text, bool role,
                       std::string_view finish_reason, const nlohmann::json& logprobs);

// ChunkEvent's output for one request, without building a JSON document per chunk: the parts
// every chunk repeats are serialized once, the text is escaped into place. (Streams spend most
// of their CPU here; the answers are the same JSON, in OpenAI's key order.)
class ChunkEncoder {
 public:
  explicit ChunkEncoder(const AnswerHeader& header);
  // Appends ChunkEvent(header, index, text, role, finish_reason, logprobs) to `out`.
  void Append(int index, std::string_view text, bool role, std::string_view finish_reason,
              const nlohmann::json& logprobs, std::string* out) const;
  // Chat: appends a chunk whose delta is `delta` (with the role when `role`).
  void AppendChat(int index, const ChatDelta& delta, bool role, std::string_view finish_reason,
                  const nlohmann::json& logprobs, std::string* out) const;

 private:
  // logprobs, finish_reason and the suffix.
  void AppendTail(std::string_view finish_reason, const nlohmann::json& logprobs,
                  std::string* out) const;

  bool chat_ = false;
  std::string prefix_;  // data: {"id":...,"model":...,"choices":[{"index":
  std::string suffix_;  // }]...}\n\n
};

// Appends `text` as a JSON string literal (quoted, escaped; ill-formed UTF-8 replaced).
void AppendJsonString(std::string_view text, std::string* out);
// The last chunk of a stream asked with include_usage: no choices, the usage.
std::string UsageEvent(const AnswerHeader& header, const Usage& usage);
// An error inside a stream (after the headers went out): "data: {error}\n\n".
std::string ErrorEvent(const std::string& error_body);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// JSON text of `value` (ill-formed UTF-8 replaced, never thrown).
std::string Dump(const nlohmann::json& value);

}  // namespace pagoda::scheduler::http
