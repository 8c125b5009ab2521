// GenerationService: the public pagoda.v1.Generation API, on gRPC's callback API.
//
// No thread per stream and no polling: each Generate call is a GenerateCall reactor
// (generate_call.h) that validates and tokenizes on the thread gRPC starts it on, submits to
// the Engine as the sink of the request's n completions, and streams what the engine delivers
// (one reactor per call whatever n is); the client's cancellation or disconnection reaches it
// through the reactor's OnCancel. The unary methods
// (Tokenize, GetModelInfo, GetServerStatus) answer inline on gRPC's callback threads.
// Errors become gRPC statuses here (and in GenerateCall) and only here.
//
// Requests arrive as raw bytes (the methods are registered with ByteBuffer requests) and are
// decoded by DecodeRequest, so an oversized request (--max-request-bytes), ill-formed UTF-8 in
// a string field or unparsable bytes get INVALID_ARGUMENT naming the limit or the field instead
// of gRPC's RESOURCE_EXHAUSTED or INTERNAL.
//
// A Generate refused by predicted-wait admission (--max-predicted-wait-s) ends with the core's
// RESOURCE_EXHAUSTED and the trailing metadata entry retry-after-s (kRetryAfterTrailer); the
// tenant (GenerateRequest.tenant) is checked by Validate (tenants.h).
//
// Every Generate call ends with one log line (id, status code, tokens, timings, finish reason)
// and one count in SchedulerMetrics: success by finish reason, failure by gRPC code.
//
// Drain support: the service tracks the Generate calls in progress (WaitNoActiveCalls), and
// AbortAll() ends the ones still streaming with UNAVAILABLE once a drain has run out of time.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/engine/engine.h"
#include "scheduler/service/constraint_compiler.h"
#include "scheduler/service/served_model.h"

namespace pagoda::scheduler {

class SchedulerMetrics;
class GenerateCall;

struct GenerationLimits {
  // The largest serialized Generate or Tokenize request served (--max-request-bytes). The
  // server's gRPC receive limit must be above it, or gRPC refuses first (RESOURCE_EXHAUSTED).
  size_t max_request_bytes = size_t{4} << 20;
  // Structured outputs: compile budget, cache and limits (--constraint-*).
  ConstraintOptions constraints;
};

// How one Generate call ended, for its log line and metrics.
struct GenerateOutcome {
  grpc::Status status;
  std::optional<RequestId> id;  // unset when the request was never submitted
  int32_t prompt_tokens = 0;
  int32_t sent_tokens = 0;
  std::optional<Event> finished;  // the core's final event, when the stream sent it
};

// absl and gRPC share the canonical code numbering.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Trailing metadata of a Generate call refused by predicted-wait admission: whole seconds (>= 1)
// after which the same request would likely be admitted (HTTP: the Retry-After header).
inline constexpr char kRetryAfterTrailer[] = "retry-after-s";

// The seconds of a predicted-wait refusal: a RESOURCE_EXHAUSTED carrying the core's
// kRetryAfterPayload (ASCII digits, >= 1); nullopt for any other status (a full queue, say).
std::optional<int64_t> RetryAfterSeconds(const absl::Status& status);

// A grpc::Service registering pagoda.v1.Generation's four methods itself, as callback methods
// (the generated CallbackService would parse Generate and Tokenize requests before we can).
class GenerationService final : public grpc::Service {
 public:
  // `metrics` may be null; otherwise it must outlive the service.
  GenerationService(Engine* engine, const ServedModel* model, SchedulerMetrics* metrics = nullptr,
                    GenerationLimits limits = {});
  ~GenerationService() override;

  // Turns a public request into the core's NewRequest: tokenizes, checks every field.
  absl::StatusOr<NewRequest> Validate(const pagoda::v1::GenerateRequest& request) const;

  // Ends every request still streaming (now and later) with UNAVAILABLE and `message`, and
  // cancels it in the engine. Used when a drain runs out of time.
  void AbortAll(const std::string& message);
  // Waits until no Generate call is in progress, or until `deadline`; true when none is.
  bool WaitNoActiveCalls(absl::Time deadline);

  // The JSON Schema translation limits of the server's constraints, for the HTTP front end's
  // tool grammars, which must match what response_format gets.
  const grammar::SchemaOptions& schema_options() const { return constraints_.options().schema; }

  // A call's end: one log line and one metrics count. Also used by the HTTP front end, so that
  // both APIs log and count alike.
  void Report(const GenerateOutcome& out, const std::string& client_id, double handler_seconds);

 private:
  friend class GenerateCall;

  grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request);
  grpc::Status Tokenize(const grpc::ByteBuffer& request, pagoda::v1::TokenizeResponse* response);
  grpc::Status GetModelInfo(pagoda::v1::ModelInfo* response);
  grpc::Status GetServerStatus(pagoda::v1::ServerStatus* response);

  // GenerateCall's hooks: a call starts and ends (OnDone).
  void CallStarted(std::shared_ptr<GenerateCall> call);
  void CallEnded(GenerateCall* call);
  std::optional<std::string> AbortMessage();

  Engine* engine_;
  const ServedModel* model_;
  SchedulerMetrics* const metrics_;
  const GenerationLimits limits_;
  // The most text bytes one token stands for: a prompt text longer than the context times this
  // cannot fit, and is refused before it is tokenized.
  size_t max_token_bytes_ = 1;
  // Validate is const; the compiler's cache synchronizes itself.
  mutable ConstraintCompiler constraints_;
  std::atomic<bool> aborting_{false};
  absl::Mutex mu_;
  std::string abort_message_ ABSL_GUARDED_BY(mu_);
  // Every Generate call from its start to its OnDone.
  absl::flat_hash_map<GenerateCall*, std::shared_ptr<GenerateCall>> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler
