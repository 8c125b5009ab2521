#include "scheduler/service/generate_call.h"

#include <chrono>
#include <utility>
#include <vector>

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

// GenerateRequest.parsing as the parser's options; nullopt when unset.
absl::StatusOr<std::optional<text::OutputParser::Options>> ParsingOptions(
    const v1::GenerateRequest& request, const text::Tokenizer& tokenizer) {
  if (!request.has_parsing()) return std::nullopt;
  const v1::OutputParsing& p = request.parsing();
  text::ToolCallFormat format = text::ToolCallFormat::kNone;
  if (!p.tool_call_format().empty()) {
    absl::StatusOr<std::optional<text::ToolCallFormat>> named =
        text::ParseToolCallFormatFlag(p.tool_call_format());
    if (!named.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parsing.tool_call_format: ", named.status().message()));
    }
    format = named->value_or(text::DetectToolCallFormat(tokenizer.chat_template()));
  }
  if (p.max_tool_calls() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parsing.max_tool_calls must be >= 0, got ", p.max_tool_calls()));
  }
  return text::OutputParser::Options{
      .reasoning = p.reasoning(),
      .starts_in_reasoning = p.reasoning() && p.starts_in_reasoning(),
      .format = format,
      .tools_given = format != text::ToolCallFormat::kNone,
      .id_seed = 0,
      .max_tool_calls = p.max_tool_calls(),
  };
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
  absl::StatusOr<std::optional<text::OutputParser::Options>> parsing =
      ParsingOptions(request, service_->model_->tokenizer);
  if (!parsing.ok()) return Refuse(ToGrpcStatus(parsing.status()));
  absl::StatusOr<NewRequest> r = service_->Validate(request);
  if (!r.ok()) return Refuse(ToGrpcStatus(r.status()));
  Engine* engine = service_->engine_;
  r->id = engine->NextRequestIds(r->n);
  // Call ids differ between requests.
  if (*parsing) (*parsing)->id_seed = static_cast<uint64_t>(r->id);
  outcome_.id = r->id;
  outcome_.prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto deadline = context_->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const std::chrono::duration<double> left = deadline - std::chrono::system_clock::now();
    r->deadline = engine->Now() + left.count();
  }
  // Not under mu_: a stop match's Finish comes from the writer (the engine then delivers the
  // completion's end to OnFinished, and a later Flush sends it).
  std::unique_ptr<OutputProcessor> output = MakeOutputProcessor(
      engine, r->id, r->n, service_->model_->tokenizer,
      std::vector<std::string>(request.stop().begin(), request.stop().end()), &mu_, *parsing);
  std::vector<std::shared_ptr<RequestSink>> sinks;
  for (int i = 0; i < r->n; ++i) {
    sinks.push_back(std::make_shared<CompletionSink<GenerateCall>>(self_, i));
  }
  {
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
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
  // A flush is owed already when this completion had news and no write was in flight.
  const bool idle = !output_->HasNews(index) && !writing_;
  output_->AddToken(index, token, logprob);
  return idle;
}

bool GenerateCall::OnFinished(int index, Event event) {
  absl::MutexLock lock(&mu_);
  output_->AddEnd(index, std::move(event));  // counted for Abort even when the call is done
  return !done_ && !writing_;
}

void GenerateCall::Flush() {
  for (;;) {
    int index = -1;
    std::optional<grpc::Status> end;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || done_) return;
      if (ending_) {
        done_ = true;
        end = ending_;
      } else if (index = output_->NextWithNews(); index < 0) {
        return;
      } else {
        writing_ = true;
        output_->Take(index);
      }
    }
    if (end) {
      outcome_.status = *end;
      FinishCall(*std::move(end));
      return;
    }
    if (Write(index)) return;
    absl::MutexLock lock(&mu_);
    writing_ = false;  // nothing was sent: look again
  }
}

bool GenerateCall::Write(int index) {
  // Nothing to send when every token came after a stop match.
  if (!output_->Process(index, &delta_) || (delta_.tokens.empty() && !delta_.end)) return false;
  response_.Clear();
  response_.set_request_id(client_id_);
  response_.set_index(static_cast<uint32_t>(index));
  for (size_t i = 0; i < delta_.tokens.size(); ++i) {
    response_.add_token_ids(delta_.tokens[i]);
    if (!delta_.logprobs.empty()) {
      FillLogprob(delta_.tokens[i], delta_.logprobs[i], response_.add_logprobs());
    }
  }
  outcome_.sent_tokens += static_cast<int32_t>(delta_.tokens.size());
  std::string text;
  std::string reasoning;
  for (OutputEvent& e : delta_.events) {
    auto* calls = response_.mutable_tool_calls();
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        text += e.text;
        break;
      case OutputEvent::Kind::kReasoning:
        reasoning += e.text;
        break;
      case OutputEvent::Kind::kToolCallStart: {
        v1::ToolCallDelta* d = calls->Add();
        d->set_index(static_cast<uint32_t>(e.index));
        d->set_id(std::move(e.id));
        d->set_name(std::move(e.name));
        break;
      }
      case OutputEvent::Kind::kToolCallArguments: {
        // Appended to the call's piece in this message when it is the last one.
        if (calls->empty() || calls->rbegin()->index() != static_cast<uint32_t>(e.index) ||
            calls->rbegin()->invalid()) {
          calls->Add()->set_index(static_cast<uint32_t>(e.index));
        }
        calls->rbegin()->mutable_arguments()->append(e.text);
        break;
      }
      case OutputEvent::Kind::kToolCallInvalid: {
        v1::ToolCallDelta* d = calls->Add();
        d->set_index(static_cast<uint32_t>(e.index));
        d->set_invalid(true);
        break;
      }
    }
  }
  response_.set_text(std::move(text));
  response_.set_reasoning_text(std::move(reasoning));
  if (!delta_.end) {
    StartWriting();
    return true;
  }
  FillFinished(delta_.end->event, response_.mutable_finished());
  response_.mutable_finished()->set_matched_stop(delta_.end->matched_stop);
  if (output_->all_ended()) {
    WriteFinal();
  } else {
    StartWriting();
  }
  return true;
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
  // OK, or the first failure among the completions' ends; the log line's event.
  outcome_.status = ToGrpcStatus(output_->failure());
  outcome_.finished = output_->MergedEnd();
  grpc::Status status = outcome_.status;  // read before the hand-over
  common::HandOff(this);
  StartWriteAndFinish(&response_, grpc::WriteOptions(), std::move(status));
}

void GenerateCall::Stop(grpc::Status status, FinishReason reason) {
  int tell_engine = 0;  // completions to finish in the engine
  RequestId id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (done_ || ending_) return;
    ending_ = status;
    if (submitted_) tell_engine = output_->n();
    id = id_;
  }
  // Finished completions are ignored by the engine; the ids are this call's alone.
  for (int i = 0; i < tell_engine; ++i) {
    service_->engine_->Finish(id + i, reason, status.error_message());
  }
  Flush();
}

void GenerateCall::Abort(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    // Before Begin made the processor, Begin's own check of AbortMessage covers the call.
    if (done_ || ending_ || output_ == nullptr || output_->ends_arrived() == output_->n()) return;
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
