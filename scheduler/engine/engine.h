// Engine: owns the sans-IO Scheduler and its iteration loop, and connects it to requests and
// workers. Used by service/ (requests) and link/ (workers), which never use each other.
//
// Ownership and locking: the Engine owns the core Scheduler behind one mutex; every call into
// the core happens under it, so the core stays single-threaded. Nothing under the lock blocks or
// touches the network: the core's events go to RequestSinks (which only buffer), and plans go to
// per-worker Outboxes (which only queue). After releasing the lock, the thread that did the work
// hands the queued plans to their workers' channels first (the worker waits for them), then
// flushes the sinks that got news (which may start gRPC writes).
//
// The iteration loop is event-driven, with no thread of its own: a worker's result
// (OnWorkerResult) applies the result, plans that worker's (and any idle worker's) next
// iteration and routes the tokens; Submit, Finish, AttachWorker and DetachWorker do the same for
// their events. With overlap a worker has up to two plans in flight and two threads may build
// them: each worker's Outbox takes its plans in the order the core built them (under the lock)
// and hands them to the channel in that order (outside it).
//
// Metrics (optional, injected): the engine times each Scheduler::Schedule call, the turnaround
// from a worker's result to its next plan, and reports plans, tokens and finished requests
// (with the ratio of actual to predicted time to first token, when the core predicted one).
// The worker's own step times (StepTimes) go to the core, which predicts waits from them.
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
#include "scheduler/engine/request_sink.h"

namespace pagoda::scheduler {

// The engine's handle on one attached worker's stream.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  // Queues a plan for writing and returns at once (never blocks on the network). A broken
  // stream drops it: the link handler sees the break and detaches the worker, which re-queues
  // the plan's sequences.
  virtual void SendPlan(const Plan& plan) = 0;
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
  // Of preemptions_total, those that recomputed and those that swapped (Scheduler::preemptions).
  int64_t preemptions_recompute = 0;
  int64_t preemptions_swap = 0;
  int64_t swapped_out_pages = 0;     // KV pages copied to the workers' swap space, running total
  int64_t swapped_in_pages = 0;      // and back
  std::vector<TenantStats> tenants;  // every tenant the core keeps an account of
  std::vector<WorkerStatus> workers;
};

class SchedulerMetrics;

class Engine {
 public:
  // `clock` returns seconds on a monotonic scale (injected so tests can drive time).
  // `metrics` may be null; otherwise it must outlive the engine.
  Engine(const SchedulerOptions& options, std::function<double()> clock,
         SchedulerMetrics* metrics = nullptr);

  // Queues a request whose updates go to `sink`. Errors are the core's validation errors,
  // and UNAVAILABLE once draining; on an error the sink is never called.
  absl::Status Submit(NewRequest request, std::shared_ptr<RequestSink> sink);
  // n > 1: completion i (request id request.id + i, reserved with NextRequestIds(n)) goes to
  // sinks[i]; sinks.size() == max(1, request.n). Errors as Submit's; on an error no sink is
  // ever called.
  absl::Status SubmitCompletions(NewRequest request,
                                 std::vector<std::shared_ptr<RequestSink>> sinks);
  // Ends a request (client cancel, stop string, deadline) and frees its pages. Unknown or
  // finished ids are ignored.
  void Finish(RequestId id, FinishReason reason, const std::string& why);
  // The engine's clock (seconds), the time base of NewRequest::deadline.
  double Now() const { return clock_(); }
  RequestId NextRequestId() { return NextRequestIds(1); }
  // The first of `count` consecutive fresh ids.
  RequestId NextRequestIds(int32_t count);

  // A fresh worker id, for the link to announce (Accepted) before it attaches the worker.
  WorkerId NextWorkerId();
  // Attaches worker `id` (from NextWorkerId); plans may reach `channel` from now on.
  void AttachWorker(WorkerId id, const std::string& name, const WorkerInfo& info,
                    std::shared_ptr<WorkerChannel> channel);
  void DetachWorker(WorkerId id);
  // A worker's result. `times` is what the worker measured (forward + sampling, swaps), for the
  // core's step-time model. `received` is when it arrived (absl::InfiniteFuture(): now), the
  // start of the turnaround that ends when this worker's next plan is handed to its channel.
  void OnWorkerResult(WorkerId id, uint64_t iteration, const std::vector<SampledToken>& sampled,
                      const std::string& error, const StepTimes& times = {},
                      absl::Time received = absl::InfiniteFuture());

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
  // A submitted request, until the core finishes it.
  struct Tracked {
    std::shared_ptr<RequestSink> sink;
    int32_t prompt_tokens = 0;
    double arrival = 0;
    double last_token = -1;  // when its previous token was routed; < 0 before the first
  };
  struct AttachedWorker {
    std::string name;
    WorkerInfo info;
    std::shared_ptr<Outbox> outbox;
  };
  // What one pass under the lock leaves to do after it: plans to hand out, sinks to flush.
  struct Outgoing {
    std::vector<std::shared_ptr<Outbox>> outboxes;
    std::vector<std::shared_ptr<RequestSink>> sinks;
  };

  // Plans for every worker that can take one; call with mu_ held.
  void PlanLocked(double now, Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PlanLocked, then routes the core's events.
  void PlanAndRouteLocked(Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RouteEventsLocked(Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports a routed event to metrics_ (non-null); `now` is the engine's clock.
  void ObserveToken(Tracked& t, double now);
  void ObserveFinished(const Tracked& t, const Event& e);
  // Outside the lock: plans first (a worker waits for them), then the sinks.
  void Deliver(Outgoing out);

  const std::function<double()> clock_;
  SchedulerMetrics* const metrics_;
  absl::Mutex mu_;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, Tracked> tracked_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, AttachedWorker> workers_ ABSL_GUARDED_BY(mu_);
  WorkerId next_worker_id_ ABSL_GUARDED_BY(mu_) = 1;
  RequestId next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::function<void(size_t)> workers_changed_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t refused_while_draining_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pagoda::scheduler
