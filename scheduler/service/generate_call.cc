#include "scheduler/service/generate_call.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/race_annotations.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
    case FinishReason::kContext:
      return v1::FINISH_REASON_CONTEXT;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_CANCELLED;  // the stream ends with DEADLINE_EXCEEDED instead
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillFinished(const Event& e, v1::Finished* out) {
  out->set_reason(ToProto(e.reason));
  out->mutable_usage()->set_prompt_tokens(e.prompt_tokens);
  out->mutable_usage()->set_completion_tokens(e.completion_tokens);
  out->mutable_usage()->set_cached_tokens(e.cached_tokens);
  const RequestTimings& t = e.timings;
  auto* stats = out->mutable_stats();
  stats->set_preemptions(e.preemptions);
  stats->set_e2e_seconds(t.finished - t.arrival);
  if (t.first_scheduled >= 0) stats->set_queue_seconds(t.first_scheduled - t.arrival);
  if (t.first_token >= 0) {
    stats->set_time_to_first_token_s(t.first_token - t.arrival);
    if (e.completion_tokens > 1) {
      stats->set_mean_time_per_output_token_s((t.finished - t.first_token) /
                                              (e.completion_tokens - 1));
    }
  }
}

void FillLogprob(int32_t token, const TokenLogprob& lp, v1::TokenLogprob* out) {
  out->set_token_id(token);
  out->set_logprob(lp.logprob);
  for (const TopLogprob& top : lp.top) {
    auto* t = out->add_top();
    t->set_token_id(top.token);
    t->set_logprob(top.logprob);
  }
}

// The stream's status for the core's final event.
grpc::Status FinalStatus(const Event& e) {
  switch (e.reason) {
    case FinishReason::kError:
      return grpc::Status(grpc::StatusCode::INTERNAL, e.message);
    case FinishReason::kCancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, e.message);
    case FinishReason::kDeadline:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, e.message);
    default:
      return grpc::Status::OK;
  }
}

}  // namespace

GenerateCall* GenerateCall::Start(GenerationService* service, grpc::CallbackServerContext* context,
                                  const v1::GenerateRequest& request, const absl::Status& decoded) {
  auto call = std::make_shared<GenerateCall>(service, context, request);
  call->self_ = call;
  service->CallStarted(call);
  call->Begin(request, decoded);
  return call.get();
}

GenerateCall::GenerateCall(GenerationService* service, grpc::CallbackServerContext* context,
                           const v1::GenerateRequest& request)
    : service_(service),
      context_(context),
      client_id_(request.request_id()),
      start_(service->engine_->Now()) {}

void GenerateCall::Begin(const v1::GenerateRequest& request, const absl::Status& decoded) {
  if (!decoded.ok()) return Refuse(ToGrpcStatus(decoded));
  absl::StatusOr<NewRequest> r = service_->Validate(request);
  if (!r.ok()) return Refuse(ToGrpcStatus(r.status()));
  Engine* engine = service_->engine_;
  r->id = engine->NextRequestIds(r->n);
  outcome_.id = r->id;
  outcome_.prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto deadline = context_->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const std::chrono::duration<double> left = deadline - std::chrono::system_clock::now();
    r->deadline = engine->Now() + left.count();
  }
  // Nothing reaches the call before Submit: its completions need no lock yet.
  std::vector<std::shared_ptr<RequestSink>> sinks;
  for (int i = 0; i < r->n; ++i) {
    completions_.push_back(std::make_unique<Completion>(
        service_->model_->tokenizer,
        std::vector<std::string>(request.stop().begin(), request.stop().end())));
    sinks.push_back(std::make_shared<CompletionSink<GenerateCall>>(self_, i));
  }
  ends_.resize(completions_.size());
  {
    absl::MutexLock lock(&mu_);
    id_ = r->id;
    submitted_ = true;  // before Submit, which may already deliver to the sinks
  }
  if (absl::Status s = engine->SubmitCompletions(*std::move(r), std::move(sinks)); !s.ok()) {
    {
      absl::MutexLock lock(&mu_);
      submitted_ = false;
    }
    if (std::optional<int64_t> after = RetryAfterSeconds(s)) {
      context_->AddTrailingMetadata(kRetryAfterTrailer, absl::StrCat(*after));
    }
    return Refuse(ToGrpcStatus(s));
  }
  // AbortAll ran before this call was in the engine: it ends like the others.
  if (std::optional<std::string> why = service_->AbortMessage()) Abort(*why);
}

void GenerateCall::Refuse(grpc::Status status) {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  outcome_.status = status;
  FinishCall(std::move(status));
}

bool GenerateCall::OnToken(int index, int32_t token, const TokenLogprob* logprob) {
  absl::MutexLock lock(&mu_);
  if (done_ || ending_) return false;
  Completion& c = *completions_[index];
  // A flush is owed already when this completion had news and no write was in flight.
  const bool idle = c.pending.empty() && !c.final && !writing_;
  c.pending.push_back(token);
  if (logprob != nullptr) c.pending_logprobs.push_back(*logprob);
  return idle;
}

bool GenerateCall::OnFinished(int index, Event event) {
  absl::MutexLock lock(&mu_);
  ++arrived_;
  if (done_) return false;
  completions_[index]->final = std::move(event);
  return !writing_;
}

int GenerateCall::NextWithNews() {
  const int n = static_cast<int>(completions_.size());
  for (int k = 0; k < n; ++k) {
    const int i = (next_ + k) % n;
    const Completion& c = *completions_[i];
    if (!c.pending.empty() || c.final) {
      next_ = (i + 1) % n;
      return i;
    }
  }
  return -1;
}

void GenerateCall::Flush() {
  for (;;) {
    int index = -1;
    std::optional<Event> final;
    bool last = false;
    std::optional<grpc::Status> end;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || done_) return;
      if (ending_) {
        done_ = true;
        end = ending_;
      } else if (index = NextWithNews(); index < 0) {
        return;
      } else {
        Completion& c = *completions_[index];
        writing_ = true;
        taken_.clear();
        taken_.swap(c.pending);  // the two buffers trade places: no allocation per message
        taken_logprobs_.clear();
        taken_logprobs_.swap(c.pending_logprobs);
        if (c.final) {
          final = std::move(c.final);
          c.final.reset();
          last = ++taken_ends_ == static_cast<int>(completions_.size());
        }
      }
    }
    if (end) {
      outcome_.status = *end;
      FinishCall(*std::move(end));
      return;
    }
    if (Write(index, taken_, taken_logprobs_, std::move(final), last)) return;
    absl::MutexLock lock(&mu_);
    writing_ = false;  // nothing was sent: look again
  }
}

bool GenerateCall::Write(int index, const std::vector<int32_t>& tokens,
                         const std::vector<TokenLogprob>& logprobs, std::optional<Event> final,
                         bool last) {
  Completion& c = *completions_[index];
  response_.Clear();
  response_.set_request_id(client_id_);
  response_.set_index(static_cast<uint32_t>(index));
  std::string text;
  bool matched = false;
  // logprobs is parallel to tokens when the request asked for them (empty otherwise); those of
  // tokens not sent (after a stop match) are dropped with their tokens.
  const bool with_logprobs = logprobs.size() == tokens.size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (!c.matched_stop.empty()) break;
    response_.add_token_ids(t);
    if (with_logprobs) FillLogprob(t, logprobs[i], response_.add_logprobs());
    ++c.sent_tokens;
    ++outcome_.sent_tokens;
    text::StopMatcher::Result m = c.stops.Push(c.detok.Push(t));
    text += m.text;
    if (m.matched) {
      c.matched_stop = m.stop;
      matched = true;
    }
  }
  // Not under mu_: the engine delivers this completion's end to OnFinished, and a later Flush
  // sends it.
  if (matched) service_->engine_->Finish(*outcome_.id + index, FinishReason::kStopString, "");
  if (final) {
    if (c.matched_stop.empty()) {
      text += c.stops.Push(c.detok.Flush()).text + c.stops.Flush();
    } else {
      // The match wins even when the core finished for another reason in the same iteration;
      // tokens past the match were never sent.
      final->reason = FinishReason::kStopString;
      final->completion_tokens = c.sent_tokens;
    }
    FillFinished(*final, response_.mutable_finished());
    response_.mutable_finished()->set_matched_stop(c.matched_stop);
    response_.set_text(std::move(text));
    RecordEnd(index, *final);
    if (last) {
      WriteFinal();
    } else {
      StartWriting();
    }
    return true;
  }
  if (response_.token_ids_size() == 0) return false;
  response_.set_text(std::move(text));
  StartWriting();
  return true;
}

void GenerateCall::RecordEnd(int index, const Event& final) {
  const grpc::Status status = FinalStatus(final);
  if (end_status_.ok() && !status.ok()) end_status_ = status;
  ends_[index] = final;
}

void GenerateCall::WriteFinal() {
  std::optional<grpc::Status> early;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    early = ending_;
  }
  if (early) {  // the client cancelled meanwhile: the end is not sent
    outcome_.status = *early;
    FinishCall(*std::move(early));
    return;
  }
  // The log line's event: completion 0's, with the tokens and preemptions of all n.
  Event merged = *std::move(ends_[0]);
  for (size_t i = 1; i < ends_.size(); ++i) {
    merged.completion_tokens += ends_[i]->completion_tokens;
    merged.preemptions += ends_[i]->preemptions;
    merged.timings.finished = std::max(merged.timings.finished, ends_[i]->timings.finished);
  }
  outcome_.status = end_status_;
  outcome_.finished = std::move(merged);
  grpc::Status status = outcome_.status;  // read before the hand-over
  common::HandOff(this);
  StartWriteAndFinish(&response_, grpc::WriteOptions(), std::move(status));
}

void GenerateCall::Stop(grpc::Status status, FinishReason reason) {
  bool tell_engine = false;
  RequestId id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (done_ || ending_) return;
    ending_ = status;
    tell_engine = submitted_;
    id = id_;
  }
  if (tell_engine) {
    // Finished completions are ignored by the engine; the ids are this call's alone.
    for (size_t i = 0; i < completions_.size(); ++i) {
      service_->engine_->Finish(id + i, reason, status.error_message());
    }
  }
  Flush();
}

void GenerateCall::Abort(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (done_ || ending_ || arrived_ == static_cast<int>(completions_.size())) return;
  }
  Stop(grpc::Status(grpc::StatusCode::UNAVAILABLE, why), FinishReason::kCancelled);
}

void GenerateCall::StartWriting() {
  common::HandOff(this);
  StartWrite(&response_);
}

void GenerateCall::FinishCall(grpc::Status status) {
  common::HandOff(this);
  Finish(std::move(status));
}

void GenerateCall::OnWriteDone(bool ok) {
  const common::Reaction reaction(this);
  if (!ok) {
    Stop(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"),
         FinishReason::kCancelled);
  }
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
  Flush();
}

void GenerateCall::OnCancel() {
  const common::Reaction reaction(this);
  if (context_->deadline() <= std::chrono::system_clock::now()) {
    Stop(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"),
         FinishReason::kDeadline);
  } else {
    Stop(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"),
         FinishReason::kCancelled);
  }
}

void GenerateCall::OnDone() {
  common::TakeOver(this);
  service_->Report(outcome_, client_id_, service_->engine_->Now() - start_);
  service_->CallEnded(this);
  std::shared_ptr<GenerateCall> self = std::move(self_);  // may be the last reference
}

}  // namespace pagoda::scheduler
