#include "scheduler/service/generate_call.h"

#include <chrono>
#include <utility>

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
      start_(service->engine_->Now()),
      detok_(service->model_->tokenizer),
      stops_(std::vector<std::string>(request.stop().begin(), request.stop().end())) {}

void GenerateCall::Begin(const v1::GenerateRequest& request, const absl::Status& decoded) {
  if (!decoded.ok()) return Refuse(ToGrpcStatus(decoded));
  absl::StatusOr<NewRequest> r = service_->Validate(request);
  if (!r.ok()) return Refuse(ToGrpcStatus(r.status()));
  Engine* engine = service_->engine_;
  r->id = engine->NextRequestId();
  outcome_.id = r->id;
  outcome_.prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto deadline = context_->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const std::chrono::duration<double> left = deadline - std::chrono::system_clock::now();
    r->deadline = engine->Now() + left.count();
  }
  {
    absl::MutexLock lock(&mu_);
    id_ = r->id;
    submitted_ = true;  // before Submit, which may already deliver to this sink
  }
  if (absl::Status s = engine->Submit(*std::move(r), self_); !s.ok()) {
    {
      absl::MutexLock lock(&mu_);
      submitted_ = false;
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
  Finish(std::move(status));
}

bool GenerateCall::OnToken(int32_t token) {
  absl::MutexLock lock(&mu_);
  if (done_ || ending_) return false;
  const bool idle = pending_.empty() && !final_ && !writing_;
  pending_.push_back(token);
  return idle;
}

bool GenerateCall::OnFinished(Event event) {
  absl::MutexLock lock(&mu_);
  if (done_) return false;
  final_ = std::move(event);
  return !writing_;
}

void GenerateCall::Flush() {
  for (;;) {
    std::optional<Event> final;
    std::optional<grpc::Status> end;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || done_) return;
      if (ending_) {
        done_ = true;
        end = ending_;
      } else if (pending_.empty() && !final_) {
        return;
      } else {
        writing_ = true;
        taken_.clear();
        taken_.swap(pending_);  // the two buffers trade places: no allocation per message
        if (final_) {
          final = std::move(final_);
          final_.reset();
          final_taken_ = true;
        }
      }
    }
    if (end) {
      outcome_.status = *end;
      Finish(*std::move(end));
      return;
    }
    if (Write(taken_, std::move(final))) return;
    absl::MutexLock lock(&mu_);
    writing_ = false;  // nothing was sent: look again
  }
}

bool GenerateCall::Write(const std::vector<int32_t>& tokens, std::optional<Event> final) {
  response_.Clear();
  response_.set_request_id(client_id_);
  std::string text;
  bool matched = false;
  for (int32_t t : tokens) {
    if (!matched_stop_.empty()) break;
    response_.add_token_ids(t);
    ++outcome_.sent_tokens;
    text::StopMatcher::Result m = stops_.Push(detok_.Push(t));
    text += m.text;
    if (m.matched) {
      matched_stop_ = m.stop;
      matched = true;
    }
  }
  // Not under mu_: the engine delivers this request's end to OnFinished, and the next Flush
  // sends it.
  if (matched) service_->engine_->Finish(*outcome_.id, FinishReason::kStopString, "");
  if (final) {
    if (matched_stop_.empty()) {
      text += stops_.Push(detok_.Flush()).text + stops_.Flush();
    } else {
      // The match wins even when the core finished for another reason in the same iteration;
      // tokens past the match were never sent.
      final->reason = FinishReason::kStopString;
      final->completion_tokens = outcome_.sent_tokens;
    }
    FillFinished(*final, response_.mutable_finished());
    response_.mutable_finished()->set_matched_stop(matched_stop_);
    response_.set_text(std::move(text));
    WriteFinal(*std::move(final));
    return true;
  }
  if (response_.token_ids_size() == 0) return false;
  response_.set_text(std::move(text));
  StartWrite(&response_);
  return true;
}

void GenerateCall::WriteFinal(Event final) {
  std::optional<grpc::Status> early;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    early = ending_;
  }
  if (early) {  // the client cancelled meanwhile: the end is not sent
    outcome_.status = *early;
    Finish(*std::move(early));
    return;
  }
  outcome_.status = FinalStatus(final);
  outcome_.finished = std::move(final);
  StartWriteAndFinish(&response_, grpc::WriteOptions(), outcome_.status);
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
  if (tell_engine) service_->engine_->Finish(id, reason, status.error_message());
  Flush();
}

void GenerateCall::Abort(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (done_ || ending_ || final_ || final_taken_) return;
  }
  Stop(grpc::Status(grpc::StatusCode::UNAVAILABLE, why), FinishReason::kCancelled);
}

void GenerateCall::OnWriteDone(bool ok) {
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
  if (context_->deadline() <= std::chrono::system_clock::now()) {
    Stop(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"),
         FinishReason::kDeadline);
  } else {
    Stop(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"),
         FinishReason::kCancelled);
  }
}

void GenerateCall::OnDone() {
  service_->Report(outcome_, client_id_, service_->engine_->Now() - start_);
  service_->CallEnded(this);
  std::shared_ptr<GenerateCall> self = std::move(self_);  // may be the last reference
}

}  // namespace pagoda::scheduler
