// Token sampling on the GPU, one row of logits per sequence, with no host round trip.
//
// Per row: temperature <= 0 (or top_k == 1) is greedy argmax, lowest id on ties. Otherwise
// p_i = softmax(logits / temperature), restricted to the top_k most probable tokens (0 = off),
// then to the nucleus: the most probable tokens whose mass reaches top_p of what is left
// (top_p <= 0 or >= 1 = off), then to p_i >= min_p * p_max (min_p 0 = off); one draw u =
// CounterUniform(seed, index) (the CPU sampler's counter-based generator,
// worker/sampling/sampler.h) picks a token from the kept mass. Deterministic: the same logits,
// parameters, seed and index give the same token on the same device. NaN logits count as -infinity.
// Greedy rows equal the CPU Sample() exactly; sampled rows draw from the same kept distribution
// (not necessarily the same token: the CPU walks candidates by probability, the GPU by id), except
// that every token tied with the top-k or top-p cut-off value is kept (the CPU keeps the lower
// ids). Algorithm: sampling_kernel.cuh.
//
// The launcher never allocates or synchronizes and has a fixed grid for fixed rows/vocab (CUDA
// graph safe); it may overwrite `logits`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/kernel_args.h"

namespace pagoda::worker::cuda {

// SampleRowParams (per-row temperature, top_k, top_p, seed, index) is in kernel_args.h.

// 0 today: the kernel needs only shared memory. Callers still pass this many bytes.
size_t SampleWorkspaceBytes(int rows, int vocab);
// Largest vocabulary LaunchSample supports (its fixed-point masses would overflow past it).
inline constexpr int kMaxSampleVocab = 1 << 23;

struct SampleParams {
  float* logits;                  // [rows][vocab] float32 (device); may be overwritten
  const SampleRowParams* params;  // [rows] (device)
  int32_t* out_tokens;            // [rows] (device)
  // [rows] (device) or null: the sampled token's (l - m) / T (0 for greedy rows), from which
  // logprobs.h derives its logprob.
  float* out_logprob_unnormalized = nullptr;
  int rows = 0;
  int vocab = 0;
  void* workspace = nullptr;  // SampleWorkspaceBytes(rows, vocab) bytes (device)
};
// One block per row. INVALID_ARGUMENT naming the argument when rows < 0, vocab <= 0 or
// vocab > 2^23, or a pointer is null while rows > 0; otherwise the launch's own error (INTERNAL).
absl::Status LaunchSample(const SampleParams& p, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
