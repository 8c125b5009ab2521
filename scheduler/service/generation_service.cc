#include "scheduler/service/generation_service.h"

#include <grpcpp/support/method_handler.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/detokenizer.h"
#include "common/log.h"
#include "common/utf8.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/request_decoder.h"
#include "scheduler/service/stop_matcher.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

// How often the watcher looks for cancelled calls.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);
// A handler's longest sleep without news: a safety net, since the watcher wakes it.
constexpr absl::Duration kIdleWait = absl::Seconds(1);
constexpr size_t kMaxClientIdBytes = 256;
constexpr size_t kMaxCacheSaltBytes = 256;
constexpr float kMaxTemperature = 100.0f;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;
// pagoda.v1.Generation's methods, as in generation.proto.
constexpr char kGenerateMethod[] = "/pagoda.v1.Generation/Generate";
constexpr char kTokenizeMethod[] = "/pagoda.v1.Generation/Tokenize";
constexpr char kGetModelInfoMethod[] = "/pagoda.v1.Generation/GetModelInfo";
constexpr char kGetServerStatusMethod[] = "/pagoda.v1.Generation/GetServerStatus";

// A unary method handler of GenerationService.
template <class Request, class Response>
grpc::internal::RpcServiceMethod* UnaryMethod(
    const char* name, GenerationService* service,
    grpc::Status (GenerationService::*method)(grpc::ServerContext*, const Request*, Response*)) {
  return new grpc::internal::RpcServiceMethod(
      name, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GenerationService, Request, Response, Request, Response>(
          [method](GenerationService* s, grpc::ServerContext* context, const Request* request,
                   Response* response) { return (s->*method)(context, request, response); },
          service));
}

// The bytes of a received message; gRPC may hold them in several slices.
std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

grpc::Status ToGrpc(const absl::Status& status) {
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<Priority> ToPriority(v1::Priority p) {
  switch (p) {
    case v1::PRIORITY_UNSPECIFIED:
    case v1::PRIORITY_NORMAL:
      return Priority::kNormal;
    case v1::PRIORITY_LOW:
      return Priority::kLow;
    case v1::PRIORITY_HIGH:
      return Priority::kHigh;
    case v1::PRIORITY_CRITICAL:
      return Priority::kCritical;
    default:
      return Invalid(absl::StrFormat("unknown priority %d; use PRIORITY_LOW..CRITICAL", p));
  }
}

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

absl::Status ValidateSampling(const v1::SamplingParams& p, SamplingParams* out) {
  if (!std::isfinite(p.temperature()) || p.temperature() < 0 || p.temperature() > kMaxTemperature) {
    return Invalid(absl::StrFormat("temperature must be in [0, %g], got %g", kMaxTemperature,
                                   p.temperature()));
  }
  if (p.top_k() < 0) return Invalid(absl::StrFormat("top_k must be >= 0, got %d", p.top_k()));
  if (!std::isfinite(p.top_p()) || p.top_p() < 0 || p.top_p() > 1) {
    return Invalid(absl::StrFormat("top_p must be in [0, 1], got %g", p.top_p()));
  }
  out->temperature = p.temperature();
  out->top_k = p.top_k();
  out->top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  out->seed = p.seed();
  return absl::OkStatus();
}

absl::Status ValidateStops(const v1::GenerateRequest& request) {
  if (request.stop_size() > kMaxStopStrings) {
    return Invalid(
        absl::StrFormat("%d stop strings; the limit is %d", request.stop_size(), kMaxStopStrings));
  }
  for (const std::string& stop : request.stop()) {
    if (stop.empty() || stop.size() > kMaxStopBytes || !common::IsValidUtf8(stop)) {
      return Invalid(absl::StrFormat(
          "each stop string must be valid UTF-8 of 1 to %d bytes; got one of %d bytes",
          kMaxStopBytes, stop.size()));
    }
  }
  return absl::OkStatus();
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

GenerationService::GenerationService(Engine* engine, const ServedModel* model,
                                     SchedulerMetrics* metrics, GenerationLimits limits)
    : engine_(engine), model_(model), metrics_(metrics), limits_(limits) {
  for (int32_t id = 0; id < model_->tokenizer.vocab_size(); ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, model_->tokenizer.TokenBytes(id).size());
  }
  // Registered as the generated code would, except that Generate and Tokenize take their
  // requests as bytes.
  AddMethod(new grpc::internal::RpcServiceMethod(
      kGenerateMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
      new grpc::internal::ServerStreamingHandler<GenerationService, grpc::ByteBuffer,
                                                 v1::GenerateResponse>(
          [](GenerationService* service, grpc::ServerContext* context,
             const grpc::ByteBuffer* request, grpc::ServerWriter<v1::GenerateResponse>* writer) {
            return service->GenerateBytes(context, request, writer);
          },
          this)));
  AddMethod(UnaryMethod(kTokenizeMethod, this, &GenerationService::TokenizeBytes));
  AddMethod(UnaryMethod(kGetModelInfoMethod, this, &GenerationService::GetModelInfo));
  AddMethod(UnaryMethod(kGetServerStatusMethod, this, &GenerationService::GetServerStatus));
  watcher_ = std::thread([this] { WatchCancellations(); });
}

GenerationService::~GenerationService() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watcher_.join();
}

void GenerationService::WatchCancellations() {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), kCancelPoll)) {
    // IsCancelled() is thread-safe: on a sync call it polls the call's own completion queue
    // without blocking (gRPC allows several pluckers, the handler's Write being another).
    for (const auto& [key, watched] : streaming_) {
      if (watched.first->IsCancelled()) watched.second->Wake();
    }
  }
}

absl::StatusOr<NewRequest> GenerationService::Validate(const v1::GenerateRequest& request) const {
  const common::Tokenizer& tok = model_->tokenizer;
  const int32_t vocab = tok.vocab_size();
  const int32_t context = model_->config.context_length;
  NewRequest r;
  if (request.prompt_case() == v1::GenerateRequest::kText) {
    if (!common::IsValidUtf8(request.text())) return Invalid("prompt text is not valid UTF-8");
    // Each token stands for at most max_token_bytes_ bytes of text, so a longer text cannot
    // fit the context whatever its tokenization: refused without spending time on it.
    const size_t max_text = static_cast<size_t>(context) * max_token_bytes_;
    if (request.text().size() > max_text) {
      return Invalid(absl::StrFormat(
          "the prompt text has %d bytes; the model context of %d tokens holds at most %d bytes "
          "of text (%d bytes per token at most)",
          request.text().size(), context, max_text, max_token_bytes_));
    }
    if (!request.text().empty()) r.prompt = tok.Encode(request.text(), /*add_bos=*/true);
  } else if (request.prompt_case() == v1::GenerateRequest::kTokenIds) {
    const auto& ids = request.token_ids().ids();
    if (ids.size() >= context) {
      return Invalid(
          absl::StrFormat("the prompt has %d tokens; the model context is %d tokens, leaving no "
                          "room to generate",
                          ids.size(), context));
    }
    for (int i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab) {
        return Invalid(
            absl::StrFormat("prompt token id %d at index %d is outside the vocabulary "
                            "[0, %d)",
                            ids[i], i, vocab));
      }
    }
    r.prompt.assign(ids.begin(), ids.end());
  }
  if (r.prompt.empty()) return Invalid("the prompt is empty: set text or token_ids");
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt >= context) {
    return Invalid(
        absl::StrFormat("the prompt has %d tokens; the model context is %d tokens, "
                        "leaving no room to generate",
                        prompt, context));
  }
  if (prompt + request.max_tokens() > context) {
    return Invalid(
        absl::StrFormat("prompt (%d tokens) + max_tokens (%d) exceeds the model "
                        "context of %d tokens",
                        prompt, request.max_tokens(), context));
  } else {
    r.max_tokens = static_cast<int32_t>(request.max_tokens());
  }
  if (absl::Status s = ValidateSampling(request.sampling(), &r.sampling); !s.ok()) return s;
  if (absl::Status s = ValidateStops(request); !s.ok()) return s;
  for (int32_t id : request.stop_token_ids()) {
    if (id < 0 || id >= vocab) {
      return Invalid(
          absl::StrFormat("stop token id %d is outside the vocabulary [0, %d)", id, vocab));
    }
    r.stop_token_ids.push_back(id);
  }
  absl::StatusOr<Priority> priority = ToPriority(request.priority());
  if (!priority.ok()) return priority.status();
  r.priority = *priority;
  r.ignore_eos = request.ignore_eos();
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return Invalid(absl::StrFormat("cache_salt has %d bytes; the limit is %d",
                                   request.cache_salt().size(), kMaxCacheSaltBytes));
  }
  r.cache_salt = request.cache_salt();
  if (request.n() > static_cast<uint32_t>(kMaxCompletions)) {
    return Invalid(absl::StrFormat("n must be in [1, %d], got %d", kMaxCompletions, request.n()));
  }
  r.n = std::max<int32_t>(1, static_cast<int32_t>(request.n()));
  if (request.request_id().size() > kMaxClientIdBytes) {
    return Invalid(absl::StrFormat("request_id has %d bytes; the limit is %d",
                                   request.request_id().size(), kMaxClientIdBytes));
  }
  return r;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* context,
                                         const v1::GenerateRequest* request,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return Serve(context, *request, absl::OkStatus(), writer);
}

grpc::Status GenerationService::GenerateBytes(grpc::ServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ServerWriter<v1::GenerateResponse>* writer) {
  v1::GenerateRequest decoded;
  absl::Status status = CheckRequestSize(request->Length(), limits_.max_request_bytes);
  if (status.ok()) status = DecodeRequest(Flatten(*request), limits_.max_request_bytes, &decoded);
  return Serve(context, decoded, status, writer);
}

grpc::Status GenerationService::Serve(grpc::ServerContext* context,
                                      const v1::GenerateRequest& request,
                                      const absl::Status& decoded,
                                      grpc::ServerWriter<v1::GenerateResponse>* writer) {
  {
    absl::MutexLock lock(&mu_);
    ++active_calls_;
  }
  const double start = engine_->Now();
  Outcome out;
  if (decoded.ok()) {
    Run(context, request, writer, &out);
  } else {
    out.status = ToGrpc(decoded);
  }
  Report(out, request.request_id(), engine_->Now() - start);
  absl::MutexLock lock(&mu_);
  --active_calls_;
  return out.status;
}

void GenerationService::Run(grpc::ServerContext* context, const v1::GenerateRequest& proto,
                            grpc::ServerWriter<v1::GenerateResponse>* writer, Outcome* out) {
  absl::StatusOr<NewRequest> r = Validate(proto);
  if (!r.ok()) {
    out->status = ToGrpc(r.status());
    return;
  }
  r->id = engine_->NextRequestIds(r->n);
  out->id = r->id;
  out->prompt_tokens = static_cast<int32_t>(r->prompt.size());
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const std::chrono::duration<double> left = deadline - std::chrono::system_clock::now();
    r->deadline = engine_->Now() + left.count();
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < r->n; ++i) streams.push_back(std::make_shared<RequestStream>());
  if (absl::Status s = engine_->SubmitCompletions(*r, streams); !s.ok()) {
    out->status = ToGrpc(s);
    return;
  }
  if (r->n == 1) {
    Stream(context, *r, proto, std::move(streams[0]), writer, out);
    return;
  }
  StreamCompletions(context, *r, proto, streams, writer, out);
}

void GenerationService::StreamCompletions(
    grpc::ServerContext* context, const NewRequest& request, const v1::GenerateRequest& proto,
    const std::vector<std::shared_ptr<RequestStream>>& streams,
    grpc::ServerWriter<v1::GenerateResponse>* writer, Outcome* out) {
  // One streaming loop per completion (its own detokenizer and stop strings), sharing the
  // writer under a lock; the call's status is the first failure, else OK.
  absl::Mutex write_mu;
  std::vector<Outcome> outs(streams.size());
  std::vector<std::thread> threads;
  auto run = [&](size_t i) {
    NewRequest completion = request;
    completion.id = request.id + i;
    Stream(context, completion, proto, streams[i], writer, &outs[i],
           {static_cast<int32_t>(i), &write_mu});
  };
  for (size_t i = 1; i < streams.size(); ++i) threads.emplace_back(run, i);
  run(0);
  for (std::thread& t : threads) t.join();
  const int32_t prompt_tokens = out->prompt_tokens;
  *out = outs[0];
  out->prompt_tokens = prompt_tokens;
  for (size_t i = 1; i < outs.size(); ++i) {
    out->sent_tokens += outs[i].sent_tokens;
    if (out->status.ok() && !outs[i].status.ok()) out->status = outs[i].status;
  }
}

void GenerationService::Stream(grpc::ServerContext* context, const NewRequest& request,
                               const v1::GenerateRequest& proto,
                               std::shared_ptr<RequestStream> stream,
                               grpc::ServerWriter<v1::GenerateResponse>* writer, Outcome* out,
                               CompletionSlot slot) {
  // Watched for cancellation from here until the handler returns.
  {
    absl::MutexLock lock(&mu_);
    streaming_[stream.get()] = {context, stream};
    if (aborting_.load()) stream->Wake();  // AbortAll ran before this call was watched
  }
  struct Unwatch {
    GenerationService* service;
    RequestStream* stream;
    ~Unwatch() {
      absl::MutexLock lock(&service->mu_);
      service->streaming_.erase(stream);
    }
  } unwatch{this, stream.get()};
  common::StreamingDetokenizer detok(model_->tokenizer);
  StopMatcher stops(std::vector<std::string>(proto.stop().begin(), proto.stop().end()));
  std::string matched_stop;  // set once a stop string matched; later tokens are dropped
  for (;;) {
    RequestStream::Update update = stream->Wait(kIdleWait);
    if (context->IsCancelled()) {
      const bool expired = context->deadline() <= std::chrono::system_clock::now();
      engine_->Finish(request.id, expired ? FinishReason::kDeadline : FinishReason::kCancelled,
                      expired ? "deadline exceeded" : "cancelled by the client");
      out->status = expired ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded")
                            : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      return;
    }
    if (!update.finished) {
      // A drain that ran out of time; a request whose end already arrived still gets it.
      if (std::optional<std::string> why = AbortMessage()) {
        engine_->Finish(request.id, FinishReason::kCancelled, *why);
        out->status = grpc::Status(grpc::StatusCode::UNAVAILABLE, *why);
        return;
      }
    }
    v1::GenerateResponse response;
    response.set_request_id(proto.request_id());
    response.set_index(static_cast<uint32_t>(slot.index));
    std::string text;
    for (int32_t t : update.tokens) {
      if (!matched_stop.empty()) break;
      response.add_token_ids(t);
      ++out->sent_tokens;
      StopMatcher::Result m = stops.Push(detok.Push(t));
      text += m.text;
      if (m.matched) {
        matched_stop = m.stop;
        engine_->Finish(request.id, FinishReason::kStopString, "");
      }
    }
    std::optional<Event> final;
    if (update.finished) {
      final = std::move(update.finished);
      if (matched_stop.empty()) {
        text += stops.Push(detok.Flush()).text + stops.Flush();
      } else {
        // The match wins even when the core finished for another reason in the same
        // iteration; tokens past the match were never sent.
        final->reason = FinishReason::kStopString;
        final->completion_tokens = out->sent_tokens;
      }
      FillFinished(*final, response.mutable_finished());
      response.mutable_finished()->set_matched_stop(matched_stop);
    }
    if (response.token_ids_size() == 0 && !final) continue;
    response.set_text(std::move(text));
    if (!Write(writer, response, slot.write_mu)) {
      engine_->Finish(request.id, FinishReason::kCancelled, "the client went away");
      out->status = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      return;
    }
    if (final) {
      out->status = FinalStatus(*final);
      out->finished = std::move(final);
      return;
    }
  }
}

bool GenerationService::Write(grpc::ServerWriter<v1::GenerateResponse>* writer,
                              const v1::GenerateResponse& response, absl::Mutex* write_mu) {
  if (write_mu == nullptr) return writer->Write(response);
  absl::MutexLock lock(write_mu);
  return writer->Write(response);
}

void GenerationService::Report(const Outcome& out, const std::string& client_id,
                               double handler_seconds) {
  const grpc::StatusCode code = out.status.error_code();
  if (metrics_ != nullptr) {
    if (out.status.ok()) {
      metrics_->OnRequestSucceeded(out.finished->reason);
    } else {
      metrics_->OnRequestFailed(static_cast<absl::StatusCode>(code));
    }
  }
  std::string line = absl::StrFormat("id=%s client_id=%s status=%s",
                                     out.id ? absl::StrCat(*out.id) : std::string("-"), client_id,
                                     absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
  if (out.finished) {
    const Event& e = *out.finished;
    const RequestTimings& t = e.timings;
    absl::StrAppendFormat(
        &line,
        " prompt=%d cached=%d completion=%d preemptions=%d finish=%s queue=%.3fs "
        "ttft=%.3fs e2e=%.3fs",
        e.prompt_tokens, e.cached_tokens, e.completion_tokens, e.preemptions,
        FinishReasonName(e.reason), t.first_scheduled >= 0 ? t.first_scheduled - t.arrival : 0,
        t.first_token >= 0 ? t.first_token - t.arrival : 0, t.finished - t.arrival);
  } else {
    absl::StrAppendFormat(&line, " prompt=%d completion=%d e2e=%.3fs", out.prompt_tokens,
                          out.sent_tokens, handler_seconds);
  }
  if (!out.status.ok()) absl::StrAppendFormat(&line, " error=\"%s\"", out.status.error_message());
  const bool server_fault = code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN;
  common::Logf(server_fault ? common::LogLevel::kWarning : common::LogLevel::kInfo, "request", "%s",
               line);
}

void GenerationService::AbortAll(const std::string& message) {
  absl::MutexLock lock(&mu_);
  abort_message_ = message;
  aborting_.store(true);
  for (const auto& [key, watched] : streaming_) watched.second->Wake();
}

std::optional<std::string> GenerationService::AbortMessage() {
  if (!aborting_.load()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  return abort_message_;
}

bool GenerationService::WaitNoActiveCalls(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_calls_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

grpc::Status GenerationService::TokenizeBytes(grpc::ServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              v1::TokenizeResponse* response) {
  v1::TokenizeRequest decoded;
  absl::Status status = CheckRequestSize(request->Length(), limits_.max_request_bytes);
  if (status.ok()) status = DecodeRequest(Flatten(*request), limits_.max_request_bytes, &decoded);
  if (!status.ok()) return ToGrpc(status);
  return Tokenize(context, &decoded, response);
}

grpc::Status GenerationService::Tokenize(grpc::ServerContext* context,
                                         const v1::TokenizeRequest* request,
                                         v1::TokenizeResponse* response) {
  if (!common::IsValidUtf8(request->text())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text is not valid UTF-8");
  }
  for (int32_t id : model_->tokenizer.Encode(request->text(), request->add_bos())) {
    response->add_token_ids(id);
    response->add_pieces(std::string(model_->tokenizer.Piece(id)));
  }
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetModelInfo(grpc::ServerContext* context,
                                             const v1::GetModelInfoRequest* request,
                                             v1::ModelInfo* response) {
  const common::ModelConfig& c = model_->config;
  response->set_name(c.name);
  response->set_architecture(c.architecture);
  response->set_fingerprint(model_->fingerprint);
  response->set_vocab_size(c.vocab_size);
  response->set_context_length(c.context_length);
  response->set_bos_token_id(model_->tokenizer.bos_id());
  response->set_eos_token_id(model_->tokenizer.eos_id());
  response->set_attached_workers(static_cast<uint32_t>(engine_->Status().workers.size()));
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetServerStatus(grpc::ServerContext* context,
                                                const v1::GetServerStatusRequest* request,
                                                v1::ServerStatus* response) {
  EngineStatus s = engine_->Status();
  response->set_requests_waiting(static_cast<uint32_t>(s.waiting));
  response->set_requests_running(static_cast<uint32_t>(s.running));
  response->set_requests_preempted(static_cast<uint32_t>(s.preempted));
  response->set_preemptions_total(static_cast<uint64_t>(s.preemptions_total));
  response->set_prefix_cache_queried_tokens(static_cast<uint64_t>(s.prefix_cache_queried_tokens));
  response->set_prefix_cache_hit_tokens(static_cast<uint64_t>(s.prefix_cache_hit_tokens));
  for (const WorkerStatus& w : s.workers) {
    auto* out = response->add_workers();
    out->set_worker_id(w.id);
    out->set_name(w.name);
    out->set_page_size(w.info.page_size);
    out->set_kv_pages_total(w.info.num_pages);
    out->set_kv_pages_free(w.free_pages);
    out->set_kv_pages_cached(w.cached_pages);
  }
  return grpc::Status::OK;
}

}  // namespace pagoda::scheduler
