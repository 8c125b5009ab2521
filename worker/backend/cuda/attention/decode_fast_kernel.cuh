// Decode attention, fast path: head_dim 64 or 128, up to 8 query heads per KV head, 16-byte
// loads (steps of the block are described in decode_kernels.cuh). Internal to
// decode_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/attention/decode_kernels.cuh"

namespace pagoda::worker::cuda::attention_internal {

// Sums v[g] over the kLanes lanes of an aligned lane group, for every g < kHeads, and returns the
// total of head lane / (kLanes / kHeads) (lane = index within the group). A transposed butterfly:
// at each of the first log2(kHeads) steps a lane keeps half of its heads (the upper half when its
// bit `offset` is set) and receives its partner's partial sums of that half, so the kHeads values
// cost kHeads - 1 + log2(kLanes / kHeads) shuffles instead of kHeads * log2(kLanes).
template <int kHeads, int kLanes>
__device__ __forceinline__ float GroupReduceTransposed(float (&v)[kHeads], int lane) {
  static_assert(kHeads <= kLanes && kLanes <= 32, "one head per lane at least");
#pragma unroll
  for (int step = 0; (kHeads >> step) > 1; ++step) {
    const int half = (kHeads >> step) / 2;
    const int offset = kLanes >> (step + 1);
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float keep = upper ? v[i + half] : v[i];
      const float send = upper ? v[i] : v[i + half];
      v[i] = keep + __shfl_xor_sync(kFullMask, send, offset);
    }
  }
  float s = v[0];
#pragma unroll
  for (int offset = kLanes / (2 * kHeads); offset > 0; offset /= 2) {
    s += __shfl_xor_sync(kFullMask, s, offset);
  }
  return s;
}

// Fast path: head_dim kHeadDim (64 or 128), group <= kGroupPad (a power of two <= 8; heads past
// the group are zero and never stored). kLanes = kHeadDim / 8 lanes read one K/V row with one
// 16-byte load each; the block reads kThreads / kLanes rows per step and kUnroll steps per batch
// of loads.
template <typename T, int kHeadDim, int kGroupPad, bool kContiguous>
__global__ void __launch_bounds__(kDecodeThreads) DecodeFastKernel(const DecodeArgs a) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  constexpr int kLanes = kHeadDim / 8;
  constexpr int kRowsPerStep = kDecodeThreads / kLanes;
  constexpr int kUnroll = kGroupPad >= 8 ? 4 : 8;
  constexpr int kStep = kRowsPerStep * kUnroll;
  constexpr int kSubGroup = kLanes / kGroupPad;  // lanes that end up with the same head's score
  constexpr int kScoreFloats = kGroupPad * kScoreStride;
  constexpr int kReduceFloats = kDecodeWarps * kGroupPad * kHeadDim;
  constexpr int kSmemFloats = kScoreFloats > kReduceFloats ? kScoreFloats : kReduceFloats;
  static_assert(kHeadDim % 8 == 0 && kLanes <= 32 && 32 % kLanes == 0, "lane groups in a warp");
  static_assert(kGroupPad <= kLanes, "the transposed reduction needs a lane per head");

  __shared__ int slots[kDecodePartitionTokens];
  // [kGroupPad][kScoreStride] scores, then [kDecodeWarps][kGroupPad][kHeadDim] V partials.
  __shared__ __align__(16) float smem[kSmemFloats];
  __shared__ float row_max[kGroupPad], row_sum[kGroupPad];

  const int kvh = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  Partition p;
  if (!GetPartition(a, seq, part, &p)) return;
  const int tid = threadIdx.x, lane = tid % kLanes, row_in_step = tid / kLanes;
  const int group = a.group;
  FillSlots<kContiguous>(a, seq, p, slots);

  // The group's query heads, 8 dims per lane, pre-scaled into base-2 logits.
  float q[kGroupPad][8];
  const T* q_row = static_cast<const T*>(a.q) +
                   (static_cast<size_t>(p.row) * a.n_heads + kvh * group) * kHeadDim + lane * 8;
#pragma unroll
  for (int g = 0; g < kGroupPad; ++g) {
    if (g < group) {
      Unpack8<T>(Load16(q_row + g * kHeadDim), q[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] *= a.scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = 0.0f;
    }
  }
  __syncthreads();

  // K pass. The loop bounds are block-uniform so that every lane takes part in the shuffles.
  const size_t row_stride = static_cast<size_t>(a.n_kv_heads) * kHeadDim;  // elements per slot
  const T* k_base = static_cast<const T*>(a.k_cache) + kvh * kHeadDim + lane * 8;
  float* scores = smem;
  for (int base = 0; base < p.n; base += kStep) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kRowsPerStep + row_in_step;
      raw[u] = t < p.n ? Load16(k_base + slots[t] * row_stride) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[8];
      Unpack8<T>(raw[u], k);
      float dot[kGroupPad];
#pragma unroll
      for (int g = 0; g < kGroupPad; ++g) {
        dot[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot[g] = fmaf(q[g][i], k[i], dot[g]);
      }
      const float s = GroupReduceTransposed<kGroupPad, kLanes>(dot, lane);
      const int t = base + u * kRowsPerStep + row_in_step;
      const int h = lane / kSubGroup;
      if (t < p.n && lane % kSubGroup == 0 && h < group) scores[h * kScoreStride + t] = s;
    }
  }
  __syncthreads();
  PartitionSoftmax(scores, p.n, group, row_max, row_sum);
  __syncthreads();

  // V pass: each lane accumulates its 8 dims of every head over its rows.
  float acc[kGroupPad][8];
#pragma unroll
  for (int g = 0; g < kGroupPad; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
  const T* v_base = static_cast<const T*>(a.v_cache) + kvh * kHeadDim + lane * 8;
  for (int base = 0; base < p.n; base += kStep) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kRowsPerStep + row_in_step;
      raw[u] = t < p.n ? Load16(v_base + slots[t] * row_stride) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kRowsPerStep + row_in_step;
      if (t >= p.n) continue;
      float v[8];
      Unpack8<T>(raw[u], v);
#pragma unroll
      for (int g = 0; g < kGroupPad; ++g) {
        if (g >= group) continue;
        const float w = scores[g * kScoreStride + t];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(w, v[i], acc[g][i]);
      }
    }
  }

  // Reduce the lane groups of a warp by shuffles, then the warps through shared memory.
#pragma unroll
  for (int offset = kLanes; offset < 32; offset *= 2) {
#pragma unroll
    for (int g = 0; g < kGroupPad; ++g) {
      if (g >= group) continue;  // block-uniform: every lane shuffles or none does
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] += __shfl_xor_sync(kFullMask, acc[g][i], offset);
    }
  }
  __syncthreads();  // every read of the scores is done: smem becomes the reduction buffer
  float* red = smem;
  const int warp = tid / 32;
  if (tid % 32 < kLanes) {
#pragma unroll
    for (int g = 0; g < kGroupPad; ++g) {
      if (g >= group) continue;
#pragma unroll
      for (int i = 0; i < 8; ++i) red[(warp * kGroupPad + g) * kHeadDim + lane * 8 + i] = acc[g][i];
    }
  }
  __syncthreads();
  for (int o = tid; o < group * kHeadDim; o += kDecodeThreads) {
    const int g = o / kHeadDim, d = o % kHeadDim;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) sum += red[(w * kGroupPad + g) * kHeadDim + d];
    StoreResult<T>(a, p, seq, part, kvh * group + g, d, sum, row_sum[g]);
  }
  if (tid < group) StoreStats(a, p, seq, part, kvh * group + tid, row_max[tid], row_sum[tid]);
  static_assert(kSmemFloats >= kMergeScratchFloats, "the merge's scratch fits");
  FinishPartitions<T>(a, p, seq, kvh, smem);
}

}  // namespace pagoda::worker::cuda::attention_internal
