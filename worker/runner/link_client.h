// LinkClient: the worker's end of pagoda.worker.v1.WorkerLink/Attach.
//
// Dials the scheduler, registers, then executes plans in order and answers each with a result.
// While the scheduler is unreachable, or after the stream breaks, it retries with backoff and
// starts over with no sequence state (the scheduler re-sends everything on first sight). A
// refusal (fingerprint mismatch, bad registration, wrong link token) is final: Run() returns
// the error. When the scheduler asks for heartbeats (Accepted.heartbeat_interval_ms), the
// thread that writes the results sends them too, apart from the one that executes the plans, so
// a long step never looks like a dead worker.
//
// Security: the channel uses LinkClientOptions::credentials (TLS, with a client certificate
// for a scheduler that requires one); a failed handshake looks like an unreachable scheduler
// (retried), and is logged as a warning each time its error changes.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/runner/runner.h"

namespace grpc {
class ChannelCredentials;
class ClientContext;
template <class W, class R>
class ClientReaderWriterInterface;
}  // namespace grpc

namespace pagoda::worker::v1 {
class SchedulerMessage;
class WorkerMessage;
}  // namespace pagoda::worker::v1

namespace pagoda::worker {

struct LinkClientOptions {
  std::string scheduler_address;  // host:port
  std::string worker_name;        // for the scheduler's logs
  std::string model_fingerprint;
  std::string backend_name;
  int32_t max_batch_tokens = 2048;
  std::string link_token;  // sent as metadata when not empty
  // The link channel's credentials (common::MakeChannelCredentials); null = plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

class LinkClient {
 public:
  LinkClient(LinkClientOptions options, Runner* runner);

  // Serves until Stop() (returns OK) or a final refusal (returns its status).
  absl::Status Run();
  // Thread-safe; makes Run() return soon.
  void Stop();

 private:
  // One attach: returns OK when the stream ended (retry), or the refusal.
  absl::Status AttachOnce(bool* attached);
  // Serves an accepted stream until it ends: reads plans, executes them, writes the results
  // and, every `heartbeat_ms` (0: never), a heartbeat.
  void ServeAttached(
      grpc::ClientReaderWriterInterface<v1::WorkerMessage, v1::SchedulerMessage>& stream,
      grpc::ClientContext& context, uint32_t heartbeat_ms);

  const LinkClientOptions options_;
  Runner* runner_;
  std::string last_error_;  // of the last failed attach; only Run()'s thread touches it
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace pagoda::worker
