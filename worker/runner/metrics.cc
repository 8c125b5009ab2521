#include "worker/runner/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>

#include "absl/strings/str_format.h"
#include "common/metrics_exposer.h"

namespace pagoda::worker {
namespace {

using prometheus::Histogram;

// From a small model on a CPU (sub-millisecond) to a long prefill on a big one.
const Histogram::BucketBoundaries kStepBuckets = {1e-4,  2.5e-4, 5e-4,  1e-3, 2.5e-3, 5e-3, 0.01,
                                                  0.025, 0.05,   0.075, 0.1,  0.15,   0.2,  0.3,
                                                  0.5,   0.75,   1.0,   2.5,  5.0,    10.0, 30.0};
const Histogram::BucketBoundaries kSamplingBuckets = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
const Histogram::BucketBoundaries kTokenBuckets = {1,   2,   4,    8,    16,   32,   64,   128,
                                                   256, 512, 1024, 2048, 4096, 8192, 16384};

Histogram& AddHistogram(prometheus::Registry& r, const std::string& name, const std::string& help,
                        const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
}

prometheus::Gauge& AddGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

WorkerMetrics::WorkerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  step_ = &AddHistogram(r, "pagoda_worker_step_seconds",
                        "One plan's execution on this worker: bookkeeping, forward pass, sampling.",
                        kStepBuckets);
  forward_ = &AddHistogram(r, "pagoda_worker_forward_seconds",
                           "The model forward pass of one plan and the sampling of its tokens.",
                           kStepBuckets);
  sampling_ = &AddHistogram(r, "pagoda_worker_sampling_seconds",
                            "Writing one plan's sampled tokens (and log-probabilities) into its "
                            "result.",
                            kSamplingBuckets);
  tokens_ =
      &AddHistogram(r, "pagoda_worker_step_tokens", "Input tokens of one plan.", kTokenBuckets);
  failures_ = &prometheus::BuildCounter()
                   .Name("pagoda_worker_step_failures_total")
                   .Help("Plans this worker could not execute (answered with an error).")
                   .Register(r)
                   .Add({});
  auto& swapped = prometheus::BuildCounter()
                      .Name("pagoda_worker_swapped_pages_total")
                      .Help("KV pages copied to the host swap space (out) and back (in).")
                      .Register(r);
  swapped_out_ = &swapped.Add({{"direction", "out"}});
  swapped_in_ = &swapped.Add({{"direction", "in"}});
  kv_arena_bytes_ =
      &AddGauge(r, "pagoda_worker_kv_arena_bytes", "Size of this worker's KV page arena.");
  attached_ = &AddGauge(r, "pagoda_worker_attached",
                        "1 while this worker is attached to the scheduler, 0 otherwise.");
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::ObserveStep(const StepTiming& timing) {
  // Swaps done count even in a plan that then failed: the pages were copied.
  swapped_out_->Increment(timing.pages_swapped_out);
  swapped_in_->Increment(timing.pages_swapped_in);
  if (!timing.ok) {
    failures_->Increment();
    return;
  }
  step_->Observe(timing.step_seconds);
  forward_->Observe(timing.forward_seconds);
  sampling_->Observe(timing.sampling_seconds);
  tokens_->Observe(timing.tokens);
  if (!timing.has_parts) return;
  if (part_seconds_[0] == nullptr) {
    auto& seconds = prometheus::BuildCounter()
                        .Name("pagoda_worker_forward_part_seconds_total")
                        .Help(
                            "Forward pass and host sampling time by part: the weight products, "
                            "attention, element-wise work, sampling.")
                        .Register(*registry_);
    auto& flops = prometheus::BuildCounter()
                      .Name("pagoda_worker_forward_part_flops_total")
                      .Help("Floating-point operations of the weight products and attention.")
                      .Register(*registry_);
    for (int i = 0; i < kNumForwardParts; ++i) {
      const std::string part = ForwardPartName(static_cast<ForwardPart>(i));
      part_seconds_[i] = &seconds.Add({{"part", part}});
      part_flops_[i] = &flops.Add({{"part", part}});
    }
  }
  for (int i = 0; i < kNumForwardParts; ++i) {
    part_seconds_[i]->Increment(timing.parts.seconds[i]);
    part_flops_[i]->Increment(timing.parts.flops[i]);
  }
}

void WorkerMetrics::SetKvArenaBytes(int64_t bytes) {
  kv_arena_bytes_->Set(static_cast<double>(bytes));
}

void WorkerMetrics::SetAttached(bool attached) { attached_->Set(attached ? 1 : 0); }

void WorkerMetrics::SetDeviceMemoryUsedBytes(int64_t bytes) {
  absl::MutexLock lock(&device_mu_);
  if (device_memory_ == nullptr) {
    device_memory_ = &AddGauge(*registry_, "pagoda_worker_device_memory_used_bytes",
                               "Accelerator memory in use by this worker.");
  }
  device_memory_->Set(static_cast<double>(bytes));
}

absl::StatusOr<int> WorkerMetrics::Serve(const std::string& address) {
  return common::StartMetricsExposer(address, registry_, &exposer_);
}

std::string WorkerMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace pagoda::worker
