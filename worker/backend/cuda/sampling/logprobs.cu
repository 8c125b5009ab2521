// Logit adjustments and logprobs on the GPU (logprobs.h).
#include "common/status_macros.h"
#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/sampling/logprobs.h"
#include "worker/backend/cuda/sampling/sampling.h"
#include "worker/backend/cuda/sampling/sampling_kernel.cuh"

namespace pagoda::worker::cuda {
namespace {

using sampling_internal::Better;
using sampling_internal::kFullMask;
using sampling_internal::ValueId;
using sampling_internal::WarpArgmax;

constexpr int kAdjustThreads = 256;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void AdjustLogitsKernel(float* logits,                                  // [rows][vocab]
                                   const AdjustLogitsEntry* __restrict__ entries,  // [count]
                                   int count, int vocab) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= count) return;
  const AdjustLogitsEntry e = entries[i];
  float& l = logits[static_cast<size_t>(e.row) * static_cast<size_t>(vocab) + e.adj.token];
  l = AdjustLogit(l, e.adj);
}

constexpr int kMaskThreads = 256;

__global__ void MaskLogitsKernel(float* logits,                     // [rows][vocab]
                                 const int32_t* __restrict__ rows,  // [count]
                                 const uint32_t* __restrict__ masks, int vocab, int words) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= vocab) return;
  const int i = static_cast<int>(blockIdx.y);
  const uint32_t word = masks[static_cast<size_t>(i) * static_cast<size_t>(words) + t / 32];
  if ((word >> (t % 32) & 1u) == 0) {
    logits[static_cast<size_t>(rows[i]) * static_cast<size_t>(vocab) + t] = -INFINITY;
  }
}

struct LogprobsShared {
  float warp_value[kWarps];
  int32_t warp_id[kWarps];
  float warp_sum[kWarps];
};

// The best (value, id) of the row that comes strictly after `after` in Better's order (all of
// them when after.id < 0); every thread gets it. {-inf, INT32_MAX} when none is left.
__device__ ValueId BlockBestAfter(const float* row, int vocab, ValueId after, LogprobsShared& s) {
  const int lane = threadIdx.x % 32;
  ValueId best{-INFINITY, INT32_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float l = row[i];
    const ValueId c{isnan(l) ? -INFINITY : l, i};
    if ((after.id < 0 || Better(after, c)) && Better(c, best)) best = c;
  }
  best = WarpArgmax(best);
  __syncthreads();  // every thread is done reading the previous reduction's partials
  if (lane == 0) {
    s.warp_value[threadIdx.x / 32] = best.value;
    s.warp_id[threadIdx.x / 32] = best.id;
  }
  __syncthreads();
  best =
      lane < kWarps ? ValueId{s.warp_value[lane], s.warp_id[lane]} : ValueId{-INFINITY, INT32_MAX};
  return WarpArgmax(best);
}

// Sum over the block in a fixed order; every thread gets it.
__device__ float BlockSum(float v, LogprobsShared& s) {
  const int lane = threadIdx.x % 32;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  __syncthreads();
  if (lane == 0) s.warp_sum[threadIdx.x / 32] = v;
  __syncthreads();
  v = lane < kWarps ? s.warp_sum[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    LogprobsKernel(const float* __restrict__ logits,            // [rows][vocab]
                   const SampleRowParams* __restrict__ params,  // [rows]
                   float* __restrict__ log_norm,                // [rows]
                   int32_t* __restrict__ top_ids,               // [rows][kMaxLogprobsTop]
                   float* __restrict__ top_logprobs,            // [rows][kMaxLogprobsTop]
                   int vocab) {
  __shared__ LogprobsShared shared;
  const int r = static_cast<int>(blockIdx.x);
  const SampleRowParams p = params[r];
  if (p.top_logprobs < 0) return;  // uniform across the block
  const float* row = logits + static_cast<size_t>(r) * static_cast<size_t>(vocab);
  const float t = p.temperature > 0 ? p.temperature : 1.0f;
  const ValueId top = BlockBestAfter(row, vocab, {0.0f, -1}, shared);
  const float m = top.value;
  float local = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float l = row[i];
    if (!isnan(l)) local += expf((l - m) / t);
  }
  const float norm = logf(BlockSum(local, shared));
  if (threadIdx.x == 0) log_norm[r] = norm;
  const int k = min(min(p.top_logprobs, kMaxLogprobsTop), vocab);
  ValueId at = top;
  for (int j = 0; j < k; ++j) {
    if (j > 0) at = BlockBestAfter(row, vocab, at, shared);
    if (threadIdx.x == 0) {
      top_ids[r * kMaxLogprobsTop + j] = at.id;
      top_logprobs[r * kMaxLogprobsTop + j] = (at.value - m) / t - norm;
    }
  }
}

}  // namespace

absl::Status LaunchAdjustLogits(const AdjustLogitsParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchAdjustLogits");
  check.Require(p.count >= 0, "count %d must be >= 0", p.count)
      .Require(p.vocab > 0, "vocab %d must be > 0", p.vocab);
  if (p.count == 0 || !check.status().ok()) return check.status();
  check.RequirePointer(p.logits, "logits").RequirePointer(p.entries, "entries");
  RETURN_IF_ERROR(check.status());
  return CudaStatus(
      LaunchKernel(AdjustLogitsKernel, (p.count + kAdjustThreads - 1) / kAdjustThreads,
                   kAdjustThreads, 0, stream, p.logits, p.entries, p.count, p.vocab),
      "LaunchAdjustLogits");
}

absl::Status LaunchMaskLogits(const MaskLogitsParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchMaskLogits");
  check.Require(p.count >= 0, "count %d must be >= 0", p.count)
      .Require(p.vocab > 0, "vocab %d must be > 0", p.vocab)
      .Require(p.count <= 65535, "count %d must be <= 65535", p.count)
      .Require(int64_t{p.words} * 32 >= p.vocab, "words %d must cover vocab %d", p.words, p.vocab);
  if (p.count == 0 || !check.status().ok()) return check.status();
  check.RequirePointer(p.logits, "logits")
      .RequirePointer(p.rows, "rows")
      .RequirePointer(p.masks, "masks");
  RETURN_IF_ERROR(check.status());
  const dim3 grid((p.vocab + kMaskThreads - 1) / kMaskThreads, p.count);
  return CudaStatus(LaunchKernel(MaskLogitsKernel, grid, kMaskThreads, 0, stream, p.logits, p.rows,
                                 p.masks, p.vocab, p.words),
                    "LaunchMaskLogits");
}

absl::Status LaunchLogprobs(const LogprobsParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchLogprobs");
  check.Require(p.rows >= 0, "rows %d must be >= 0", p.rows)
      .Require(p.vocab > 0, "vocab %d must be > 0", p.vocab);
  if (p.rows == 0 || !check.status().ok()) return check.status();
  check.RequirePointer(p.logits, "logits")
      .RequirePointer(p.params, "params")
      .RequirePointer(p.log_norm, "log_norm")
      .RequirePointer(p.top_ids, "top_ids")
      .RequirePointer(p.top_logprobs, "top_logprobs");
  RETURN_IF_ERROR(check.status());
  return CudaStatus(LaunchKernel(LogprobsKernel, p.rows, kThreads, 0, stream, p.logits, p.params,
                                 p.log_norm, p.top_ids, p.top_logprobs, p.vocab),
                    "LaunchLogprobs");
}

}  // namespace pagoda::worker::cuda
