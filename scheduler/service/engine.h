// Engine: drives the sans-IO Scheduler from gRPC threads.
//
// Ownership: the Engine owns the core Scheduler and guards it with one mutex; every call into
// the core happens under it, so the core stays single-threaded. Plans are sent to workers
// outside the lock, through WorkerChannels owned by the link handlers.
//
// Flow: Submit() queues a request and kicks idle workers; a worker's result comes back through
// OnWorkerResult(), which applies it, routes tokens to RequestStreams and sends that worker its
// next plan. At most one plan per worker is in flight, so plans reach a worker in order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
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
};

struct EngineStatus {
  size_t waiting = 0;
  size_t running = 0;
  size_t preempted = 0;
  int64_t preemptions_total = 0;
  std::vector<WorkerStatus> workers;
};

class Engine {
 public:
  // `clock` returns seconds on a monotonic scale (injected so tests can drive time).
  Engine(const SchedulerOptions& options, std::function<double()> clock);

  // Queues a request whose updates go to `stream`. Errors are the core's validation errors.
  absl::Status Submit(NewRequest request, std::shared_ptr<RequestStream> stream);
  // Ends a request (client cancel, stop string, deadline) and frees its pages.
  void Finish(RequestId id, FinishReason reason, const std::string& why);
  // The engine's clock (seconds), the time base of NewRequest::deadline.
  double Now() const { return clock_(); }
  RequestId NextRequestId();

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

 private:
  struct Outgoing {
    std::shared_ptr<WorkerChannel> channel;
    Plan plan;
  };
  struct AttachedWorker {
    std::string name;
    WorkerInfo info;
    std::shared_ptr<WorkerChannel> channel;
  };

  // Collects plans for every idle worker and routes core events; call with mu_ held.
  std::vector<Outgoing> PlanAndRouteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RouteEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(std::vector<Outgoing> outgoing);

  const std::function<double()> clock_;
  absl::Mutex mu_;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, std::shared_ptr<RequestStream>> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, AttachedWorker> workers_ ABSL_GUARDED_BY(mu_);
  WorkerId next_worker_id_ ABSL_GUARDED_BY(mu_) = 1;
  RequestId next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::function<void(size_t)> workers_changed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler
