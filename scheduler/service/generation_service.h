// GenerationService: the public pagoda.v1.Generation API.
//
// Generate validates and tokenizes on the handler thread, submits to the Engine, then streams
// what the engine pushes into the request's RequestStream, detokenizing incrementally. A client
// that cancels or disconnects is noticed within 20 ms and its request cancelled: gRPC's sync
// API tells nobody, so one watcher thread polls every streaming call's IsCancelled() and wakes
// the handler of a cancelled one (1,000 handlers polling on their own cost more CPU than the
// serving). Handlers otherwise sleep until the engine pushes something.
// Errors become gRPC statuses here and only here.
//
// Requests arrive as raw bytes (GenerateBytes, TokenizeBytes: the methods gRPC calls) and are
// decoded by DecodeRequest, so an oversized request (--max-request-bytes), ill-formed UTF-8 in
// a string field or unparsable bytes get INVALID_ARGUMENT naming the limit or the field instead
// of gRPC's RESOURCE_EXHAUSTED or INTERNAL. The typed Generate and Tokenize serve in-process
// callers (tests) and share everything after decoding.
//
// Every Generate call ends with one log line (id, status code, tokens, timings, finish reason)
// and one count in SchedulerMetrics: success by finish reason, failure by gRPC code.
//
// Drain support: the service counts the Generate calls in progress (WaitNoActiveCalls), and
// AbortAll() ends the ones still streaming with UNAVAILABLE once a drain has run out of time.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/served_model.h"

namespace pagoda::scheduler {

class SchedulerMetrics;

struct GenerationLimits {
  // The largest serialized Generate or Tokenize request served (--max-request-bytes). The
  // server's gRPC receive limit must be above it, or gRPC refuses first (RESOURCE_EXHAUSTED).
  size_t max_request_bytes = size_t{4} << 20;
};

// A grpc::Service registering pagoda.v1.Generation's four methods itself (the generated
// Service base would register typed Generate and Tokenize handlers that parse before we can).
// Which completion of a request a streaming loop serves (n > 1), and the lock its writes share.
struct CompletionSlot {
  int32_t index = 0;
  absl::Mutex* write_mu = nullptr;  // null: the only writer
};

class GenerationService final : public grpc::Service {
 public:
  // `metrics` may be null; otherwise it must outlive the service.
  GenerationService(Engine* engine, const ServedModel* model, SchedulerMetrics* metrics = nullptr,
                    GenerationLimits limits = {});
  ~GenerationService() override;

  // What gRPC calls: the request as received, decoded here.
  grpc::Status GenerateBytes(grpc::ServerContext* context, const grpc::ByteBuffer* request,
                             grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer);
  grpc::Status TokenizeBytes(grpc::ServerContext* context, const grpc::ByteBuffer* request,
                             pagoda::v1::TokenizeResponse* response);

  grpc::Status Generate(grpc::ServerContext* context, const pagoda::v1::GenerateRequest* request,
                        grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer);
  grpc::Status Tokenize(grpc::ServerContext* context, const pagoda::v1::TokenizeRequest* request,
                        pagoda::v1::TokenizeResponse* response);
  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const pagoda::v1::GetModelInfoRequest* request,
                            pagoda::v1::ModelInfo* response);
  grpc::Status GetServerStatus(grpc::ServerContext* context,
                               const pagoda::v1::GetServerStatusRequest* request,
                               pagoda::v1::ServerStatus* response);

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

  // One Generate call from start to end; `decoded` is the decoding's verdict on `request`.
  grpc::Status Serve(grpc::ServerContext* context, const pagoda::v1::GenerateRequest& request,
                     const absl::Status& decoded,
                     grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer);
  void Run(grpc::ServerContext* context, const pagoda::v1::GenerateRequest& proto,
           grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer, Outcome* out);
  void Stream(grpc::ServerContext* context, const NewRequest& request,
              const pagoda::v1::GenerateRequest& proto, std::shared_ptr<RequestStream> stream,
              grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer, Outcome* out,
              CompletionSlot slot = CompletionSlot());
  // n > 1: streams every completion (ids request.id + i) on its own thread.
  void StreamCompletions(grpc::ServerContext* context, const NewRequest& request,
                         const pagoda::v1::GenerateRequest& proto,
                         const std::vector<std::shared_ptr<RequestStream>>& streams,
                         grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer, Outcome* out);
  static bool Write(grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer,
                    const pagoda::v1::GenerateResponse& response, absl::Mutex* write_mu);
  // Writes the completion line and counts the outcome.
  void Report(const Outcome& out, const std::string& client_id, double handler_seconds);
  std::optional<std::string> AbortMessage();
  // The watcher thread's loop: wakes the stream of every cancelled call, until stopping_.
  void WatchCancellations();

  Engine* engine_;
  const ServedModel* model_;
  SchedulerMetrics* const metrics_;
  const GenerationLimits limits_;
  // The most text bytes one token stands for: a prompt text longer than the context times this
  // cannot fit, and is refused before it is tokenized.
  size_t max_token_bytes_ = 1;
  std::atomic<bool> aborting_{false};
  absl::Mutex mu_;
  std::string abort_message_ ABSL_GUARDED_BY(mu_);
  int active_calls_ ABSL_GUARDED_BY(mu_) = 0;
  // The streams handlers wait on now (n per call), each with its call.
  absl::flat_hash_map<RequestStream*,
                      std::pair<grpc::ServerContext*, std::shared_ptr<RequestStream>>>
      streaming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;  // last: started once everything it reads exists
};

}  // namespace pagoda::scheduler
