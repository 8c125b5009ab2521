// WorkerMetrics: every Prometheus metric a worker exports, defined in this one place.
//
// Prefix pagoda_worker_, base units (seconds, bytes; tokens are counts). One worker process is
// one scrape target, so no metric carries a worker label: Prometheus adds `instance`.
//
//   pagoda_worker_step_seconds        histogram  one plan's execution, end to end
//   pagoda_worker_forward_seconds     histogram  its forward pass and sampling (ForwardSample)
//   pagoda_worker_sampling_seconds    histogram  writing the sampled tokens into its result
//   pagoda_worker_step_tokens         histogram  input tokens per plan
//   pagoda_worker_step_failures_total counter    plans that could not be executed
//   pagoda_worker_swapped_pages_total counter    KV pages copied to the host swap space
//                                                (direction="out") and back (direction="in")
//   pagoda_worker_kv_arena_bytes      gauge      size of the KV page arena
//   pagoda_worker_attached            gauge      1 while attached to the scheduler
//   pagoda_worker_device_memory_used_bytes  gauge (GPU backends only; absent on CPU)
//   pagoda_worker_forward_part_seconds_total  counter  forward pass and sampling time by part
//                                                      (label part: qkv_products, ..., sampling;
//                                                      backends that time their parts: the CPU)
//   pagoda_worker_forward_part_flops_total    counter  FLOPs of those parts (the products and
//                                                      attention; 0 for the others)
//
// Thread-safe (prometheus-cpp metrics are atomic).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/runner/runner.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace pagoda::worker {

class WorkerMetrics {
 public:
  WorkerMetrics();
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Feeds the step histograms and the swap counters; suits Runner::SetStepObserver.
  void ObserveStep(const StepTiming& timing);
  void SetKvArenaBytes(int64_t bytes);
  void SetAttached(bool attached);
  // For a GPU backend: device memory in use. The first call creates the series, so a CPU
  // worker, which never calls it, does not export it.
  void SetDeviceMemoryUsedBytes(int64_t bytes);

  // Serves GET /metrics on `address` (HOST:PORT; port 0 picks a free one) from a small HTTP
  // server with its own threads. Returns the bound port, or UNAVAILABLE when the address cannot
  // be bound. At most once.
  absl::StatusOr<int> Serve(const std::string& address);
  // The text exposition format, as a scrape would see it.
  std::string Render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* step_;
  prometheus::Histogram* forward_;
  prometheus::Histogram* sampling_;
  prometheus::Histogram* tokens_;
  prometheus::Counter* failures_;
  prometheus::Counter* swapped_out_;
  prometheus::Counter* swapped_in_;
  prometheus::Gauge* kv_arena_bytes_;
  prometheus::Gauge* attached_;
  absl::Mutex device_mu_;
  prometheus::Gauge* device_memory_ ABSL_GUARDED_BY(device_mu_) = nullptr;
  // Created at the first step whose backend times its parts (ObserveStep's thread only).
  std::array<prometheus::Counter*, kNumForwardParts> part_seconds_{};
  std::array<prometheus::Counter*, kNumForwardParts> part_flops_{};
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace pagoda::worker
