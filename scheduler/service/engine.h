// Engine: drives the sans-IO Scheduler from gRPC threads.
//
// Ownership: the Engine owns the core Scheduler and guards it with one mutex; every call into
// the core happens under it, so the core stays single-threaded. Plans are sent to workers
// outside the lock, through WorkerChannels owned by the link handlers.
//
// Flow: Submit() queues a request and kicks idle workers; a worker's result comes back through
// OnWorkerResult(), which applies it, routes tokens to RequestStreams and sends that worker its
// next plan. With overlap a worker has up to two plans in flight, and two threads (a handler's
// Submit, a link's OnWorkerResult) may build them: each worker's Outbox takes its plans in the
// order the core built them (under the lock) and writes them in that order (outside it).
//
// Metrics (optional, injected): the engine times each Scheduler::Schedule call and reports
// plans, tokens and finished requests to SchedulerMetrics as it routes the core's events; the
// core itself knows nothing of them.
//
// Drain: after StartDrain() Submit refuses with UNAVAILABLE; what was submitted before runs on,
// and WaitIdle() tells when it is all done. Workers stay attached throughout.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/core/scheduler.h"
#include "scheduler/service/request_stream.h"

namespace pagoda::scheduler {

// The engine's handle on one attached worker's stream.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  // Sends a plan; false when the stream is broken (the link handler then detaches the worker).
  virtual bool SendPlan(const Plan& plan) = 0;
};

struct WorkerStatus {
  WorkerId id = 0;
  std::string name;
  WorkerInfo info;
  int32_t free_pages = 0;
  int32_t cached_pages = 0;  // of free_pages, those the prefix cache keeps (reusable, evictable)
};

struct EngineStatus {
  size_t waiting = 0;
  size_t running = 0;
  size_t preempted = 0;
  int64_t preemptions_total = 0;
  int64_t prefix_cache_queried_tokens = 0;  // prompt tokens looked up at admissions
  int64_t prefix_cache_hit_tokens = 0;      // of those, tokens found cached
  std::vector<WorkerStatus> workers;
};

class SchedulerMetrics;

class Engine {
 public:
  // `clock` returns seconds on a monotonic scale (injected so tests can drive time).
  // `metrics` may be null; otherwise it must outlive the engine.
  Engine(const SchedulerOptions& options, std::function<double()> clock,
         SchedulerMetrics* metrics = nullptr);

  // Queues a request whose updates go to `stream`. Errors are the core's validation errors,
  // and UNAVAILABLE once draining.
  absl::Status Submit(NewRequest request, std::shared_ptr<RequestStream> stream);
  // n > 1: completion i (request id request.id + i, reserved with NextRequestIds(n)) goes to
  // streams[i]; streams.size() == request.n.
  absl::Status SubmitCompletions(NewRequest request,
                                 std::vector<std::shared_ptr<RequestStream>> streams);
  // Ends a request (client cancel, stop string, deadline) and frees its pages.
  void Finish(RequestId id, FinishReason reason, const std::string& why);
  // The engine's clock (seconds), the time base of NewRequest::deadline.
  double Now() const { return clock_(); }
  RequestId NextRequestId() { return NextRequestIds(1); }
  // The first of `count` consecutive fresh ids.
  RequestId NextRequestIds(int32_t count);

  // Attaches a worker. `on_attached(id)` runs before any plan can reach the worker (it sends
  // the link's Accepted message).
  WorkerId AttachWorker(const std::string& name, const WorkerInfo& info,
                        std::shared_ptr<WorkerChannel> channel,
                        const std::function<void(WorkerId)>& on_attached);
  void DetachWorker(WorkerId id);
  void OnWorkerResult(WorkerId id, uint64_t iteration, const std::vector<SampledToken>& sampled,
                      const std::string& error);

  EngineStatus Status();
  // Called (outside the lock) whenever the number of attached workers changes.
  void SetWorkersChangedCallback(std::function<void(size_t)> callback);

  // From now on Submit refuses new requests. Returns how many were queued or running.
  size_t StartDrain();
  // Waits until no request is queued or running, or until `deadline`; true when idle.
  bool WaitIdle(absl::Time deadline);
  // Requests refused since StartDrain().
  int64_t refused_while_draining();

 private:
  class Outbox;
  // Outboxes that received plans under the lock, to flush after it.
  using Outgoing = std::shared_ptr<Outbox>;
  struct AttachedWorker {
    std::string name;
    WorkerInfo info;
    std::shared_ptr<Outbox> outbox;
  };
  // A submitted request, until the core finishes it.
  struct Tracked {
    std::shared_ptr<RequestStream> stream;
    int32_t prompt_tokens = 0;
    double arrival = 0;
    double last_token = -1;  // when its previous token was routed; < 0 before the first
  };

  // Collects plans for every idle worker and routes core events; call with mu_ held.
  std::vector<Outgoing> PlanAndRouteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RouteEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports a routed event to metrics_ (non-null); `now` is the engine's clock.
  void ObserveToken(Tracked& t, double now);
  void ObserveFinished(const Tracked& t, const Event& e);
  void Send(std::vector<Outgoing> outgoing);

  const std::function<double()> clock_;
  SchedulerMetrics* const metrics_;
  absl::Mutex mu_;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, Tracked> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, AttachedWorker> workers_ ABSL_GUARDED_BY(mu_);
  WorkerId next_worker_id_ ABSL_GUARDED_BY(mu_) = 1;
  RequestId next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::function<void(size_t)> workers_changed_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t refused_while_draining_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pagoda::scheduler
