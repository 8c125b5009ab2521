// PhaseTimer: where a forward pass's device time goes, by part of the pass (embedding, norms,
// each projection, RoPE + KV write, attention, SiLU·mul, classifier, sampling). For benchmarks:
// CudaBackend::set_phase_timer runs every pass eagerly (no CUDA graphs) with a CUDA event
// recorded on the compute stream after each part, and each interval between two events is added
// to the part that ended it. Serving never sets one.
//
// With `hold`, each pass first enqueues a host function that keeps the stream waiting while the
// host enqueues the pass's first kHoldMarks parts (or all of it, at Release), so the host's
// launch rate leaves no gaps between kernels to be counted in the intervals: a decode step's
// kernels can be shorter than their launches. The hold ends there because a stream takes about
// a thousand pending commands before a launch blocks; by then the device has a few hundred
// queued, and the host enqueues the rest faster than they run. The host emulator runs each
// launch as it is made, so it takes hold = false.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace pagoda::worker::cuda {

class PhaseTimer {
 public:
  enum Phase : int {
    kEmbed,      // token embedding and the step's RoPE table
    kNorm,       // the layers' RMSNorms
    kQkv,        // the fused QKV projection
    kRope,       // QKV biases and norms where the model has them, RoPE, KV page write
    kAttention,  // decode and prefill attention
    kOutput,     // the attention output projection (residual add fused)
    kGateUp,     // the fused gate/up projection (and SiLU·up where a GEMV fuses it)
    kSiluMul,    // SiLU(gate)·up, where not fused
    kDown,       // the down projection (residual add fused)
    kHead,       // the final norm and the classifier of the sampled rows
    kSample,     // masks, logit adjustments, logprobs, sampling
    kPhases
  };
  static const char* Name(int phase);

  explicit PhaseTimer(bool hold) : hold_(hold) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // Starts a pass on `stream`: its first event (and, with hold, the wait for Release).
  absl::Status Begin(cudaStream_t stream);
  // Ends `phase` on `stream`: the time since the previous event is the phase's. An error is
  // kept for Collect.
  void Mark(Phase phase, cudaStream_t stream);
  // The pass is wholly enqueued: the stream may run it. Call after every Begin, even when
  // enqueueing failed.
  void Release();
  // After the pass's stream has synchronized: adds its intervals to the totals. FailedPrecondition
  // (nothing added) when the hold ran out instead of being released: the host blocked while
  // enqueueing (a stream full of pending launches, a kernel loaded at its first launch), and
  // the intervals would count its gaps.
  absl::Status Collect();

  double ms(int phase) const { return ms_[static_cast<size_t>(phase)]; }
  double total_ms() const;
  int passes() const { return passes_; }

 private:
  static void CUDART_CB Hold(void* self);
  static constexpr size_t kHoldMarks = 128;  // about 300 commands: kernels and events

  const bool hold_;
  std::atomic<bool> released_{true};
  std::atomic<bool> timed_out_{false};  // set by Hold when its deadline passed
  std::vector<cudaEvent_t> events_;     // reused by every pass; [0] is its start
  std::vector<Phase> phases_;           // phases_[i] ends at events_[i + 1]
  cudaError_t error_ = cudaSuccess;
  std::array<double, kPhases> ms_{};
  int passes_ = 0;
};

}  // namespace pagoda::worker::cuda
