#include "worker/backend/cuda/phase_timer.h"

#include <chrono>
#include <numeric>
#include <thread>

#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {

const char* PhaseTimer::Name(int phase) {
  static constexpr const char* kNames[kPhases] = {"embed",     "norm",   "qkv",     "rope_kv",
                                                  "attention", "output", "gate_up", "silu_mul",
                                                  "down",      "head",   "sample"};
  return phase >= 0 && phase < kPhases ? kNames[phase] : "?";
}

PhaseTimer::~PhaseTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void CUDART_CB PhaseTimer::Hold(void* self) {
  // Bounded, so that a pass whose Release never comes cannot hang the device.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto* timer = static_cast<PhaseTimer*>(self);
  while (!timer->released_.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timer->timed_out_.store(true, std::memory_order_release);
      return;
    }
    std::this_thread::yield();
  }
}

absl::Status PhaseTimer::Begin(cudaStream_t stream) {
  phases_.clear();
  error_ = cudaSuccess;
  timed_out_.store(false, std::memory_order_release);
  if (events_.empty()) {
    cudaEvent_t e;
    if (const cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) {
      return absl::InternalError(
          absl::StrFormat("phase timer: cudaEventCreate: %s", cudaGetErrorString(err)));
    }
    events_.push_back(e);
  }
  if (hold_) {
    released_.store(false, std::memory_order_release);
    if (const cudaError_t err = cudaLaunchHostFunc(stream, &PhaseTimer::Hold, this);
        err != cudaSuccess) {
      released_.store(true, std::memory_order_release);
      return absl::InternalError(
          absl::StrFormat("phase timer: cudaLaunchHostFunc: %s", cudaGetErrorString(err)));
    }
  }
  if (const cudaError_t err = cudaEventRecord(events_[0], stream); err != cudaSuccess) {
    Release();
    return absl::InternalError(
        absl::StrFormat("phase timer: cudaEventRecord: %s", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

void PhaseTimer::Mark(Phase phase, cudaStream_t stream) {
  if (error_ != cudaSuccess) return;
  const size_t at = phases_.size() + 1;
  if (at == events_.size()) {
    cudaEvent_t e;
    if ((error_ = cudaEventCreate(&e)) != cudaSuccess) return;
    events_.push_back(e);
  }
  if ((error_ = cudaEventRecord(events_[at], stream)) != cudaSuccess) return;
  phases_.push_back(phase);
  if (phases_.size() == kHoldMarks) Release();
}

void PhaseTimer::Release() { released_.store(true, std::memory_order_release); }

absl::Status PhaseTimer::Collect() {
  if (error_ != cudaSuccess) {
    return absl::InternalError(
        absl::StrFormat("phase timer: recording an event: %s", cudaGetErrorString(error_)));
  }
  if (timed_out_.load(std::memory_order_acquire)) {
    phases_.clear();
    return absl::FailedPreconditionError(
        "phase timer: the host blocked while enqueueing a held pass (a stream full of launches, "
        "or a kernel loaded at its first launch: run the pass once untimed first); its parts "
        "would count launch gaps, so none were added");
  }
  for (size_t i = 0; i < phases_.size(); ++i) {
    float ms = 0;
    if (const cudaError_t err = cudaEventElapsedTime(&ms, events_[i], events_[i + 1]);
        err != cudaSuccess) {
      return absl::InternalError(
          absl::StrFormat("phase timer: cudaEventElapsedTime: %s", cudaGetErrorString(err)));
    }
    ms_[static_cast<size_t>(phases_[i])] += ms;
  }
  phases_.clear();
  ++passes_;
  return absl::OkStatus();
}

double PhaseTimer::total_ms() const { return std::accumulate(ms_.begin(), ms_.end(), 0.0); }

}  // namespace pagoda::worker::cuda
