#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/norm/rms_norm.h"

namespace pagoda::worker::cuda {
namespace {

constexpr int kThreads = 256;

// x and out may alias (in-place, as the CPU twin allows): neither is __restrict__.
__global__ void RmsNormKernel(const float* x,                    // [num_tokens][dim]
                              const float* __restrict__ weight,  // [dim]
                              float* out,                        // [num_tokens][dim]
                              int dim, float eps) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * dim;
  float* out_row = out + static_cast<size_t>(blockIdx.x) * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) sum += row[i] * row[i];
  // Warp reduction, then one partial per warp through shared memory.
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  __shared__ float partial[kThreads / 32];
  __shared__ float inv_rms;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
    inv_rms = rsqrtf(total / dim + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += kThreads) out_row[i] = row[i] * inv_rms * weight[i];
}

}  // namespace

cudaError_t LaunchRmsNorm(const cpu::RmsNormParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  return LaunchKernel(RmsNormKernel, p.num_tokens, kThreads, 0, stream, p.x, p.weight, p.out, p.dim,
                      p.eps);
}

}  // namespace pagoda::worker::cuda
