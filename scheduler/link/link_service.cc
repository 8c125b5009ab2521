#include "scheduler/link/link_service.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/link_token.h"
#include "common/log.h"
#include "scheduler/link/plan_codec.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = pagoda::worker::v1;
using Stream = grpc::ServerReaderWriter<wv1::SchedulerMessage, wv1::WorkerMessage>;

class StreamChannel final : public WorkerChannel {
 public:
  explicit StreamChannel(Stream* stream) : stream_(stream) {}

  bool SendPlan(const Plan& plan) override {
    wv1::SchedulerMessage msg;
    EncodePlan(plan, msg.mutable_plan());
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr) return false;
    return stream_->Write(msg);
  }

  bool SendAccepted(WorkerId id, absl::Duration heartbeat_interval) {
    wv1::SchedulerMessage msg;
    msg.mutable_accepted()->set_worker_id(id);
    msg.mutable_accepted()->set_heartbeat_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_interval)));
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(msg);
  }

  // After Close() no write touches the stream (the handler is about to return).
  void Close() {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_);
};

// Cancels a link that stays silent for `timeout`; Touch() on every message from the worker.
class Watchdog {
 public:
  Watchdog(grpc::ServerContext* context, absl::Duration timeout, std::string what)
      : timeout_(timeout) {
    if (timeout <= absl::ZeroDuration()) return;
    Touch();
    thread_ = std::thread([this, context, what = std::move(what)] {
      const absl::Duration tick = std::min(timeout_ / 4, absl::Milliseconds(100));
      while (!done_.WaitForNotificationWithTimeout(tick)) {
        const absl::Duration silent =
            absl::Now() - absl::FromUnixNanos(last_seen_ns_.load(std::memory_order_relaxed));
        if (silent < timeout_) continue;
        PAGODA_LOG(kWarning, "link",
                   "%s silent for %.1f s (--worker-timeout %.1f s): cutting "
                   "the link",
                   what, absl::ToDoubleSeconds(silent), absl::ToDoubleSeconds(timeout_));
        context->TryCancel();
        return;
      }
    });
  }
  ~Watchdog() {
    done_.Notify();
    if (thread_.joinable()) thread_.join();
  }
  void Touch() { last_seen_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed); }

 private:
  const absl::Duration timeout_;
  std::atomic<int64_t> last_seen_ns_{0};
  absl::Notification done_;
  std::thread thread_;
};

}  // namespace

LinkService::LinkService(Engine* engine, LinkOptions options)
    : engine_(engine), options_(std::move(options)) {}

grpc::Status LinkService::ValidateRegister(const wv1::Register& reg) const {
  if (reg.model_fingerprint() != options_.model_fingerprint) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrFormat("worker model fingerprint %s differs from the "
                                        "scheduler's %s: start both with the same model file",
                                        reg.model_fingerprint(), options_.model_fingerprint));
  }
  if (reg.page_size() == 0 || reg.num_pages() == 0 || reg.max_batch_tokens() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrFormat("page_size (%d), num_pages (%d) and max_batch_tokens "
                                        "(%d) must all be positive",
                                        reg.page_size(), reg.num_pages(), reg.max_batch_tokens()));
  }
  return grpc::Status::OK;
}

grpc::Status LinkService::Authenticate(const grpc::ServerContext& context) const {
  if (options_.link_token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(common::kLinkTokenMetadataKey);
  const bool present = it != metadata.end();
  if (present && common::LinkTokensEqual(std::string_view(it->second.data(), it->second.size()),
                                         options_.link_token)) {
    return grpc::Status::OK;
  }
  PAGODA_LOG(kWarning, "link", "refused a worker link from %s: %s link token", context.peer(),
             present ? "wrong" : "no");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      present ? "wrong link token" : "this scheduler requires a link token");
}

grpc::Status LinkService::Attach(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status auth = Authenticate(*context); !auth.ok()) return auth;
  // Watches from the first byte: a peer that never registers does not hold a thread forever.
  Watchdog watchdog(context, options_.worker_timeout, "worker link from " + context->peer());
  wv1::WorkerMessage msg;
  if (!stream->Read(&msg) || !msg.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on a worker link must be Register");
  }
  const wv1::Register reg = msg.register_();
  grpc::Status valid = ValidateRegister(reg);
  if (!valid.ok()) {
    PAGODA_LOG(kWarning, "link", "refused worker %s from %s: %s", reg.worker_name(),
               context->peer(), valid.error_message());
    return valid;
  }
  auto channel = std::make_shared<StreamChannel>(stream);
  WorkerInfo info;
  info.num_pages = static_cast<int32_t>(reg.num_pages());
  info.page_size = static_cast<int32_t>(reg.page_size());
  info.max_batch_tokens = static_cast<int32_t>(reg.max_batch_tokens());
  // Accepted must precede the first plan: hold the channel closed to plans until it is sent.
  const WorkerId id = engine_->AttachWorker(reg.worker_name(), info, channel, [&](WorkerId wid) {
    channel->SendAccepted(wid, options_.worker_timeout / 4);
  });
  while (stream->Read(&msg)) {
    watchdog.Touch();
    if (!msg.has_result()) continue;
    const wv1::IterationResult& r = msg.result();
    engine_->OnWorkerResult(id, r.iteration(), DecodeSampled(r), r.error());
  }
  channel->Close();
  engine_->DetachWorker(id);
  return grpc::Status::OK;
}

}  // namespace pagoda::scheduler
