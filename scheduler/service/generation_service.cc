#include "scheduler/service/generation_service.h"

#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/race_annotations.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "scheduler/metrics/metrics.h"
#include "scheduler/service/generate_call.h"
#include "scheduler/service/request_decoder.h"
#include "scheduler/service/tenants.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

constexpr size_t kMaxClientIdBytes = 256;
constexpr size_t kMaxCacheSaltBytes = 256;
constexpr float kMaxTemperature = 100.0f;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;
// Sampling limits (OpenAI's where it has them; documented in generation.proto).
constexpr float kMaxPenalty = 2.0f;             // presence_penalty, frequency_penalty
constexpr float kMaxRepetitionPenalty = 10.0f;  // repetition_penalty
constexpr int kMaxLogitBias = 300;              // logit_bias entries
constexpr float kMaxLogitBiasValue = 100.0f;    // |bias|
constexpr int kMaxTopLogprobs = 20;             // top_logprobs
// pagoda.v1.Generation's methods, as in generation.proto.
constexpr char kGenerateMethod[] = "/pagoda.v1.Generation/Generate";
constexpr char kTokenizeMethod[] = "/pagoda.v1.Generation/Tokenize";
constexpr char kGetModelInfoMethod[] = "/pagoda.v1.Generation/GetModelInfo";
constexpr char kGetServerStatusMethod[] = "/pagoda.v1.Generation/GetServerStatus";

// A unary callback method: `answer` fills the response and returns the status, inline.
template <class Request, class Response>
grpc::internal::MethodHandler* UnaryHandler(
    std::function<grpc::Status(const Request&, Response*)> answer) {
  return new grpc::internal::CallbackUnaryHandler<Request, Response>(
      [answer = std::move(answer)](grpc::CallbackServerContext* context, const Request* request,
                                   Response* response) {
        grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
        reactor->Finish(answer(*request, response));
        return reactor;
      });
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

// A float field in [lo, hi], finite: INVALID_ARGUMENT naming the field and the range.
absl::Status CheckRange(const char* field, float value, float lo, float hi) {
  if (std::isfinite(value) && value >= lo && value <= hi) return absl::OkStatus();
  return Invalid(absl::StrFormat("%s must be in [%g, %g], got %g", field, lo, hi, value));
}

absl::Status ValidateLogitBias(const v1::SamplingParams& p, int32_t vocab, SamplingParams* out) {
  if (p.logit_bias_size() > kMaxLogitBias) {
    return Invalid(absl::StrFormat("logit_bias has %d entries; the limit is %d",
                                   p.logit_bias_size(), kMaxLogitBias));
  }
  for (const auto& [token, bias] : p.logit_bias()) {
    if (token < 0 || token >= vocab) {
      return Invalid(absl::StrFormat("logit_bias token id %d is outside the vocabulary [0, %d)",
                                     token, vocab));
    }
    if (!std::isfinite(bias) || bias < -kMaxLogitBiasValue || bias > kMaxLogitBiasValue) {
      return Invalid(absl::StrFormat("logit_bias for token %d must be in [%g, %g], got %g", token,
                                     -kMaxLogitBiasValue, kMaxLogitBiasValue, bias));
    }
    out->logit_bias.emplace_back(token, bias);
  }
  std::sort(out->logit_bias.begin(), out->logit_bias.end());  // map order is unspecified
  return absl::OkStatus();
}

absl::Status ValidateSampling(const v1::GenerateRequest& request, int32_t vocab,
                              SamplingParams* out) {
  const v1::SamplingParams& p = request.sampling();
  if (!std::isfinite(p.temperature()) || p.temperature() < 0 || p.temperature() > kMaxTemperature) {
    return Invalid(absl::StrFormat("temperature must be in [0, %g], got %g", kMaxTemperature,
                                   p.temperature()));
  }
  if (p.top_k() < 0) return Invalid(absl::StrFormat("top_k must be >= 0, got %d", p.top_k()));
  if (!std::isfinite(p.top_p()) || p.top_p() < 0 || p.top_p() > 1) {
    return Invalid(absl::StrFormat("top_p must be in [0, 1], got %g", p.top_p()));
  }
  RETURN_IF_ERROR(CheckRange("min_p", p.min_p(), 0, 1));
  RETURN_IF_ERROR(CheckRange("presence_penalty", p.presence_penalty(), -kMaxPenalty, kMaxPenalty));
  RETURN_IF_ERROR(
      CheckRange("frequency_penalty", p.frequency_penalty(), -kMaxPenalty, kMaxPenalty));
  if (!std::isfinite(p.repetition_penalty()) || p.repetition_penalty() < 0 ||
      p.repetition_penalty() > kMaxRepetitionPenalty) {
    return Invalid(absl::StrFormat("repetition_penalty must be 0 (off) or in (0, %g], got %g",
                                   kMaxRepetitionPenalty, p.repetition_penalty()));
  }
  RETURN_IF_ERROR(ValidateLogitBias(p, vocab, out));
  if (request.top_logprobs() > static_cast<uint32_t>(kMaxTopLogprobs)) {
    return Invalid(absl::StrFormat("top_logprobs must be in [0, %d], got %d", kMaxTopLogprobs,
                                   request.top_logprobs()));
  }
  if (request.top_logprobs() > 0 && !request.logprobs()) {
    return Invalid("top_logprobs needs logprobs = true");
  }
  out->temperature = p.temperature();
  out->top_k = p.top_k();
  out->top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  out->seed = p.seed();
  out->min_p = p.min_p();
  out->presence_penalty = p.presence_penalty();
  out->frequency_penalty = p.frequency_penalty();
  out->repetition_penalty = p.repetition_penalty() == 0 ? 1.0f : p.repetition_penalty();
  out->logprobs = request.logprobs();
  out->top_logprobs = static_cast<int32_t>(request.top_logprobs());
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

}  // namespace

std::optional<int64_t> RetryAfterSeconds(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return std::nullopt;
  const std::string_view url = kRetryAfterPayload;
  const auto payload = status.GetPayload(absl::string_view(url.data(), url.size()));
  int64_t seconds = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &seconds) || seconds < 1) {
    return std::nullopt;
  }
  return seconds;
}

GenerationService::GenerationService(Engine* engine, const ServedModel* model,
                                     SchedulerMetrics* metrics, GenerationLimits limits)
    : engine_(engine),
      model_(model),
      metrics_(metrics),
      limits_(limits),
      constraints_(limits_.constraints) {
  for (int32_t id = 0; id < model_->tokenizer.vocab_size(); ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, model_->tokenizer.TokenBytes(id).size());
  }
  // Registered as the generated CallbackService would, except that Generate and Tokenize take
  // their requests as bytes.
  const std::pair<const char*, grpc::internal::RpcMethod::RpcType> methods[] = {
      {kGenerateMethod, grpc::internal::RpcMethod::SERVER_STREAMING},
      {kTokenizeMethod, grpc::internal::RpcMethod::NORMAL_RPC},
      {kGetModelInfoMethod, grpc::internal::RpcMethod::NORMAL_RPC},
      {kGetServerStatusMethod, grpc::internal::RpcMethod::NORMAL_RPC}};
  for (const auto& [name, type] : methods) {
    AddMethod(new grpc::internal::RpcServiceMethod(name, type, nullptr));
  }
  MarkMethodCallback(
      0, new grpc::internal::CallbackServerStreamingHandler<grpc::ByteBuffer, v1::GenerateResponse>(
             [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
               return Generate(context, request);
             }));
  MarkMethodCallback(1, UnaryHandler<grpc::ByteBuffer, v1::TokenizeResponse>(
                            [this](const grpc::ByteBuffer& request, v1::TokenizeResponse* out) {
                              return Tokenize(request, out);
                            }));
  MarkMethodCallback(2, UnaryHandler<v1::GetModelInfoRequest, v1::ModelInfo>(
                            [this](const v1::GetModelInfoRequest&, v1::ModelInfo* out) {
                              return GetModelInfo(out);
                            }));
  MarkMethodCallback(3, UnaryHandler<v1::GetServerStatusRequest, v1::ServerStatus>(
                            [this](const v1::GetServerStatusRequest&, v1::ServerStatus* out) {
                              return GetServerStatus(out);
                            }));
}

GenerationService::~GenerationService() = default;

absl::StatusOr<NewRequest> GenerationService::Validate(const v1::GenerateRequest& request) const {
  const text::Tokenizer& tok = model_->tokenizer;
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
  if (absl::Status s = ValidateSampling(request, vocab, &r.sampling); !s.ok()) return s;
  if (absl::Status s = ValidateStops(request); !s.ok()) return s;
  for (int32_t id : request.stop_token_ids()) {
    if (id < 0 || id >= vocab) {
      return Invalid(
          absl::StrFormat("stop token id %d is outside the vocabulary [0, %d)", id, vocab));
    }
    r.stop_token_ids.push_back(id);
  }
  if (request.has_constraint()) {
    if (request.ignore_eos()) {
      return Invalid(
          "a constraint cannot be combined with ignore_eos: a constrained text ends "
          "where the constraint is complete");
    }
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> gbnf,
                     constraints_.Compile(request.constraint()));
    auto constraint = std::make_shared<Constraint>();
    constraint->grammar = *gbnf;
    constraint->end_token_ids = tok.EndOfGenerationIds();
    for (int32_t id : r.stop_token_ids) {
      if (std::find(constraint->end_token_ids.begin(), constraint->end_token_ids.end(), id) ==
          constraint->end_token_ids.end()) {
        constraint->end_token_ids.push_back(id);
      }
    }
    if (constraint->end_token_ids.empty()) {
      return Invalid(
          "a constraint needs a token that ends the text, and this model has no EOS: "
          "set stop_token_ids");
    }
    r.sampling.constraint = std::move(constraint);
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
  if (!request.tenant().empty()) {
    RETURN_IF_ERROR(CheckTenantName(request.tenant(), "tenant"));
    r.tenant = request.tenant();
  }
  return r;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  v1::GenerateRequest decoded;
  absl::Status status = CheckRequestSize(request->Length(), limits_.max_request_bytes);
  if (status.ok()) status = DecodeRequest(Flatten(*request), limits_.max_request_bytes, &decoded);
  GenerateCall* call = GenerateCall::Start(this, context, decoded, status);
  common::HandOff(call);  // its reactions run on other threads (race_annotations.h)
  return call;
}

void GenerationService::CallStarted(std::shared_ptr<GenerateCall> call) {
  absl::MutexLock lock(&mu_);
  GenerateCall* key = call.get();
  calls_.emplace(key, std::move(call));
}

void GenerationService::CallEnded(GenerateCall* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

void GenerationService::Report(const GenerateOutcome& out, const std::string& client_id,
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
  std::vector<std::shared_ptr<GenerateCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    abort_message_ = message;
    aborting_.store(true);
    for (const auto& [key, call] : calls_) calls.push_back(call);
  }
  for (const std::shared_ptr<GenerateCall>& call : calls) call->Abort(message);
}

std::optional<std::string> GenerationService::AbortMessage() {
  if (!aborting_.load()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  return abort_message_;
}

bool GenerationService::WaitNoActiveCalls(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

grpc::Status GenerationService::Tokenize(const grpc::ByteBuffer& request,
                                         v1::TokenizeResponse* response) {
  v1::TokenizeRequest decoded;
  absl::Status status = CheckRequestSize(request.Length(), limits_.max_request_bytes);
  if (status.ok()) status = DecodeRequest(Flatten(request), limits_.max_request_bytes, &decoded);
  if (!status.ok()) return ToGrpcStatus(status);
  if (!common::IsValidUtf8(decoded.text())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text is not valid UTF-8");
  }
  for (int32_t id : model_->tokenizer.Encode(decoded.text(), decoded.add_bos())) {
    response->add_token_ids(id);
    response->add_pieces(std::string(model_->tokenizer.Piece(id)));
  }
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetModelInfo(v1::ModelInfo* response) {
  const common::ModelConfig& c = model_->config;
  response->set_name(c.name);
  response->set_architecture(c.architecture);
  response->set_fingerprint(model_->fingerprint);
  response->set_vocab_size(c.vocab_size);
  response->set_context_length(c.context_length);
  FillTokenizerInfo(model_->tokenizer, response);
  response->set_attached_workers(static_cast<uint32_t>(engine_->Status().workers.size()));
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetServerStatus(v1::ServerStatus* response) {
  EngineStatus s = engine_->Status();
  response->set_requests_waiting(static_cast<uint32_t>(s.waiting));
  response->set_requests_running(static_cast<uint32_t>(s.running));
  response->set_requests_preempted(static_cast<uint32_t>(s.preempted));
  response->set_preemptions_total(static_cast<uint64_t>(s.preemptions_total));
  response->set_preemptions_swap(static_cast<uint64_t>(s.preemptions_swap));
  response->set_swapped_out_pages(static_cast<uint64_t>(s.swapped_out_pages));
  response->set_swapped_in_pages(static_cast<uint64_t>(s.swapped_in_pages));
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
