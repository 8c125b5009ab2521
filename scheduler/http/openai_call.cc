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

// The failure an abnormal end stands for.
absl::Status EndStatus(const Event& e) {
  switch (e.reason) {
    case FinishReason::kError:
      return absl::InternalError(e.message);
    case FinishReason::kCancelled:
      return absl::CancelledError(e.message);
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError(e.message);
    default:
      return absl::OkStatus();
  }
}

}  // namespace

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
  std::vector<std::shared_ptr<RequestSink>> sinks;
  const auto& stops = request_.generate.stop();
  for (int i = 0; i < r->n; ++i) {
    completions_.push_back(std::make_unique<Completion>(
        frontend_->model_->tokenizer, std::vector<std::string>(stops.begin(), stops.end())));
    sinks.push_back(std::make_shared<CompletionSink<OpenAiCall>>(shared_from_this(), i));
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
      for (size_t i = 0; i < completions_.size(); ++i) {
        std::string event;
        chunks_->Append(static_cast<int>(i), "", /*role=*/true, "", nullptr, &event);
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
  Completion& c = *completions_[index];
  c.pending.push_back(token);
  if (logprob != nullptr) c.pending_logprobs.push_back(*logprob);
  return !pump_posted_;
}

bool OpenAiCall::OnFinished(int index, Event event) {
  absl::MutexLock lock(&mu_);
  ++arrived_;
  if (over_) return false;
  completions_[index]->final = std::move(event);
  return !pump_posted_;
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
  {
    absl::MutexLock lock(&mu_);
    if (over_ || ending_) return;
    ending_ = status;
  }
  if (submitted_) {
    for (size_t i = 0; i < completions_.size(); ++i) {
      frontend_->engine_->Finish(id_ + i, FinishReason::kCancelled, std::string(status.message()));
    }
  }
  responder_->Post([self = shared_from_this()] { self->Pump(); });
}

void OpenAiCall::Abort(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (over_ || arrived_ == static_cast<int>(completions_.size())) return;
  }
  Stop(absl::UnavailableError(why));
}

void OpenAiCall::Pump() {
  struct News {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    std::optional<Event> final;
  };
  std::vector<News> news(completions_.size());
  std::optional<absl::Status> ending;
  {
    absl::MutexLock lock(&mu_);
    pump_posted_ = false;
    if (writing_ || done_) return;
    ending = ending_;
    if (!ending) {
      for (size_t i = 0; i < completions_.size(); ++i) {
        Completion& c = *completions_[i];
        news[i].tokens.swap(c.pending);
        news[i].logprobs.swap(c.pending_logprobs);
        news[i].final = std::move(c.final);
        c.final.reset();
      }
    }
  }
  if (ending) return EndEarly(*ending);
  std::string out;
  for (size_t i = 0; i < news.size(); ++i) {
    if (news[i].tokens.empty() && !news[i].final) continue;
    Consume(static_cast<int>(i), news[i].tokens, news[i].logprobs, std::move(news[i].final), &out);
  }
  const bool last = ended_ == static_cast<int>(completions_.size());
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

void OpenAiCall::Consume(int index, const std::vector<int32_t>& tokens,
                         const std::vector<TokenLogprob>& logprobs, std::optional<Event> final,
                         std::string* out) {
  Completion& c = *completions_[index];
  std::string text;
  bool matched = false;
  // Logprobs are parallel to the tokens when asked for (the worker sends one per token).
  const bool with_logprobs = request_.top_logprobs >= 0 && logprobs.size() == tokens.size();
  std::vector<TokenLogprobText> chunk_logprobs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (!c.matched_stop.empty()) break;
    ++c.sent_tokens;
    ++outcome_.sent_tokens;
    if (with_logprobs) chunk_logprobs.push_back(LogprobText(t, logprobs[i]));
    text::StopMatcher::Result m = c.stops.Push(c.detok.Push(t));
    text += m.text;
    if (m.matched) {
      c.matched_stop = m.stop;
      matched = true;
    }
  }
  if (matched) frontend_->engine_->Finish(id_ + index, FinishReason::kStopString, "");
  std::string_view reason;
  if (final) {
    if (c.matched_stop.empty()) {
      text += c.stops.Push(c.detok.Flush()).text + c.stops.Flush();
    } else {
      final->reason = FinishReason::kStopString;
      final->completion_tokens = c.sent_tokens;
    }
    if (absl::Status s = EndStatus(*final); !s.ok() && failure_.ok()) failure_ = s;
    reason = OpenAiReason(final->reason);
    c.end = std::move(final);
    ++ended_;
  }
  if (!request_.stream) {
    c.text += text;
    std::move(chunk_logprobs.begin(), chunk_logprobs.end(), std::back_inserter(c.logprobs));
  } else if (!text.empty() || !reason.empty() || !chunk_logprobs.empty()) {
    chunks_->Append(index, text, /*role=*/false, reason, LogprobsJson(chunk_logprobs, c.text_bytes),
                    out);
  }
  c.text_bytes += static_cast<int64_t>(text.size());
}

std::string OpenAiCall::Closing() {
  Usage usage;
  Event merged = *completions_[0]->end;
  usage.prompt_tokens = merged.prompt_tokens;
  usage.cached_tokens = merged.cached_tokens;
  for (size_t i = 0; i < completions_.size(); ++i) {
    const Event& e = *completions_[i]->end;
    usage.completion_tokens += e.completion_tokens;
    if (i == 0) continue;
    merged.completion_tokens += e.completion_tokens;
    merged.preemptions += e.preemptions;
    merged.timings.finished = std::max(merged.timings.finished, e.timings.finished);
  }
  outcome_.status = ToGrpcStatus(failure_);
  if (failure_.ok()) outcome_.finished = std::move(merged);
  if (request_.stream) {
    std::string out;
    if (!failure_.ok()) out += ErrorEvent(FromStatus(failure_).Body());
    if (request_.include_usage && failure_.ok()) out += UsageEvent(header_, usage);
    out += kDoneEvent;
    return out;
  }
  if (!failure_.ok()) return ErrorResponse(FromStatus(failure_), keep_alive_);
  std::vector<Choice> choices;
  for (const auto& c : completions_) {
    choices.push_back(Choice{.text = std::move(c->text),
                             .finish_reason = std::string(OpenAiReason(c->end->reason)),
                             .logprobs = LogprobsJson(c->logprobs, 0)});
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
