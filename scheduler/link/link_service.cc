#include "scheduler/link/link_service.h"

#include <atomic>
#include <climits>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/link_token.h"
#include "common/log.h"
#include "common/race_annotations.h"
#include "google/protobuf/arena.h"
#include "scheduler/link/plan_codec.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = pagoda::worker::v1;

// Cancels a link that stays silent for `timeout`; Touch() on every message from the worker.
class Watchdog {
 public:
  Watchdog(grpc::CallbackServerContext* context, absl::Duration timeout, std::string what)
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

// One attached (or attaching) worker: the stream's reactor and the engine's WorkerChannel.
// Held by shared_ptr: by itself until OnDone, and by the engine's outbox while attached.
// Reactions are serialized by gRPC per operation kind; the write queue is shared with the
// threads that hand plans over, hence mu_. Whoever sets writing_ owns out_ until OnWriteDone.
class LinkService::Link final
    : public grpc::ServerBidiReactor<wv1::WorkerMessage, wv1::SchedulerMessage>,
      public WorkerChannel {
 public:
  // A message to the worker on its own arena: a plan of hundreds of steps is built with a few
  // allocations and freed with as few.
  struct Outgoing {
    google::protobuf::Arena arena;
    wv1::SchedulerMessage* message =
        google::protobuf::Arena::CreateMessage<wv1::SchedulerMessage>(&arena);
  };

  Link(LinkService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  void Start(std::shared_ptr<Link> self) {
    self_ = std::move(self);
    if (grpc::Status auth = service_->Authenticate(*context_); !auth.ok()) return End(auth);
    // Watches from the first byte: a peer that never registers does not hold a link forever.
    watchdog_ = std::make_unique<Watchdog>(context_, service_->options_.worker_timeout,
                                           "worker link from " + context_->peer());
    common::HandOff(&in_);
    StartRead(&in_);
  }

  void SendPlan(const Plan& plan) override {
    auto msg = std::make_unique<Outgoing>();
    EncodePlan(plan, msg->message->mutable_plan());
    Enqueue(std::move(msg));
  }

  void OnReadDone(bool ok) override {
    const common::Reaction reaction(&in_);
    const absl::Time received = absl::Now();
    if (!ok) {
      if (id_ == 0) {
        return End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "the first message on a worker link must be Register"));
      }
      End(grpc::Status::OK);
      service_->engine_->DetachWorker(id_);
      return;
    }
    watchdog_->Touch();
    if (id_ == 0) {
      if (!Register()) return;
    } else if (in_.has_result()) {
      const wv1::IterationResult& r = in_.result();
      service_->engine_->OnWorkerResult(id_, r.iteration(), DecodeSampled(r), r.error(),
                                        DecodeStepTimes(r), received);
    }
    common::HandOff(&in_);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    const common::Reaction reaction(&out_);
    std::optional<grpc::Status> finish;
    bool write = false;
    // The written message is freed here, outside the lock, off the path from a worker's
    // result to its next plan.
    std::unique_ptr<Outgoing> written;
    {
      absl::MutexLock lock(&mu_);
      written = std::move(out_);
      writing_ = false;
      if (!ok) {  // a broken stream: the pending read fails too, and detaches the worker
        closed_ = true;
        queue_.clear();
      }
      write = ClaimNextLocked();
      if (!write && finish_ && !finished_) {
        finished_ = true;
        finish = finish_;
      }
    }
    if (write) StartWriteOut();
    if (finish) FinishCall(*finish);
  }

  void OnDone() override {
    common::TakeOver(&in_);
    common::TakeOver(&out_);
    common::TakeOver(this);
    watchdog_.reset();                              // before the context goes
    std::shared_ptr<Link> self = std::move(self_);  // may be the last reference
  }

 private:
  // Validates the Register message in in_, announces the id and attaches; false after a refusal.
  bool Register() {
    if (!in_.has_register_()) {
      End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "the first message on a worker link must be Register"));
      return false;
    }
    const wv1::Register& reg = in_.register_();
    if (grpc::Status valid = service_->ValidateRegister(reg); !valid.ok()) {
      PAGODA_LOG(kWarning, "link", "refused worker %s from %s: %s", reg.worker_name(),
                 context_->peer(), valid.error_message());
      End(valid);
      return false;
    }
    WorkerInfo info;
    info.num_pages = static_cast<int32_t>(reg.num_pages());
    info.page_size = static_cast<int32_t>(reg.page_size());
    info.max_batch_tokens = static_cast<int32_t>(reg.max_batch_tokens());
    info.max_prefill_chunk = static_cast<int32_t>(reg.max_prefill_chunk());
    info.num_swap_pages = static_cast<int32_t>(reg.num_swap_pages());
    info.swap_seconds_per_page = reg.swap_seconds_per_page();
    id_ = service_->engine_->NextWorkerId();
    auto accepted = std::make_unique<Outgoing>();
    accepted->message->mutable_accepted()->set_worker_id(id_);
    accepted->message->mutable_accepted()->set_heartbeat_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(service_->options_.worker_timeout / 4)));
    if (service_->options_.vocabulary) {
      *accepted->message->mutable_accepted()->mutable_vocabulary() = *service_->options_.vocabulary;
    }
    Enqueue(std::move(accepted));  // first in the queue: before any plan
    service_->engine_->AttachWorker(id_, reg.worker_name(), info, self_);
    return true;
  }

  void Enqueue(std::unique_ptr<Outgoing> msg) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      queue_.push_back(std::move(msg));
      if (!ClaimNextLocked()) return;
    }
    StartWriteOut();
  }

  // Starts writing out_ (claimed by this thread), and finishing the call.
  void StartWriteOut() {
    const wv1::SchedulerMessage* message = out_->message;  // read before the hand-over
    common::HandOff(&out_);
    StartWrite(message);
  }
  void FinishCall(grpc::Status status) {
    common::HandOff(this);
    Finish(std::move(status));
  }

  // Takes the next queued message into out_ when no write is in flight; true when the caller
  // must now start writing it (outside the lock: gRPC may run reactions inline).
  bool ClaimNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || closed_ || queue_.empty()) return false;
    writing_ = true;
    out_ = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

  // Ends the call with `status` once no write is in flight; later plans are dropped.
  void End(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      queue_.clear();
      if (finish_) return;
      finish_ = status;
      if (writing_) return;  // OnWriteDone finishes
      finished_ = true;
    }
    FinishCall(std::move(status));
  }

  LinkService* const service_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<Link> self_;
  std::unique_ptr<Watchdog> watchdog_;
  wv1::WorkerMessage in_;          // the read in flight's message (reads are one at a time)
  WorkerId id_ = 0;                // 0 until registered; touched by read reactions only
  std::unique_ptr<Outgoing> out_;  // the write in flight's message
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Outgoing>> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

LinkService::LinkService(Engine* engine, LinkOptions options)
    : engine_(engine), options_(std::move(options)) {}

grpc::Status LinkService::ValidateRegister(const wv1::Register& reg) const {
  if (reg.model_fingerprint() != options_.model_fingerprint) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrFormat("worker model fingerprint %s differs from the "
                                        "scheduler's %s: start both with the same model file",
                                        reg.model_fingerprint(), options_.model_fingerprint));
  }
  constexpr uint32_t kMax = INT32_MAX;  // each becomes an int32_t
  if (reg.page_size() == 0 || reg.num_pages() == 0 || reg.max_batch_tokens() == 0 ||
      reg.page_size() > kMax || reg.num_pages() > kMax || reg.max_batch_tokens() > kMax ||
      reg.max_prefill_chunk() > kMax) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrFormat("page_size (%u), num_pages (%u) and max_batch_tokens (%u) must be in [1, "
                        "%d], max_prefill_chunk (%u) in [0, %d]",
                        reg.page_size(), reg.num_pages(), reg.max_batch_tokens(), INT32_MAX,
                        reg.max_prefill_chunk(), INT32_MAX));
  }
  if (reg.num_swap_pages() > static_cast<uint32_t>(INT32_MAX) ||
      !std::isfinite(reg.swap_seconds_per_page()) || reg.swap_seconds_per_page() < 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrFormat("num_swap_pages (%d) must be at most %d and "
                        "swap_seconds_per_page (%g) finite and >= 0",
                        reg.num_swap_pages(), INT32_MAX, reg.swap_seconds_per_page()));
  }
  return grpc::Status::OK;
}

grpc::Status LinkService::Authenticate(const grpc::CallbackServerContext& context) const {
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

grpc::ServerBidiReactor<wv1::WorkerMessage, wv1::SchedulerMessage>* LinkService::Attach(
    grpc::CallbackServerContext* context) {
  auto link = std::make_shared<Link>(this, context);
  link->Start(link);
  return link.get();
}

}  // namespace pagoda::scheduler
