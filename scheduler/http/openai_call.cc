#include "scheduler/http/openai_call.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scheduler/engine/engine.h"
#include "scheduler/http/choices_format.h"
#include "scheduler/http/http_message.h"
#include "scheduler/http/openai_frontend.h"

namespace pagoda::scheduler::http {
void OpenAiCall::Start(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder,
                       OpenAiRequest request, bool keep_alive,
                       std::unique_ptr<AnswerFormat> format) {
  if (format == nullptr) {
    format = std::make_unique<ChoicesFormat>(request, &frontend->model_->tokenizer,
                                             frontend->options_.served_model_name,
                                             frontend->id_tag_, keep_alive);
  }
  auto call = std::make_shared<OpenAiCall>(frontend, std::move(responder), std::move(request),
                                           keep_alive, std::move(format));
  frontend->CallStarted(call);
  call->Begin();
}

OpenAiCall::OpenAiCall(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder,
                       OpenAiRequest request, bool keep_alive, std::unique_ptr<AnswerFormat> format)
    : frontend_(frontend),
      responder_(std::move(responder)),
      request_(std::move(request)),
      keep_alive_(keep_alive),
      format_(std::move(format)),
      start_(frontend->engine_->Now()) {}

void OpenAiCall::Begin() {
  Engine* engine = frontend_->engine_;
  absl::StatusOr<NewRequest> r = frontend_->service_->Validate(request_.generate);
  if (!r.ok()) return Refuse(r.status());
  r->id = engine->NextRequestIds(r->n);
  id_ = r->id;
  const std::string head = format_->Begin(id_, r->n);
  outcome_.id = id_;
  outcome_.prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto& stops = request_.generate.stop();
  std::unique_ptr<OutputProcessor> output = MakeOutputProcessor(
      engine, id_, r->n, frontend_->model_->tokenizer,
      std::vector<std::string>(stops.begin(), stops.end()), &mu_, request_.parsing);
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
    Send(EventStreamHead(keep_alive_) + (head.empty() ? "" : Chunk(head)), /*last=*/false);
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
    if (output_->Process(i, &delta_)) {
      outcome_.sent_tokens += static_cast<int32_t>(delta_.tokens.size());
      format_->Consume(i, delta_, &out);
    }
  }
  const bool last = output_->all_ended();
  if (last) out += Closing();
  if (out.empty()) return;
  if (request_.stream) out = Chunk(out) + (last ? std::string(kLastChunk) : "");
  Send(std::move(out), last);
}

std::string OpenAiCall::Closing() {
  // The log line's event: completion 0's, with the tokens of all n.
  outcome_.status = ToGrpcStatus(output_->failure());
  if (output_->failure().ok()) outcome_.finished = output_->MergedEnd();
  return format_->Closing(*output_);
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
    out = Chunk(format_->StreamFailure(status)) + std::string(kLastChunk);
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
  frontend_->service_->Report(outcome_, format_->id(), frontend_->engine_->Now() - start_);
  frontend_->CallEnded(this);
  responder_->Complete(reuse);
}

}  // namespace pagoda::scheduler::http
