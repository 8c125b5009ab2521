#include "scheduler/http/openai_call.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scheduler/engine/engine.h"
#include "scheduler/http/http_message.h"
#include "scheduler/http/openai_frontend.h"

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

bool OpenAiCall::Answer::HasCalls() const {
  return std::any_of(calls.begin(), calls.end(), [](const Call& c) { return c.valid; });
}

void OpenAiCall::Start(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder,
                       OpenAiRequest request, bool keep_alive) {
  auto call =
      std::make_shared<OpenAiCall>(frontend, std::move(responder), std::move(request), keep_alive);
  frontend->CallStarted(call);
  call->Begin();
}

OpenAiCall::OpenAiCall(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder,
                       OpenAiRequest request, bool keep_alive)
    : frontend_(frontend),
      responder_(std::move(responder)),
      request_(std::move(request)),
      keep_alive_(keep_alive),
      start_(frontend->engine_->Now()) {}

void OpenAiCall::Begin() {
  Engine* engine = frontend_->engine_;
  absl::StatusOr<NewRequest> r = frontend_->service_->Validate(request_.generate);
  if (!r.ok()) return Refuse(r.status());
  r->id = engine->NextRequestIds(r->n);
  id_ = r->id;
  const bool chat = request_.endpoint == Endpoint::kChat;
  std::string answer_id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", frontend_->id_tag_, "-", id_);
  header_ = AnswerHeader{.endpoint = request_.endpoint,
                         .id = std::move(answer_id),
                         .created = absl::ToUnixSeconds(absl::Now()),
                         .model = frontend_->options_.served_model_name,
                         .usage_in_chunks = request_.include_usage};
  chunks_.emplace(header_);
  outcome_.id = id_;
  outcome_.prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto& stops = request_.generate.stop();
  std::unique_ptr<OutputProcessor> output = MakeOutputProcessor(
      engine, id_, r->n, frontend_->model_->tokenizer,
      std::vector<std::string>(stops.begin(), stops.end()), &mu_, request_.parsing);
  answers_.resize(r->n);
  std::vector<std::shared_ptr<RequestSink>> sinks;
  for (int i = 0; i < r->n; ++i) {
    sinks.push_back(std::make_shared<CompletionSink<OpenAiCall>>(shared_from_this(), i));
  }
  {
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
  }
  submitted_ = true;
  if (absl::Status s = engine->SubmitCompletions(*std::move(r), std::move(sinks)); !s.ok()) {
    submitted_ = false;
    return Refuse(s);
  }
  // The head goes out now, before any Pump: Pumps are posted to this strand, which runs this.
  if (request_.stream) {
    std::string head = EventStreamHead(keep_alive_);
    if (chat) {
      for (int i = 0; i < output_->n(); ++i) {
        std::string event;
        chunks_->Append(i, "", /*role=*/true, "", nullptr, &event);
        head += Chunk(event);
      }
    }
    Send(std::move(head), /*last=*/false);
  }
  std::weak_ptr<OpenAiCall> weak = weak_from_this();
  responder_->WatchForDisconnect([weak] {
    if (auto call = weak.lock()) call->Stop(absl::CancelledError("the client went away"));
  });
  if (std::optional<std::string> why = frontend_->AbortMessage()) Abort(*why);
}

void OpenAiCall::Refuse(const absl::Status& status) {
  outcome_.status = ToGrpcStatus(status);
  done_ = true;
  writing_ = true;
  std::shared_ptr<OpenAiCall> self = shared_from_this();
  // A predicted-wait refusal's Retry-After is the core's estimate.
  responder_->Write(ErrorResponse(FromStatus(status, RetryAfterSeconds(status)), keep_alive_),
                    [self](bool ok) { self->Done(ok && self->keep_alive_); });
}

bool OpenAiCall::OnToken(int index, int32_t token, const TokenLogprob* logprob) {
  absl::MutexLock lock(&mu_);
  if (over_ || ending_) return false;
  output_->AddToken(index, token, logprob);
  return !pump_posted_;
}

bool OpenAiCall::OnFinished(int index, Event event) {
  absl::MutexLock lock(&mu_);
  output_->AddEnd(index, std::move(event));  // counted for Abort even when the call is over
  return !over_ && !pump_posted_;
}

void OpenAiCall::Flush() {
  {
    absl::MutexLock lock(&mu_);
    if (pump_posted_ || over_) return;
    pump_posted_ = true;
  }
  responder_->Post([self = shared_from_this()] { self->Pump(); });
}

void OpenAiCall::Stop(absl::Status status) {
  int tell_engine = 0;  // completions to finish in the engine
  {
    absl::MutexLock lock(&mu_);
    if (over_ || ending_) return;
    ending_ = status;
    if (submitted_) tell_engine = output_->n();
  }
  for (int i = 0; i < tell_engine; ++i) {
    frontend_->engine_->Finish(id_ + i, FinishReason::kCancelled, std::string(status.message()));
  }
  responder_->Post([self = shared_from_this()] { self->Pump(); });
}

void OpenAiCall::Abort(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    // Before Begin made the processor, Begin's own check of AbortMessage covers the call.
    if (over_ || output_ == nullptr || output_->ends_arrived() == output_->n()) return;
  }
  Stop(absl::UnavailableError(why));
}

void OpenAiCall::Pump() {
  std::optional<absl::Status> ending;
  {
    absl::MutexLock lock(&mu_);
    pump_posted_ = false;
    if (writing_ || done_) return;
    ending = ending_;
    if (!ending) {
      for (int i = 0; i < output_->n(); ++i) {
        if (output_->HasNews(i)) output_->Take(i);
      }
    }
  }
  if (ending) return EndEarly(*ending);
  std::string out;
  for (int i = 0; i < output_->n(); ++i) {
    if (output_->Process(i, &delta_)) Consume(i, &out);
  }
  const bool last = output_->all_ended();
  if (last) out += Closing();
  if (out.empty()) return;
  if (request_.stream) out = Chunk(out) + (last ? std::string(kLastChunk) : "");
  Send(std::move(out), last);
}

TokenLogprobText OpenAiCall::LogprobText(int32_t token, const TokenLogprob& logprob) const {
  const text::Tokenizer& tok = frontend_->model_->tokenizer;
  TokenLogprobText out;
  out.token = tok.TokenBytes(token);
  out.logprob = logprob.logprob;
  out.top.reserve(logprob.top.size());
  for (const TopLogprob& top : logprob.top) {
    out.top.emplace_back(tok.TokenBytes(top.token), top.logprob);
  }
  return out;
}

nlohmann::json OpenAiCall::LogprobsJson(const std::vector<TokenLogprobText>& tokens,
                                        int64_t offset) const {
  if (request_.top_logprobs < 0) return nullptr;
  return request_.endpoint == Endpoint::kChat ? ChatLogprobs(tokens)
                                              : CompletionLogprobs(tokens, offset);
}

void OpenAiCall::Consume(int index, std::string* out) {
  Answer& a = answers_[index];
  outcome_.sent_tokens += static_cast<int32_t>(delta_.tokens.size());
  std::vector<TokenLogprobText> chunk_logprobs;
  if (request_.top_logprobs >= 0) {
    for (size_t i = 0; i < delta_.logprobs.size(); ++i) {
      chunk_logprobs.push_back(LogprobText(delta_.tokens[i], delta_.logprobs[i]));
    }
  }
  // The stream's deltas: one per run of content or reasoning, one per tool-call start, one per
  // run of a call's arguments. An invalid call cannot be taken back (its text follows as
  // content); it only stops counting for finish_reason.
  std::vector<ChatDelta> deltas;
  std::string text;  // the answer text of this delta (completions' text_offset)
  for (OutputEvent& e : delta_.events) {
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        text += e.text;
        if (!request_.stream) a.text += e.text;
        deltas.emplace_back().content = e.text;
        break;
      case OutputEvent::Kind::kReasoning:
        if (!request_.stream) a.reasoning += e.text;
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
        if (!request_.stream && !a.calls.empty()) a.calls.back().out.arguments += e.text;
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
  std::string_view reason = delta_.end ? OpenAiReason(delta_.end->event.reason) : "";
  if (request_.endpoint == Endpoint::kChat) reason = WithCalls(reason, a.HasCalls());
  if (!request_.stream) {
    std::move(chunk_logprobs.begin(), chunk_logprobs.end(), std::back_inserter(a.logprobs));
  } else if (request_.endpoint == Endpoint::kChat) {
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

std::string OpenAiCall::Closing() {
  // The log line's event: completion 0's, with the tokens of all n (the usage's too).
  Event merged = output_->MergedEnd();
  const Usage usage{.prompt_tokens = merged.prompt_tokens,
                    .completion_tokens = merged.completion_tokens,
                    .cached_tokens = merged.cached_tokens};
  const absl::Status& failure = output_->failure();
  outcome_.status = ToGrpcStatus(failure);
  if (failure.ok()) outcome_.finished = std::move(merged);
  if (request_.stream) {
    std::string out;
    if (!failure.ok()) out += ErrorEvent(FromStatus(failure).Body());
    if (request_.include_usage && failure.ok()) out += UsageEvent(header_, usage);
    out += kDoneEvent;
    return out;
  }
  if (!failure.ok()) return ErrorResponse(FromStatus(failure), keep_alive_);
  std::vector<Choice> choices;
  for (int i = 0; i < output_->n(); ++i) {
    Answer& a = answers_[i];
    std::string_view reason = OpenAiReason(output_->end(i).event.reason);
    std::vector<ToolCallOut> calls;
    for (Call& c : a.calls) {
      if (c.valid) calls.push_back(std::move(c.out));
    }
    if (request_.endpoint == Endpoint::kChat) reason = WithCalls(reason, !calls.empty());
    choices.push_back(Choice{.text = std::move(a.text),
                             .finish_reason = std::string(reason),
                             .logprobs = LogprobsJson(a.logprobs, 0),
                             .reasoning = std::move(a.reasoning),
                             .tool_calls = std::move(calls)});
  }
  return HttpResponse(200, "application/json", CompletionBody(header_, choices, usage),
                      keep_alive_);
}

void OpenAiCall::Send(std::string bytes, bool last) {
  writing_ = true;
  if (last) done_ = true;
  responder_->Write(std::move(bytes),
                    [self = shared_from_this(), last](bool ok) { self->OnWritten(ok, last); });
}

void OpenAiCall::OnWritten(bool ok, bool last) {
  writing_ = false;
  if (last) return Done(ok && keep_alive_);
  if (!ok) Stop(absl::CancelledError("the client went away"));
  Pump();
}

void OpenAiCall::EndEarly(const absl::Status& status) {
  done_ = true;
  outcome_.status = ToGrpcStatus(status);
  if (status.code() == absl::StatusCode::kCancelled) return Done(false);  // the client is gone
  std::string out;
  if (request_.stream) {
    out = Chunk(absl::StrCat(ErrorEvent(FromStatus(status).Body()), std::string(kDoneEvent))) +
          std::string(kLastChunk);
  } else {
    out = ErrorResponse(FromStatus(status), /*keep_alive=*/false);
  }
  writing_ = true;
  responder_->Write(std::move(out), [self = shared_from_this()](bool) { self->Done(false); });
}

void OpenAiCall::Done(bool reuse) {
  {
    absl::MutexLock lock(&mu_);
    over_ = true;
  }
  frontend_->service_->Report(outcome_, header_.id, frontend_->engine_->Now() - start_);
  frontend_->CallEnded(this);
  responder_->Complete(reuse);
}

}  // namespace pagoda::scheduler::http
