#include "scheduler/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "scheduler/metrics/metrics.h"

namespace pagoda::scheduler {
namespace {

// Planning time is measured on the steady clock, not the injected one: it is a cost, not an
// input to scheduling decisions.
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// One worker's plans between the core and the channel. Push() runs under the engine lock, so
// the queue holds plans in the order the core built them; Flush() runs outside it and hands
// them to the channel in that order, one flusher at a time. The channel only queues, so a
// flush never waits for the network.
class Engine::Outbox {
 public:
  explicit Outbox(std::shared_ptr<WorkerChannel> channel) : channel_(std::move(channel)) {}

  // True when the queue was empty (the caller then owes it a Flush()).
  bool Push(Plan plan) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(plan));
    return queue_.size() == 1;
  }

  void Flush() {
    absl::MutexLock sending(&send_mu_);
    for (;;) {
      Plan plan;
      {
        absl::MutexLock lock(&mu_);
        if (queue_.empty()) return;
        plan = std::move(queue_.front());
        queue_.pop_front();
      }
      channel_->SendPlan(plan);
    }
  }

 private:
  const std::shared_ptr<WorkerChannel> channel_;
  absl::Mutex send_mu_;  // held while handing plans over; taken before mu_
  absl::Mutex mu_;
  std::deque<Plan> queue_ ABSL_GUARDED_BY(mu_);
};

Engine::Engine(const SchedulerOptions& options, std::function<double()> clock,
               SchedulerMetrics* metrics)
    : clock_(std::move(clock)), metrics_(metrics), scheduler_(options) {}

RequestId Engine::NextRequestIds(int32_t count) {
  absl::MutexLock lock(&mu_);
  const RequestId first = next_request_id_;
  next_request_id_ += static_cast<RequestId>(std::max(1, count));
  return first;
}

WorkerId Engine::NextWorkerId() {
  absl::MutexLock lock(&mu_);
  return next_worker_id_++;
}

absl::Status Engine::Submit(NewRequest request, std::shared_ptr<RequestSink> sink) {
  return SubmitCompletions(std::move(request), {std::move(sink)});
}

absl::Status Engine::SubmitCompletions(NewRequest request,
                                       std::vector<std::shared_ptr<RequestSink>> sinks) {
  if (sinks.size() != static_cast<size_t>(std::max(1, request.n))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d sinks for a request of n = %d completions", sinks.size(), request.n));
  }
  Outgoing out;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      ++refused_while_draining_;
      return absl::UnavailableError(
          "the scheduler is shutting down (draining) and accepts no new requests; retry on "
          "another replica or after it restarts");
    }
    const RequestId id = request.id;
    const double now = clock_();
    const auto prompt = static_cast<int32_t>(request.prompt.size());
    absl::Status status = scheduler_.AddRequest(std::move(request), now);
    if (!status.ok()) return status;
    for (size_t i = 0; i < sinks.size(); ++i) {
      tracked_[id + i] = Tracked{std::move(sinks[i]), prompt, now};
    }
    PlanAndRouteLocked(&out);
  }
  Deliver(std::move(out));
  return absl::OkStatus();
}

void Engine::Finish(RequestId id, FinishReason reason, const std::string& why) {
  Outgoing out;
  {
    absl::MutexLock lock(&mu_);
    scheduler_.Finish(id, reason, why, clock_());
    PlanAndRouteLocked(&out);
  }
  Deliver(std::move(out));
}

void Engine::AttachWorker(WorkerId id, const std::string& name, const WorkerInfo& info,
                          std::shared_ptr<WorkerChannel> channel) {
  Outgoing out;
  std::function<void(size_t)> callback;
  size_t count = 0;
  std::pair<int32_t, int32_t> limits;
  {
    absl::MutexLock lock(&mu_);
    workers_[id] = AttachedWorker{name, info, std::make_shared<Outbox>(std::move(channel))};
    scheduler_.AddWorker(id, info);
    limits = scheduler_.PlanLimits(id);
    PlanAndRouteLocked(&out);
    callback = workers_changed_;
    count = workers_.size();
  }
  PAGODA_LOG(kInfo, "scheduler",
             "worker %d attached: %s, %d pages of %d tokens; plans of up to %d tokens, prefill "
             "chunks of up to %d",
             id, name, info.num_pages, info.page_size, limits.first, limits.second);
  if (callback) callback(count);
  Deliver(std::move(out));
}

void Engine::DetachWorker(WorkerId id) {
  AttachedWorker detached;
  Outgoing out;
  std::function<void(size_t)> callback;
  size_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    detached = std::move(it->second);
    workers_.erase(it);
    scheduler_.RemoveWorker(id);
    PlanAndRouteLocked(&out);
    callback = workers_changed_;
    count = workers_.size();
  }
  PAGODA_LOG(kInfo, "scheduler", "worker %d detached: %s, %d pages; its sequences are re-queued",
             id, detached.name, detached.info.num_pages);
  if (callback) callback(count);
  Deliver(std::move(out));
}

void Engine::OnWorkerResult(WorkerId id, uint64_t iteration,
                            const std::vector<SampledToken>& sampled, const std::string& error,
                            const StepTimes& times, absl::Time received) {
  if (received == absl::InfiniteFuture()) received = absl::Now();
  // The worker waits for its next plan, the clients for their tokens: plan first, hand the
  // plans out, then route the tokens (a second, short hold of the lock) and flush the sinks.
  Outgoing out;
  std::shared_ptr<Outbox> own;  // this worker's outbox, for the turnaround
  {
    absl::MutexLock lock(&mu_);
    const double now = clock_();
    if (!error.empty()) {
      PAGODA_LOG(kError, "scheduler", "worker %d failed iteration %d: %s", id, iteration, error);
      scheduler_.OnPlanFailed(id, "worker error: " + error, now);
    } else {
      absl::Status status = scheduler_.OnResult(id, iteration, sampled, now, times);
      if (!status.ok()) {
        PAGODA_LOG(kError, "scheduler", "result from worker %d rejected: %s", id,
                   std::string(status.message()));
      }
    }
    PlanLocked(now, &out);
    if (auto it = workers_.find(id); it != workers_.end()) own = it->second.outbox;
  }
  bool planned = false;
  for (std::shared_ptr<Outbox>& outbox : out.outboxes) {
    outbox->Flush();
    planned = planned || outbox == own;
  }
  if (planned && metrics_ != nullptr) {
    metrics_->OnTurnaround(absl::ToDoubleSeconds(absl::Now() - received));
  }
  out.outboxes.clear();
  {
    absl::MutexLock lock(&mu_);
    RouteEventsLocked(&out);
  }
  Deliver(std::move(out));
}

void Engine::RouteEventsLocked(Outgoing* out) {
  std::vector<Event> events = scheduler_.TakeEvents();
  const double now = events.empty() || metrics_ == nullptr ? 0 : clock_();
  for (Event& e : events) {
    auto it = tracked_.find(e.id);
    if (it == tracked_.end()) continue;
    Tracked& t = it->second;
    if (e.kind == Event::Kind::kToken) {
      if (metrics_ != nullptr) ObserveToken(t, now);
      if (t.sink->OnToken(e.token, e.logprob ? &*e.logprob : nullptr)) {
        out->sinks.push_back(t.sink);
      }
    } else {
      if (metrics_ != nullptr) ObserveFinished(t, e);
      if (t.sink->OnFinished(std::move(e))) out->sinks.push_back(std::move(t.sink));
      tracked_.erase(it);
    }
  }
}

void Engine::ObserveToken(Tracked& t, double now) {
  if (t.last_token < 0) metrics_->OnFirstToken(now - t.arrival, t.prompt_tokens);
  metrics_->OnToken(t.last_token < 0 ? -1 : now - t.last_token);
  t.last_token = now;
}

void Engine::ObserveFinished(const Tracked& t, const Event& e) {
  const RequestTimings& timings = e.timings;
  // A first sample that ended the request (EOS, a stop id) produced no token event.
  if (t.last_token < 0 && timings.first_token >= 0) {
    metrics_->OnFirstToken(timings.first_token - timings.arrival, t.prompt_tokens);
  }
  metrics_->OnRequestFinished(
      timings.finished - timings.arrival,
      timings.first_scheduled >= 0 ? timings.first_scheduled - timings.arrival : -1);
  if (timings.predicted_first_token > 0 && timings.first_token >= 0) {
    metrics_->OnFirstTokenPredicted(timings.first_token - timings.arrival,
                                    timings.predicted_first_token);
  }
}

void Engine::PlanLocked(double now, Outgoing* out) {
  for (auto& [id, worker] : workers_) {
    // Up to max_plans_in_flight plans per worker (overlap): keep asking until it says no.
    for (;;) {
      const double start = metrics_ != nullptr ? SteadySeconds() : 0;
      std::optional<Plan> plan = scheduler_.Schedule(id, now);
      if (!plan) break;
      if (metrics_ != nullptr) metrics_->OnPlan(plan->num_tokens, SteadySeconds() - start);
      if (worker.outbox->Push(std::move(*plan))) out->outboxes.push_back(worker.outbox);
    }
  }
}

void Engine::PlanAndRouteLocked(Outgoing* out) {
  PlanLocked(clock_(), out);
  // Events of what came before and of scheduling (deadlines), in the order the core emitted
  // them.
  RouteEventsLocked(out);
}

void Engine::Deliver(Outgoing out) {
  for (std::shared_ptr<Outbox>& outbox : out.outboxes) outbox->Flush();
  for (std::shared_ptr<RequestSink>& sink : out.sinks) sink->Flush();
}

EngineStatus Engine::Status() {
  absl::MutexLock lock(&mu_);
  EngineStatus status;
  status.waiting = scheduler_.num_waiting();
  status.running = scheduler_.num_running();
  status.preempted = scheduler_.num_preempted();
  status.preemptions_total = scheduler_.total_preemptions();
  status.prefix_cache_queried_tokens = scheduler_.kv().queried_tokens();
  status.prefix_cache_hit_tokens = scheduler_.kv().hit_tokens();
  status.preemptions_recompute = scheduler_.preemptions(PreemptionMode::kRecompute);
  status.preemptions_swap = scheduler_.preemptions(PreemptionMode::kSwap);
  status.swapped_out_pages = scheduler_.swapped_out_pages();
  status.swapped_in_pages = scheduler_.swapped_in_pages();
  status.tenants = scheduler_.tenant_stats();
  for (const auto& [id, worker] : workers_) {
    const KvUsage kv = scheduler_.kv_usage(id);
    WorkerStatus w;
    w.id = id;
    w.name = worker.name;
    w.info = worker.info;
    w.free_pages = kv.free + kv.parked;  // owned by no sequence
    w.cached_pages = kv.parked;
    status.workers.push_back(std::move(w));
  }
  return status;
}

void Engine::SetWorkersChangedCallback(std::function<void(size_t)> callback) {
  absl::MutexLock lock(&mu_);
  workers_changed_ = std::move(callback);
}

size_t Engine::StartDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  return tracked_.size();
}

bool Engine::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  // tracked_ holds exactly the submitted requests the core has not finished.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return tracked_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

int64_t Engine::refused_while_draining() {
  absl::MutexLock lock(&mu_);
  return refused_while_draining_;
}

}  // namespace pagoda::scheduler
