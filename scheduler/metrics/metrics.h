// SchedulerMetrics: every Prometheus metric the scheduler exports, defined in this one place.
//
// Names carry the prefix pagoda_, base units (seconds; tokens and pages are counts) and the
// meanings vLLM users know (vllm:num_requests_running -> pagoda_num_requests_running, ...).
// Labels are low-cardinality only: the worker's name, a finish reason, a gRPC code name, a
// preemption mode, a swap direction, a tenant; never a request id. Tenants are bounded
// (MetricsOptions): "default" and those named in --tenant-weights always have their own label
// (shown from the start), the others get
// one in first-seen order up to max_tenant_labels, and the rest are summed under
// tenant="other" (a tenant named "other" shares that series). A label once given is kept.
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
  int64_t prefix_cache_queries = 0;   // prompt tokens looked up in the prefix cache, running total
  int64_t prefix_cache_hits = 0;      // of those, tokens found cached
  int64_t preemptions_recompute = 0;  // of preemptions_total, by mode
  int64_t preemptions_swap = 0;
  int64_t swapped_out_pages = 0;  // running totals
  int64_t swapped_in_pages = 0;
  struct Tenant {
    std::string name;
    int64_t served_tokens = 0;  // running total (TenantStats::served_tokens)
    int32_t queued = 0;         // requests waiting
    int32_t running = 0;        // sequences running
  };
  std::vector<Tenant> tenants;  // a tenant absent here is one the core no longer keeps
  struct Worker {
    std::string name;
    int32_t pages_total = 0;
    int32_t pages_used = 0;
    int32_t pages_cached = 0;  // unreferenced pages the prefix cache keeps
  };
  std::vector<Worker> workers;
};

struct MetricsOptions {
  // Tenants that always get a label of their own (those named in --tenant-weights).
  std::vector<std::string> named_tenants;
  // Other tenants get a label of their own in first-seen order up to this many
  // (--max-tenant-labels); the rest are summed under tenant="other".
  int32_t max_tenant_labels = 32;
};

inline constexpr char kOtherTenantsLabel[] = "other";

class SchedulerMetrics {
 public:
  explicit SchedulerMetrics(MetricsOptions options = {});
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
  // A request whose time to first token the core predicted at arrival (> 0) got its first
  // token after `actual_seconds`: observes actual / predicted.
  void OnFirstTokenPredicted(double actual_seconds, double predicted_seconds);

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

  struct TenantSeries {
    prometheus::Counter* served = nullptr;
    prometheus::Gauge* queued = nullptr;
    prometheus::Gauge* running = nullptr;
  };

  // Copies the snapshot into the state gauges; called by every scrape.
  void Refresh() const;
  void RefreshWorkers(const std::vector<EngineGauges::Worker>& workers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);
  void RefreshTenants(const std::vector<EngineGauges::Tenant>& tenants) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);
  // The label `tenant` is shown under, given on first sight (see the header comment).
  const std::string& TenantLabel(const std::string& tenant) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);
  TenantSeries& TenantSeriesFor(const std::string& label) const
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
  prometheus::Counter* preempted_recompute_;
  prometheus::Counter* preempted_swap_;
  prometheus::Counter* swapped_out_;
  prometheus::Counter* swapped_in_;
  prometheus::Family<prometheus::Counter>* tenant_served_family_;
  prometheus::Family<prometheus::Gauge>* tenant_queued_family_;
  prometheus::Family<prometheus::Gauge>* tenant_running_family_;

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
  prometheus::Histogram* ttft_ratio_;

  const int32_t max_tenant_labels_;

  mutable absl::Mutex refresh_mu_;
  std::function<EngineGauges()> source_ ABSL_GUARDED_BY(refresh_mu_);
  mutable int64_t preemptions_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t prefix_queries_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t prefix_hits_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable absl::flat_hash_map<std::string, WorkerGauges> worker_gauges_
      ABSL_GUARDED_BY(refresh_mu_);
  // Running totals already added to the counters (follow the engine's totals).
  mutable int64_t recompute_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t swap_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t swapped_out_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable int64_t swapped_in_seen_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  // Tenants: label by tenant (the named ones and those given one; others map to "other"),
  // series by label, the served tokens already counted by tenant (of the last snapshot only).
  mutable absl::flat_hash_map<std::string, std::string> tenant_labels_ ABSL_GUARDED_BY(refresh_mu_);
  mutable int32_t other_labels_given_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  mutable absl::flat_hash_map<std::string, TenantSeries> tenant_series_
      ABSL_GUARDED_BY(refresh_mu_);
  mutable absl::flat_hash_map<std::string, int64_t> served_seen_ ABSL_GUARDED_BY(refresh_mu_);

  std::shared_ptr<ScrapeView> scrape_view_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace pagoda::scheduler
