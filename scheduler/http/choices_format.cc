#include "scheduler/http/choices_format.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scheduler/http/http_message.h"

namespace pagoda::scheduler::http {
namespace {

// OpenAI's finish_reason for a completion that ended normally; empty for an abnormal end.
std::string_view OpenAiReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
    case FinishReason::kContext:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
    case FinishReason::kStopString:
      return "stop";
    default:
      return "";
  }
}

// The finish_reason of a chat answer that holds tool calls: "tool_calls" where it would be
// "stop" (a call cut by the length limit stays "length").
std::string_view WithCalls(std::string_view reason, bool calls) {
  return calls && reason == "stop" ? "tool_calls" : reason;
}

}  // namespace

bool ChoicesFormat::Answer::HasCalls() const {
  return std::any_of(calls.begin(), calls.end(), [](const Call& c) { return c.valid; });
}

ChoicesFormat::ChoicesFormat(const OpenAiRequest& request, const text::Tokenizer* tokenizer,
                             std::string model, std::string id_tag, bool keep_alive)
    : endpoint_(request.endpoint),
      stream_(request.stream),
      top_logprobs_(request.top_logprobs),
      tokenizer_(tokenizer),
      id_tag_(std::move(id_tag)),
      keep_alive_(keep_alive) {
  header_.endpoint = request.endpoint;
  header_.model = std::move(model);
  header_.usage_in_chunks = request.include_usage;
}

std::string ChoicesFormat::Begin(RequestId id, int n) {
  const bool chat = endpoint_ == Endpoint::kChat;
  header_.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", id_tag_, "-", id);
  header_.created = absl::ToUnixSeconds(absl::Now());
  chunks_.emplace(header_);
  answers_.resize(n);
  std::string head;
  if (stream_ && chat) {
    for (int i = 0; i < n; ++i) chunks_->Append(i, "", /*role=*/true, "", nullptr, &head);
  }
  return head;
}

std::string ChoicesFormat::StreamFailure(const absl::Status& status) {
  return ErrorEvent(FromStatus(status).Body()) + std::string(kDoneEvent);
}

TokenLogprobText ChoicesFormat::LogprobText(int32_t token, const TokenLogprob& logprob) const {
  TokenLogprobText out;
  out.token = tokenizer_->TokenBytes(token);
  out.logprob = logprob.logprob;
  out.top.reserve(logprob.top.size());
  for (const TopLogprob& top : logprob.top) {
    out.top.emplace_back(tokenizer_->TokenBytes(top.token), top.logprob);
  }
  return out;
}

nlohmann::json ChoicesFormat::LogprobsJson(const std::vector<TokenLogprobText>& tokens,
                                           int64_t offset) const {
  if (top_logprobs_ < 0) return nullptr;
  return endpoint_ == Endpoint::kChat ? ChatLogprobs(tokens) : CompletionLogprobs(tokens, offset);
}

void ChoicesFormat::Consume(int index, const CompletionDelta& delta, std::string* out) {
  Answer& a = answers_[index];
  std::vector<TokenLogprobText> chunk_logprobs;
  if (top_logprobs_ >= 0) {
    for (size_t i = 0; i < delta.logprobs.size(); ++i) {
      chunk_logprobs.push_back(LogprobText(delta.tokens[i], delta.logprobs[i]));
    }
  }
  // The stream's deltas: one per run of content or reasoning, one per tool-call start, one per
  // run of a call's arguments. An invalid call cannot be taken back (its text follows as
  // content); it only stops counting for finish_reason.
  std::vector<ChatDelta> deltas;
  std::string text;  // the answer text of this delta (completions' text_offset)
  for (const OutputEvent& e : delta.events) {
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        text += e.text;
        if (!stream_) a.text += e.text;
        deltas.emplace_back().content = e.text;
        break;
      case OutputEvent::Kind::kReasoning:
        if (!stream_) a.reasoning += e.text;
        deltas.emplace_back().reasoning = e.text;
        break;
      case OutputEvent::Kind::kToolCallStart: {
        Call& call = a.calls.emplace_back();
        call.index = e.index;
        call.out.id = e.id;
        call.out.name = e.name;
        ChatDelta& d = deltas.emplace_back();
        d.tool_index = e.index;
        d.tool_id = e.id;
        d.tool_name = e.name;
      } break;
      case OutputEvent::Kind::kToolCallArguments:
        if (!stream_ && !a.calls.empty()) a.calls.back().out.arguments += e.text;
        deltas.emplace_back().tool_index = e.index;
        deltas.back().tool_arguments = e.text;
        break;
      case OutputEvent::Kind::kToolCallInvalid:
        for (Call& c : a.calls) {
          if (c.index == e.index) c.valid = false;
        }
        break;
    }
  }
  std::string_view reason = delta.end ? OpenAiReason(delta.end->event.reason) : "";
  if (endpoint_ == Endpoint::kChat) reason = WithCalls(reason, a.HasCalls());
  if (!stream_) {
    std::move(chunk_logprobs.begin(), chunk_logprobs.end(), std::back_inserter(a.logprobs));
  } else if (endpoint_ == Endpoint::kChat) {
    std::vector<ChatDelta> merged;
    for (const ChatDelta& d : deltas) {
      if (d.content.empty() && d.reasoning.empty() && d.tool_index < 0) continue;
      merged.push_back(d);
    }
    const nlohmann::json logprobs = LogprobsJson(chunk_logprobs, a.text_bytes);
    for (size_t i = 0; i < merged.size(); ++i) {
      const bool last = i + 1 == merged.size();
      chunks_->AppendChat(index, merged[i], /*role=*/false, last ? reason : "",
                          last ? logprobs : nlohmann::json(), out);
    }
    if (merged.empty() && (!reason.empty() || !chunk_logprobs.empty())) {
      chunks_->AppendChat(index, ChatDelta{}, /*role=*/false, reason, logprobs, out);
    }
  } else if (!text.empty() || !reason.empty() || !chunk_logprobs.empty()) {
    chunks_->Append(index, text, /*role=*/false, reason, LogprobsJson(chunk_logprobs, a.text_bytes),
                    out);
  }
  a.text_bytes += static_cast<int64_t>(text.size());
}

std::string ChoicesFormat::Closing(const OutputProcessor& output) {
  const Event merged = output.MergedEnd();
  const Usage usage{.prompt_tokens = merged.prompt_tokens,
                    .completion_tokens = merged.completion_tokens,
                    .cached_tokens = merged.cached_tokens};
  const absl::Status& failure = output.failure();
  if (stream_) {
    std::string out;
    if (!failure.ok()) out += ErrorEvent(FromStatus(failure).Body());
    if (header_.usage_in_chunks && failure.ok()) out += UsageEvent(header_, usage);
    out += kDoneEvent;
    return out;
  }
  if (!failure.ok()) return ErrorResponse(FromStatus(failure), keep_alive_);
  std::vector<Choice> choices;
  for (int i = 0; i < output.n(); ++i) {
    Answer& a = answers_[i];
    std::string_view reason = OpenAiReason(output.end(i).event.reason);
    std::vector<ToolCallOut> calls;
    for (Call& c : a.calls) {
      if (c.valid) calls.push_back(std::move(c.out));
    }
    if (endpoint_ == Endpoint::kChat) reason = WithCalls(reason, !calls.empty());
    choices.push_back(Choice{.text = std::move(a.text),
                             .finish_reason = std::string(reason),
                             .logprobs = LogprobsJson(a.logprobs, 0),
                             .reasoning = std::move(a.reasoning),
                             .tool_calls = std::move(calls)});
  }
  return HttpResponse(200, "application/json", CompletionBody(header_, choices, usage),
                      keep_alive_);
}

}  // namespace pagoda::scheduler::http
