#include "scheduler/service/engine.h"

#include "common/log.h"

namespace pagoda::scheduler {

Engine::Engine(const SchedulerOptions& options, std::function<double()> clock)
    : clock_(std::move(clock)), scheduler_(options) {}

RequestId Engine::NextRequestId() {
  absl::MutexLock lock(&mu_);
  return next_request_id_++;
}

absl::Status Engine::Submit(NewRequest request, std::shared_ptr<RequestStream> stream) {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    const RequestId id = request.id;
    absl::Status status = scheduler_.AddRequest(std::move(request), clock_());
    if (!status.ok()) return status;
    streams_[id] = std::move(stream);
    outgoing = PlanAndRouteLocked();
  }
  Send(std::move(outgoing));
  return absl::OkStatus();
}

void Engine::Finish(RequestId id, FinishReason reason, const std::string& why) {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    scheduler_.Finish(id, reason, why, clock_());
    outgoing = PlanAndRouteLocked();
  }
  Send(std::move(outgoing));
}

WorkerId Engine::AttachWorker(const std::string& name, const WorkerInfo& info,
                              std::shared_ptr<WorkerChannel> channel,
                              const std::function<void(WorkerId)>& on_attached) {
  std::vector<Outgoing> outgoing;
  std::function<void(size_t)> callback;
  size_t count = 0;
  WorkerId id = 0;
  {
    absl::MutexLock lock(&mu_);
    id = next_worker_id_++;
    on_attached(id);  // under the lock: no plan for `id` can be built before it
    workers_[id] = AttachedWorker{name, info, std::move(channel)};
    scheduler_.AddWorker(id, info);
    outgoing = PlanAndRouteLocked();
    callback = workers_changed_;
    count = workers_.size();
  }
  PAGODA_LOG(kInfo, "scheduler", "worker %d attached: %s, %d pages of %d tokens", id, name,
             info.num_pages, info.page_size);
  if (callback) callback(count);
  Send(std::move(outgoing));
  return id;
}

void Engine::DetachWorker(WorkerId id) {
  std::vector<Outgoing> outgoing;
  std::function<void(size_t)> callback;
  size_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    if (workers_.erase(id) == 0) return;
    scheduler_.RemoveWorker(id);
    outgoing = PlanAndRouteLocked();
    callback = workers_changed_;
    count = workers_.size();
  }
  PAGODA_LOG(kInfo, "scheduler", "worker %d detached; its sequences are re-queued", id);
  if (callback) callback(count);
  Send(std::move(outgoing));
}

void Engine::OnWorkerResult(WorkerId id, uint64_t iteration,
                            const std::vector<SampledToken>& sampled, const std::string& error) {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    const double now = clock_();
    if (!error.empty()) {
      PAGODA_LOG(kError, "scheduler", "worker %d failed iteration %d: %s", id, iteration, error);
      scheduler_.OnPlanFailed(id, "worker error: " + error, now);
    } else {
      absl::Status status = scheduler_.OnResult(id, iteration, sampled, now);
      if (!status.ok()) {
        PAGODA_LOG(kError, "scheduler", "result from worker %d rejected: %s", id,
                   std::string(status.message()));
      }
    }
    outgoing = PlanAndRouteLocked();
  }
  Send(std::move(outgoing));
}

void Engine::RouteEventsLocked() {
  for (Event& e : scheduler_.TakeEvents()) {
    auto it = streams_.find(e.id);
    if (it == streams_.end()) continue;
    if (e.kind == Event::Kind::kToken) {
      it->second->PushToken(e.token);
    } else {
      it->second->PushFinished(std::move(e));
      streams_.erase(it);
    }
  }
}

std::vector<Engine::Outgoing> Engine::PlanAndRouteLocked() {
  RouteEventsLocked();
  std::vector<Outgoing> outgoing;
  const double now = clock_();
  for (auto& [id, worker] : workers_) {
    // Up to max_plans_in_flight plans per worker (overlap): keep asking until it says no.
    while (std::optional<Plan> plan = scheduler_.Schedule(id, now)) {
      outgoing.push_back({worker.channel, std::move(*plan)});
    }
  }
  // Scheduling may have finished requests (deadlines): route those events too.
  RouteEventsLocked();
  return outgoing;
}

void Engine::Send(std::vector<Outgoing> outgoing) {
  // A failed send means a broken stream: the link handler sees it too and detaches the worker,
  // which re-queues the plan's sequences.
  for (Outgoing& o : outgoing) o.channel->SendPlan(o.plan);
}

EngineStatus Engine::Status() {
  absl::MutexLock lock(&mu_);
  EngineStatus status;
  status.waiting = scheduler_.num_waiting();
  status.running = scheduler_.num_running();
  status.preempted = scheduler_.num_preempted();
  status.preemptions_total = scheduler_.total_preemptions();
  for (const auto& [id, worker] : workers_) {
    const BlockPool* pool = scheduler_.pool(id);
    WorkerStatus w;
    w.id = id;
    w.name = worker.name;
    w.info = worker.info;
    w.free_pages = pool->num_free();
    status.workers.push_back(std::move(w));
  }
  return status;
}

void Engine::SetWorkersChangedCallback(std::function<void(size_t)> callback) {
  absl::MutexLock lock(&mu_);
  workers_changed_ = std::move(callback);
}

}  // namespace pagoda::scheduler
