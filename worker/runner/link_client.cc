#include "worker/runner/link_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/link_token.h"
#include "common/log.h"
#include "pagoda/worker/v1/worker_link.grpc.pb.h"

namespace pagoda::worker {
namespace {

namespace wv1 = pagoda::worker::v1;

bool IsRefusal(grpc::StatusCode code) {
  return code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::UNAUTHENTICATED ||
         code == grpc::StatusCode::PERMISSION_DENIED;
}

}  // namespace

LinkClient::LinkClient(LinkClientOptions options, Runner* runner)
    : options_(std::move(options)), runner_(runner) {}

void LinkClient::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

absl::Status LinkClient::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    bool attached = false;
    absl::Status status = AttachOnce(&attached);
    if (!status.ok()) return status;
    if (attached) backoff = absl::Milliseconds(100);
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff)) return absl::OkStatus();
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

absl::Status LinkClient::AttachOnce(bool* attached) {
  auto channel = grpc::CreateChannel(
      options_.scheduler_address,
      options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials());
  auto stub = wv1::WorkerLink::NewStub(channel);
  grpc::ClientContext context;
  if (!options_.link_token.empty()) {
    context.AddMetadata(common::kLinkTokenMetadataKey, options_.link_token);
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::OkStatus();
    context_ = &context;
  }
  auto stream = stub->Attach(&context);
  wv1::WorkerMessage hello;
  auto* reg = hello.mutable_register_();
  reg->set_worker_name(options_.worker_name);
  reg->set_model_fingerprint(options_.model_fingerprint);
  reg->set_page_size(runner_->backend().page_size());
  reg->set_num_pages(runner_->backend().num_pages());
  reg->set_max_batch_tokens(options_.max_batch_tokens);
  reg->set_backend(options_.backend_name);
  reg->set_num_swap_pages(static_cast<uint32_t>(runner_->backend().num_swap_pages()));
  reg->set_swap_seconds_per_page(runner_->swap_seconds_per_page());
  runner_->Reset();
  wv1::SchedulerMessage msg;
  if (stream->Write(hello) && stream->Read(&msg) && msg.has_accepted()) {
    *attached = true;
    PAGODA_LOG(kInfo, "worker", "attached to %s as worker %d", options_.scheduler_address,
               msg.accepted().worker_id());
    runner_->SetVocabulary(msg.accepted().vocabulary());
    // gRPC allows one write at a time on a stream: results and heartbeats share a lock.
    absl::Mutex write_mu;
    auto write = [&](const wv1::WorkerMessage& m) {
      absl::MutexLock lock(&write_mu);
      return stream->Write(m);
    };
    absl::Notification stop_heartbeats;
    std::thread heartbeats;
    if (const uint32_t ms = msg.accepted().heartbeat_interval_ms(); ms > 0) {
      heartbeats = std::thread([&, ms] {
        wv1::WorkerMessage beat;
        beat.mutable_heartbeat();
        while (!stop_heartbeats.WaitForNotificationWithTimeout(absl::Milliseconds(ms))) {
          if (!write(beat)) return;
        }
      });
    }
    while (stream->Read(&msg)) {
      if (!msg.has_plan()) continue;
      wv1::WorkerMessage out;
      *out.mutable_result() = runner_->Execute(msg.plan());
      if (!out.result().error().empty()) {
        PAGODA_LOG(kError, "worker", "plan %d failed: %s", msg.plan().iteration(),
                   out.result().error());
      }
      if (!write(out)) break;
    }
    stop_heartbeats.Notify();
    if (heartbeats.joinable()) heartbeats.join();
    // The link is over (the scheduler cut it, or a write failed). Cancel our end before
    // Finish: after the process was paused (SIGSTOP), Finish was seen waiting forever for a
    // status the scheduler had already sent, and the worker never reconnected. A refusal
    // comes before Accepted, so its status is still read in full below.
    context.TryCancel();
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (stopping_) return absl::OkStatus();
  }
  if (IsRefusal(status.error_code())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the scheduler at %s refused this worker: %s", options_.scheduler_address,
                        status.error_message()));
  }
  // A link that was up, or an error other than the previous try's (a scheduler not up yet, a
  // TLS handshake that fails), is worth a warning; the same error again is routine (debug).
  const bool news = *attached || status.error_message() != last_error_;
  last_error_ = *attached ? "" : status.error_message();
  common::Logf(news ? common::LogLevel::kWarning : common::LogLevel::kDebug, "worker",
               "link to %s ended (%s: %s); retrying", options_.scheduler_address,
               absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
               status.error_message());
  return absl::OkStatus();
}

}  // namespace pagoda::worker
