// ChoicesFormat: the answers of /v1/completions and /v1/chat/completions (openai_response.h has
// their JSON): n choices, whole or streamed as chunks, with logprobs when asked for (completions:
// tokens, token_logprobs, top_logprobs, text_offset; chat: content[]), reasoning_content and
// tool_calls for chat. A stream starts with each chat choice's role delta and ends with each
// choice's finish_reason, the usage chunk when asked for, and "data: [DONE]".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/http/answer_format.h"
#include "scheduler/http/openai_request.h"
#include "scheduler/http/openai_response.h"
#include "scheduler/text/tokenizer.h"

namespace pagoda::scheduler::http {

class ChoicesFormat final : public AnswerFormat {
 public:
  // `tokenizer` must outlive the format. `id_tag`: the front end's random tag of answer ids.
  ChoicesFormat(const OpenAiRequest& request, const text::Tokenizer* tokenizer, std::string model,
                std::string id_tag, bool keep_alive);

  std::string Begin(RequestId id, int n) override;
  void Consume(int index, const CompletionDelta& delta, std::string* out) override;
  std::string Closing(const OutputProcessor& output) override;
  std::string StreamFailure(const absl::Status& status) override;
  const std::string& id() const override { return header_.id; }

 private:
  // What one choice of the answer has accumulated.
  struct Call {
    int32_t index = 0;  // the parser's
    ToolCallOut out;    // arguments: whole answers only
    bool valid = true;  // no kToolCallInvalid came
  };
  struct Answer {
    std::string text;                        // whole answers: the text so far
    std::vector<TokenLogprobText> logprobs;  // whole answers: those of the tokens so far
    int64_t text_bytes = 0;                  // text sent so far (streams' text_offset)
    std::string reasoning;                   // whole answers: the reasoning so far
    std::vector<Call> calls;                 // the tool calls started so far
    bool HasCalls() const;                   // some call is still valid
  };

  // The answer's form of a token's logprob.
  TokenLogprobText LogprobText(int32_t token, const TokenLogprob& logprob) const;
  // The logprobs object of an answer (completions or chat form); null when not asked for.
  nlohmann::json LogprobsJson(const std::vector<TokenLogprobText>& tokens, int64_t offset) const;

  const Endpoint endpoint_;
  const bool stream_;
  const int top_logprobs_;  // -1: not asked for
  const text::Tokenizer* const tokenizer_;
  const std::string id_tag_;
  const bool keep_alive_;
  AnswerHeader header_;
  std::optional<ChunkEncoder> chunks_;  // set by Begin
  std::vector<Answer> answers_;         // one per completion, sized by Begin
};

}  // namespace pagoda::scheduler::http
