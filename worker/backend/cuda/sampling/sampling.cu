// GPU token sampling: one block of kThreads per row (the algorithm is in sampling_kernel.cuh).
#include "common/status_macros.h"
#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/sampling/counter_uniform.cuh"
#include "worker/backend/cuda/sampling/sampling.h"
#include "worker/backend/cuda/sampling/sampling_kernel.cuh"

namespace pagoda::worker::cuda {
namespace {

using sampling_internal::SampleShared;

constexpr int kThreads = 1024;
// Probabilities the shared-memory list holds once the threshold searches have narrowed the
// candidates (32 KiB of the 48 KiB of static shared memory).
constexpr int kCapacity = 8192;

__global__ void __launch_bounds__(kThreads, 2)
    SampleKernel(float* logits,                               // [rows][vocab], overwritten
                 const SampleRowParams* __restrict__ params,  // [rows]
                 int32_t* __restrict__ out_tokens,            // [rows]
                 float* __restrict__ out_logp,                // [rows] or null
                 int vocab) {
  __shared__ SampleShared<kCapacity> shared;
  sampling_internal::SampleRow<kThreads, kCapacity>(logits, params, out_tokens, out_logp, vocab,
                                                    static_cast<int>(blockIdx.x), shared);
}

__global__ void CounterUniformKernel(const uint64_t* __restrict__ seeds,    // [n]
                                     const uint64_t* __restrict__ indices,  // [n]
                                     double* __restrict__ out,              // [n]
                                     int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = CounterUniform(seeds[i], indices[i]);
}

}  // namespace

size_t SampleWorkspaceBytes(int rows, int vocab) { return 0; }

absl::Status LaunchSample(const SampleParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchSample");
  check.Require(p.rows >= 0 && p.rows <= 0x7fffffff, "rows %d must be >= 0", p.rows)
      .Require(p.vocab > 0 && p.vocab <= sampling_internal::kMaxVocab,
               "vocab %d must be in [1, %d]", p.vocab, sampling_internal::kMaxVocab);
  if (p.rows == 0 || !check.status().ok()) return check.status();
  check.RequirePointer(p.logits, "logits")
      .RequirePointer(p.params, "params")
      .RequirePointer(p.out_tokens, "out_tokens");
  RETURN_IF_ERROR(check.status());
  return CudaStatus(LaunchKernel(SampleKernel, p.rows, kThreads, 0, stream, p.logits, p.params,
                                 p.out_tokens, p.out_logprob_unnormalized, p.vocab),
                    "LaunchSample");
}

cudaError_t LaunchCounterUniformForTesting(const uint64_t* seeds, const uint64_t* indices,
                                           double* out, int n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int kBlock = 256;
  return LaunchKernel(CounterUniformKernel, (n + kBlock - 1) / kBlock, kBlock, 0, stream, seeds,
                      indices, out, n);
}

}  // namespace pagoda::worker::cuda
