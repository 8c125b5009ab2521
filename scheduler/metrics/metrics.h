// SchedulerMetrics: every Prometheus metric the scheduler exports, defined in this one place.
//
// Names carry the prefix pagoda_, base units (seconds; tokens and pages are counts) and the
// meanings vLLM users know (vllm:num_requests_running -> pagoda_num_requests_running, ...).
// Labels are low-cardinality only: the worker's name, a finish reason, a gRPC code name; never
// a request id.
//
// Two kinds of sources:
//  * events, pushed by the Engine (tokens, plans, finished requests) and the GenerationService
//    (how each call ended): counters and histograms, updated as they happen;
//  * state, pulled right before each scrape from the snapshot source (requests running /
//    waiting / preempted, pages per worker): these gauges are copies of the engine's own
//    counts, so preemption, cancellation or a worker leaving can never make them drift.
//
// Thread-safe. The core (scheduler/core) never sees this class: the Engine times and reports.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/core/types.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace pagoda::scheduler {

// The engine's state at one instant, as the scrape-time gauges show it.
struct EngineGauges {
  size_t running = 0;
  size_t waiting = 0;
  size_t preempted = 0;  // waiting again after a preemption (a subset of waiting)
  int64_t preemptions_total = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache, running total
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  struct Worker {
    std::string name;
    int32_t pages_total = 0;
    int32_t pages_used = 0;
    int32_t pages_cached = 0;  // unreferenced pages the prefix cache keeps
  };
  std::vector<Worker> workers;
};

class SchedulerMetrics {
 public:
  SchedulerMetrics();
  ~SchedulerMetrics();
  SchedulerMetrics(const SchedulerMetrics&) = delete;
  SchedulerMetrics& operator=(const SchedulerMetrics&) = delete;

  // --- events from the Engine ---
  // A plan was built: its input tokens and the time Scheduler::Schedule took to build it.
  void OnPlan(int32_t num_tokens, double planning_seconds);
  // A worker's result arrived `seconds` before the next plan for that worker left.
  void OnTurnaround(double seconds);
  // A request's first generated token (or its first sample, when that ended it: EOS, stop id).
  void OnFirstToken(double time_to_first_token_seconds, int32_t prompt_tokens);
  // A generated token, and the time since the previous token of the same request (< 0: first).
  void OnToken(double inter_token_seconds);
  // A request left the core, for any reason. `queue_seconds` < 0: it was never scheduled.
  void OnRequestFinished(double e2e_seconds, double queue_seconds);

  // --- events from the GenerationService: how each Generate call ended ---
  void OnRequestSucceeded(FinishReason reason);
  void OnRequestFailed(absl::StatusCode code);

  // --- state, pulled before each scrape ---
  void SetSnapshotSource(std::function<EngineGauges()> source);

  // Serves GET /metrics on `address` (HOST:PORT; port 0 picks a free one) from a small HTTP
  // server with its own threads. Returns the bound port, or UNAVAILABLE when the address cannot
  // be bound. At most once.
  absl::StatusOr<int> Serve(const std::string& address);
  // The text exposition format, as a scrape would see it (for tests and debugging).
  std::string Render() const;

 private:
  class ScrapeView;
  struct WorkerGauges {
    prometheus::Gauge* used = nullptr;
    prometheus::Gauge* total = nullptr;
    prometheus::Gauge* cached = nullptr;
  };

  // Copies the snapshot into the state gauges; called by every scrape.
  void Refresh() const;
  void RefreshWorkers(const std::vector<EngineGauges::Worker>& workers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);

  std::shared_ptr<prometheus::Registry> registry_;

  // State (refreshed at scrape time).
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* preempted_;
  prometheus::Gauge* workers_;
  prometheus::Gauge* kv_usage_;
  prometheus::Counter* preemptions_;
  prometheus::Family<prometheus::Gauge>* kv_used_family_;
  prometheus::Family<prometheus::Gauge>* kv_total_family_;
  prometheus::Family<prometheus::Gauge>* kv_cached_family_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;

  // Events.
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* success_family_;
  prometheus::Family<prometheus::Counter>* failure_family_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Histogram* planning_;
  prometheus::Histogram* turnaround_;

  mutable absl::Mutex refresh_mu_;
  std::function<EngineGauges()> source_ ABSL_GUARDED_BY(refresh_mu_);
  mutable int64_t preemptions_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t prefix_queries_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t prefix_hits_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable absl::flat_hash_map<std::string, WorkerGauges> worker_gauges_
      ABSL_GUARDED_BY(refresh_mu_);

  std::shared_ptr<ScrapeView> scrape_view_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace pagoda::scheduler
