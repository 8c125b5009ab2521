// GenerationService: the public pagoda.v1.Generation API.
//
// Generate validates and tokenizes on the handler thread, submits to the Engine, then streams
// what the engine pushes into the request's RequestStream, detokenizing incrementally. A client
// that cancels or disconnects is noticed within one poll interval and its request cancelled.
// Errors become gRPC statuses here and only here.
//
// Every Generate call ends with one log line (id, status code, tokens, timings, finish reason)
// and one count in SchedulerMetrics: success by finish reason, failure by gRPC code.
//
// Drain support: the service counts the Generate calls in progress (WaitNoActiveCalls), and
// AbortAll() ends the ones still streaming with UNAVAILABLE once a drain has run out of time.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/served_model.h"

namespace pagoda::scheduler {

class SchedulerMetrics;

class GenerationService final : public pagoda::v1::Generation::Service {
 public:
  // `metrics` may be null; otherwise it must outlive the service.
  GenerationService(Engine* engine, const ServedModel* model, SchedulerMetrics* metrics = nullptr);

  grpc::Status Generate(grpc::ServerContext* context, const pagoda::v1::GenerateRequest* request,
                        grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const pagoda::v1::TokenizeRequest* request,
                        pagoda::v1::TokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const pagoda::v1::GetModelInfoRequest* request,
                            pagoda::v1::ModelInfo* response) override;
  grpc::Status GetServerStatus(grpc::ServerContext* context,
                               const pagoda::v1::GetServerStatusRequest* request,
                               pagoda::v1::ServerStatus* response) override;

  // Turns a public request into the core's NewRequest: tokenizes, checks every field.
  absl::StatusOr<NewRequest> Validate(const pagoda::v1::GenerateRequest& request) const;

  // Ends every request still streaming (now and later) with UNAVAILABLE and `message`, and
  // cancels it in the engine. Used when a drain runs out of time.
  void AbortAll(const std::string& message);
  // Waits until no Generate call is in progress, or until `deadline`; true when none is.
  bool WaitNoActiveCalls(absl::Time deadline);

 private:
  // How one Generate call ended, for its log line and metrics.
  struct Outcome {
    grpc::Status status;
    std::optional<RequestId> id;  // unset when the request was never submitted
    int32_t prompt_tokens = 0;
    int32_t sent_tokens = 0;
    std::optional<Event> finished;  // the core's final event, when the stream got it
  };

  void Run(grpc::ServerContext* context, const pagoda::v1::GenerateRequest& proto,
           grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer, Outcome* out);
  void Stream(grpc::ServerContext* context, const NewRequest& request,
              const pagoda::v1::GenerateRequest& proto, std::shared_ptr<RequestStream> stream,
              grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer, Outcome* out);
  // Writes the completion line and counts the outcome.
  void Report(const Outcome& out, const std::string& client_id, double handler_seconds);
  std::optional<std::string> AbortMessage();

  Engine* engine_;
  const ServedModel* model_;
  SchedulerMetrics* const metrics_;
  std::atomic<bool> aborting_{false};
  absl::Mutex mu_;
  std::string abort_message_ ABSL_GUARDED_BY(mu_);
  int active_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pagoda::scheduler
