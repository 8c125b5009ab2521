#include "scheduler/metrics/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_format.h"
#include "common/metrics_exposer.h"

namespace pagoda::scheduler {
namespace {

using prometheus::Histogram;

// Bucket boundaries, vLLM's where it has one so dashboards carry over; extended downwards
// where a CPU worker or the planner is much faster than vLLM's GPU range starts.
const Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0};
const Histogram::BucketBoundaries kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                                 0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,
                                                 1.0,   2.5,    5.0,   7.5,  10.0,  20.0, 40.0};
const Histogram::BucketBoundaries kRequestBuckets = {
    0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,
    15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120., 240.0, 480.0, 960.0, 1920., 7680.0};
const Histogram::BucketBoundaries kIterationTokenBuckets = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
// Planning is meant to cost tens of microseconds (ARCHITECTURE.md §5).
const Histogram::BucketBoundaries kPlanningBuckets = {
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1};

// A worker's result in -> its next plan out: meant to stay well under 100 us (issue 15).
const Histogram::BucketBoundaries kTurnaroundBuckets = {5e-6, 1e-5,   2e-5, 3e-5, 5e-5, 7.5e-5,
                                                        1e-4, 1.5e-4, 2e-4, 3e-4, 5e-4, 7.5e-4,
                                                        1e-3, 2e-3,   5e-3, 1e-2, 5e-2};

// Actual over predicted time to first token: 1 is a perfect prediction.
const Histogram::BucketBoundaries kPredictionRatioBuckets = {0.25, 0.5,  0.75, 0.9, 1.0,
                                                             1.1,  1.25, 1.5,  2.0, 4.0};

prometheus::Gauge& AddGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

prometheus::Counter& AddCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

Histogram& AddHistogram(prometheus::Registry& r, const std::string& name, const std::string& help,
                        const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
}

}  // namespace

// What the HTTP endpoint collects: the state gauges are refreshed first, then the registry.
class SchedulerMetrics::ScrapeView : public prometheus::Collectable {
 public:
  explicit ScrapeView(const SchedulerMetrics* metrics) : metrics_(metrics) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    metrics_->Refresh();
    return metrics_->registry_->Collect();
  }

 private:
  const SchedulerMetrics* metrics_;
};

SchedulerMetrics::SchedulerMetrics(MetricsOptions options)
    : registry_(std::make_shared<prometheus::Registry>()),
      max_tenant_labels_(std::max(0, options.max_tenant_labels)) {
  prometheus::Registry& r = *registry_;
  running_ = &AddGauge(r, "pagoda_num_requests_running",
                       "Requests running on a worker (holding KV pages), all workers together.");
  waiting_ = &AddGauge(r, "pagoda_num_requests_waiting",
                       "Requests queued for admission, preempted ones included.");
  preempted_ = &AddGauge(r, "pagoda_num_requests_preempted",
                         "Requests waiting again after a preemption (part of the waiting ones).");
  workers_ = &AddGauge(r, "pagoda_num_workers", "Workers attached to the scheduler.");
  kv_usage_ = &AddGauge(r, "pagoda_kv_cache_usage_ratio",
                        "KV pages in use over KV pages attached, all workers together (0 to 1).");
  preemptions_ = &AddCounter(r, "pagoda_preemptions_total",
                             "Sequences preempted (pages freed, recomputed or swapped back in on "
                             "resume), whatever the mode.");
  auto& by_mode = prometheus::BuildCounter()
                      .Name("pagoda_preemptions_by_mode_total")
                      .Help(
                          "Sequences preempted, by mode: recompute (pages freed, recomputed on "
                          "resume) or swap (pages copied to the worker's host swap space).")
                      .Register(r);
  preempted_recompute_ = &by_mode.Add({{"mode", "recompute"}});
  preempted_swap_ = &by_mode.Add({{"mode", "swap"}});
  auto& swapped = prometheus::BuildCounter()
                      .Name("pagoda_swapped_pages_total")
                      .Help("KV pages copied to the workers' swap space (out) and back (in).")
                      .Register(r);
  swapped_out_ = &swapped.Add({{"direction", "out"}});
  swapped_in_ = &swapped.Add({{"direction", "in"}});
  tenant_served_family_ = &prometheus::BuildCounter()
                               .Name("pagoda_tenant_served_tokens_total")
                               .Help(
                                   "Tokens served per tenant: prompt tokens computed (not "
                                   "cached) plus tokens generated, unweighted.")
                               .Register(r);
  tenant_queued_family_ = &prometheus::BuildGauge()
                               .Name("pagoda_tenant_queued_requests")
                               .Help("Requests waiting for admission, per tenant.")
                               .Register(r);
  tenant_running_family_ = &prometheus::BuildGauge()
                                .Name("pagoda_tenant_running_sequences")
                                .Help("Sequences running on a worker, per tenant.")
                                .Register(r);
  kv_used_family_ = &prometheus::BuildGauge()
                         .Name("pagoda_kv_cache_pages_used")
                         .Help("KV pages held by sequences, per worker.")
                         .Register(r);
  kv_total_family_ = &prometheus::BuildGauge()
                          .Name("pagoda_kv_cache_pages_capacity")
                          .Help("KV pages in the worker's arena, per worker.")
                          .Register(r);
  kv_cached_family_ = &prometheus::BuildGauge()
                           .Name("pagoda_kv_cache_pages_cached")
                           .Help(
                               "KV pages the prefix cache keeps that no sequence holds (reusable "
                               "by a hit, evicted least-recently-used first), per worker.")
                           .Register(r);
  prefix_queries_ = &AddCounter(r, "pagoda_prefix_cache_queries_total",
                                "Prefix cache queries, in prompt tokens looked up when requests "
                                "were admitted on a worker (vLLM: prefix_cache_queries).");
  prefix_hits_ = &AddCounter(r, "pagoda_prefix_cache_hits_total",
                             "Prefix cache hits, in tokens whose KV was reused instead of "
                             "computed (vLLM: prefix_cache_hits).");
  prompt_tokens_ = &AddCounter(r, "pagoda_prompt_tokens_total",
                               "Prompt tokens of requests that reached their first token.");
  generation_tokens_ =
      &AddCounter(r, "pagoda_generation_tokens_total", "Tokens generated (sampled and emitted).");
  success_family_ = &prometheus::BuildCounter()
                         .Name("pagoda_request_success_total")
                         .Help("Generate calls that ended OK, by finish reason.")
                         .Register(r);
  failure_family_ = &prometheus::BuildCounter()
                         .Name("pagoda_request_failure_total")
                         .Help("Generate calls that ended with an error status, by gRPC code.")
                         .Register(r);
  ttft_ = &AddHistogram(r, "pagoda_time_to_first_token_seconds",
                        "Arrival to first generated token.", kTtftBuckets);
  itl_ = &AddHistogram(r, "pagoda_inter_token_latency_seconds",
                       "Time between two consecutive tokens of one request.", kItlBuckets);
  e2e_ = &AddHistogram(r, "pagoda_e2e_request_latency_seconds",
                       "Arrival to the end of the request, whatever the reason.", kRequestBuckets);
  queue_ = &AddHistogram(r, "pagoda_request_queue_time_seconds",
                         "Arrival to first scheduling on a worker.", kRequestBuckets);
  iteration_tokens_ =
      &AddHistogram(r, "pagoda_iteration_tokens",
                    "Input tokens per plan (one iteration of one worker).", kIterationTokenBuckets);
  planning_ = &AddHistogram(r, "pagoda_iteration_planning_seconds",
                            "Time the scheduler core took to build one plan.", kPlanningBuckets);
  turnaround_ = &AddHistogram(r, "pagoda_scheduler_turnaround_seconds",
                              "A worker's result received to that worker's next plan handed to "
                              "the transport (decode, apply, plan, encode).",
                              kTurnaroundBuckets);
  ttft_ratio_ = &AddHistogram(r, "pagoda_ttft_prediction_ratio",
                              "Actual over predicted time to first token, for requests whose wait "
                              "was predicted at arrival (1 = exact; see --max-predicted-wait-s).",
                              kPredictionRatioBuckets);
  {
    absl::MutexLock lock(&refresh_mu_);
    // The tenant of every request that names none is always shown too.
    options.named_tenants.emplace_back(kDefaultTenant);
    for (const std::string& tenant : options.named_tenants) {
      tenant_labels_[tenant] = tenant;
      TenantSeriesFor(tenant);  // shown from the start, at 0
    }
  }
  scrape_view_ = std::make_shared<ScrapeView>(this);
}

SchedulerMetrics::~SchedulerMetrics() = default;

void SchedulerMetrics::OnPlan(int32_t num_tokens, double planning_seconds) {
  iteration_tokens_->Observe(num_tokens);
  planning_->Observe(planning_seconds);
}

void SchedulerMetrics::OnTurnaround(double seconds) { turnaround_->Observe(seconds); }

void SchedulerMetrics::OnFirstToken(double time_to_first_token_seconds, int32_t prompt_tokens) {
  ttft_->Observe(time_to_first_token_seconds);
  prompt_tokens_->Increment(prompt_tokens);
}

void SchedulerMetrics::OnToken(double inter_token_seconds) {
  generation_tokens_->Increment();
  if (inter_token_seconds >= 0) itl_->Observe(inter_token_seconds);
}

void SchedulerMetrics::OnRequestFinished(double e2e_seconds, double queue_seconds) {
  e2e_->Observe(e2e_seconds);
  if (queue_seconds >= 0) queue_->Observe(queue_seconds);
}

void SchedulerMetrics::OnFirstTokenPredicted(double actual_seconds, double predicted_seconds) {
  if (predicted_seconds > 0) ttft_ratio_->Observe(actual_seconds / predicted_seconds);
}

void SchedulerMetrics::OnRequestSucceeded(FinishReason reason) {
  success_family_->Add({{"finish_reason", FinishReasonName(reason)}}).Increment();
}

void SchedulerMetrics::OnRequestFailed(absl::StatusCode code) {
  // absl and gRPC share code numbers and names (INVALID_ARGUMENT, UNAVAILABLE, ...).
  failure_family_->Add({{"code", absl::StatusCodeToString(code)}}).Increment();
}

void SchedulerMetrics::SetSnapshotSource(std::function<EngineGauges()> source) {
  absl::MutexLock lock(&refresh_mu_);
  source_ = std::move(source);
}

void SchedulerMetrics::Refresh() const {
  absl::MutexLock lock(&refresh_mu_);
  if (!source_) return;
  const EngineGauges g = source_();
  running_->Set(static_cast<double>(g.running));
  waiting_->Set(static_cast<double>(g.waiting));
  preempted_->Set(static_cast<double>(g.preempted));
  workers_->Set(static_cast<double>(g.workers.size()));
  // The core keeps the running total; the counter follows it.
  auto follow = [](prometheus::Counter* counter, int64_t total, int64_t& seen) {
    if (total > seen) {
      counter->Increment(static_cast<double>(total - seen));
      seen = total;
    }
  };
  follow(preemptions_, g.preemptions_total, preemptions_seen_);
  follow(prefix_queries_, g.prefix_cache_queries, prefix_queries_seen_);
  follow(prefix_hits_, g.prefix_cache_hits, prefix_hits_seen_);
  follow(preempted_recompute_, g.preemptions_recompute, recompute_seen_);
  follow(preempted_swap_, g.preemptions_swap, swap_seen_);
  follow(swapped_out_, g.swapped_out_pages, swapped_out_seen_);
  follow(swapped_in_, g.swapped_in_pages, swapped_in_seen_);
  RefreshWorkers(g.workers);
  RefreshTenants(g.tenants);
}

const std::string& SchedulerMetrics::TenantLabel(const std::string& tenant) const {
  static const std::string kOther = kOtherTenantsLabel;
  if (auto it = tenant_labels_.find(tenant); it != tenant_labels_.end()) return it->second;
  if (other_labels_given_ >= max_tenant_labels_) return kOther;
  ++other_labels_given_;
  return tenant_labels_[tenant] = tenant;
}

SchedulerMetrics::TenantSeries& SchedulerMetrics::TenantSeriesFor(const std::string& label) const {
  TenantSeries& series = tenant_series_[label];
  if (series.served == nullptr) {
    series.served = &tenant_served_family_->Add({{"tenant", label}});
    series.queued = &tenant_queued_family_->Add({{"tenant", label}});
    series.running = &tenant_running_family_->Add({{"tenant", label}});
  }
  return series;
}

void SchedulerMetrics::RefreshTenants(const std::vector<EngineGauges::Tenant>& tenants) const {
  struct Sums {
    int64_t queued = 0, running = 0;
  };
  absl::flat_hash_map<std::string, Sums> sums;  // by label
  absl::flat_hash_map<std::string, int64_t> served_now;
  for (const EngineGauges::Tenant& t : tenants) {
    const std::string& label = TenantLabel(t.name);
    TenantSeries& series = TenantSeriesFor(label);
    Sums& sum = sums[label];
    sum.queued += t.queued;
    sum.running += t.running;
    // A total below the one seen is a new account (the core forgot the tenant meanwhile).
    const auto seen = served_seen_.find(t.name);
    const int64_t before =
        seen == served_seen_.end() || seen->second > t.served_tokens ? 0 : seen->second;
    if (t.served_tokens > before) {
      series.served->Increment(static_cast<double>(t.served_tokens - before));
    }
    served_now[t.name] = t.served_tokens;
  }
  // Only the tenants the core still keeps are remembered: the map stays as small as its list.
  served_seen_ = std::move(served_now);
  for (auto& [label, series] : tenant_series_) {
    const auto it = sums.find(label);
    series.queued->Set(it == sums.end() ? 0.0 : static_cast<double>(it->second.queued));
    series.running->Set(it == sums.end() ? 0.0 : static_cast<double>(it->second.running));
  }
}

void SchedulerMetrics::RefreshWorkers(const std::vector<EngineGauges::Worker>& workers) const {
  // Workers are shown by name; two workers given the same name are summed.
  struct Pages {
    int64_t used = 0, total = 0, cached = 0;
  };
  absl::flat_hash_map<std::string, Pages> pages;  // by name
  int64_t used = 0;
  int64_t total = 0;
  for (const EngineGauges::Worker& w : workers) {
    Pages& p = pages[w.name];
    p.used += w.pages_used;
    p.total += w.pages_total;
    p.cached += w.pages_cached;
    used += w.pages_used;
    total += w.pages_total;
  }
  kv_usage_->Set(total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0);
  // A worker that left takes its series with it.
  for (auto it = worker_gauges_.begin(); it != worker_gauges_.end();) {
    if (pages.contains(it->first)) {
      ++it;
      continue;
    }
    kv_used_family_->Remove(it->second.used);
    kv_total_family_->Remove(it->second.total);
    kv_cached_family_->Remove(it->second.cached);
    worker_gauges_.erase(it++);
  }
  for (const auto& [name, p] : pages) {
    WorkerGauges& g = worker_gauges_[name];
    if (g.used == nullptr) {
      g.used = &kv_used_family_->Add({{"worker", name}});
      g.total = &kv_total_family_->Add({{"worker", name}});
      g.cached = &kv_cached_family_->Add({{"worker", name}});
    }
    g.used->Set(static_cast<double>(p.used));
    g.total->Set(static_cast<double>(p.total));
    g.cached->Set(static_cast<double>(p.cached));
  }
}

absl::StatusOr<int> SchedulerMetrics::Serve(const std::string& address) {
  return common::StartMetricsExposer(address, scrape_view_, &exposer_);
}

std::string SchedulerMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(scrape_view_->Collect());
}

}  // namespace pagoda::scheduler
