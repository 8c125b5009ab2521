// Decode attention, generic path: any even head_dim <= 256 and any group size (steps of the block
// are described in decode_kernels.cuh). Internal to decode_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/attention/decode_kernels.cuh"

namespace pagoda::worker::cuda::attention_internal {

// Generic path: any even head_dim <= 256 and any group. Query heads are taken kGenericHeads at a
// time (one pass over the partition each); a warp reads one K/V row with 4-byte loads, lane c
// owning element pairs c, c + 32, c + 64, c + 96.
inline constexpr int kGenericHeads = 8;
inline constexpr int kGenericPairs = 4;  // pairs per lane: head_dim <= 2 * 32 * 4
inline constexpr int kGenericUnroll = 4;
inline constexpr int kMaxHeadDim = 2 * 32 * kGenericPairs;

template <typename T, bool kContiguous>
__global__ void __launch_bounds__(kDecodeThreads) DecodeGenericKernel(const DecodeArgs a) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  __shared__ int slots[kDecodePartitionTokens];
  __shared__ float scores[kGenericHeads * kScoreStride];
  __shared__ float2 q_s[kGenericHeads][kMaxHeadDim / 2];  // pre-scaled pairs
  __shared__ float2 red[kGenericHeads][kMaxHeadDim / 2];
  __shared__ float row_max[kGenericHeads], row_sum[kGenericHeads];

  const int kvh = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  Partition p;
  if (!GetPartition(a, seq, part, &p)) return;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int pairs = a.head_dim / 2;
  FillSlots<kContiguous>(a, seq, p, slots);

  const size_t row_stride = static_cast<size_t>(a.n_kv_heads) * a.head_dim;
  const T* k_base = static_cast<const T*>(a.k_cache) + kvh * a.head_dim;
  const T* v_base = static_cast<const T*>(a.v_cache) + kvh * a.head_dim;
  for (int g0 = 0; g0 < a.group; g0 += kGenericHeads) {
    const int ng = min(kGenericHeads, a.group - g0);
    const int h0 = kvh * a.group + g0;  // first query head of this pass
    const T* q_row =
        static_cast<const T*>(a.q) + (static_cast<size_t>(p.row) * a.n_heads + h0) * a.head_dim;
    for (int i = tid; i < ng * pairs; i += kDecodeThreads) {
      const int g = i / pairs, c = i % pairs;
      const float2 f = UnpackPair<T>(Load4(q_row + g * a.head_dim + 2 * c));
      q_s[g][c] = make_float2(f.x * a.scale_log2, f.y * a.scale_log2);
    }
    __syncthreads();

    // K pass: warp w takes rows base + u * kDecodeWarps + w.
    for (int base = 0; base < p.n; base += kDecodeWarps * kGenericUnroll) {
      uint32_t raw[kGenericUnroll][kGenericPairs];
#pragma unroll
      for (int u = 0; u < kGenericUnroll; ++u) {
        const int t = base + u * kDecodeWarps + warp;
#pragma unroll
        for (int j = 0; j < kGenericPairs; ++j) {
          const int c = lane + 32 * j;
          raw[u][j] = t < p.n && c < pairs ? Load4(k_base + slots[t] * row_stride + 2 * c) : 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < kGenericUnroll; ++u) {
        const int t = base + u * kDecodeWarps + warp;  // warp-uniform
        if (t >= p.n) continue;
        float2 k[kGenericPairs];
#pragma unroll
        for (int j = 0; j < kGenericPairs; ++j) k[j] = UnpackPair<T>(raw[u][j]);
#pragma unroll
        for (int g = 0; g < kGenericHeads; ++g) {
          if (g >= ng) continue;
          float dot = 0.0f;
#pragma unroll
          for (int j = 0; j < kGenericPairs; ++j) {
            const int c = lane + 32 * j;
            if (c < pairs) dot += q_s[g][c].x * k[j].x + q_s[g][c].y * k[j].y;
          }
          dot = WarpSum(dot);
          if (lane == 0) scores[g * kScoreStride + t] = dot;
        }
      }
    }
    __syncthreads();
    PartitionSoftmax(scores, p.n, ng, row_max, row_sum);
    __syncthreads();

    // V pass.
    float2 acc[kGenericHeads][kGenericPairs];
#pragma unroll
    for (int g = 0; g < kGenericHeads; ++g) {
#pragma unroll
      for (int j = 0; j < kGenericPairs; ++j) acc[g][j] = make_float2(0.0f, 0.0f);
    }
    for (int base = 0; base < p.n; base += kDecodeWarps * kGenericUnroll) {
      uint32_t raw[kGenericUnroll][kGenericPairs];
#pragma unroll
      for (int u = 0; u < kGenericUnroll; ++u) {
        const int t = base + u * kDecodeWarps + warp;
#pragma unroll
        for (int j = 0; j < kGenericPairs; ++j) {
          const int c = lane + 32 * j;
          raw[u][j] = t < p.n && c < pairs ? Load4(v_base + slots[t] * row_stride + 2 * c) : 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < kGenericUnroll; ++u) {
        const int t = base + u * kDecodeWarps + warp;
        if (t >= p.n) continue;
#pragma unroll
        for (int g = 0; g < kGenericHeads; ++g) {
          if (g >= ng) continue;
          const float w = scores[g * kScoreStride + t];
#pragma unroll
          for (int j = 0; j < kGenericPairs; ++j) {
            const float2 v = UnpackPair<T>(raw[u][j]);
            acc[g][j].x = fmaf(w, v.x, acc[g][j].x);
            acc[g][j].y = fmaf(w, v.y, acc[g][j].y);
          }
        }
      }
    }
    // Cross-warp reduction in a fixed warp order (deterministic).
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (warp == w) {
#pragma unroll
        for (int g = 0; g < kGenericHeads; ++g) {
          if (g >= ng) continue;
#pragma unroll
          for (int j = 0; j < kGenericPairs; ++j) {
            const int c = lane + 32 * j;
            if (c >= pairs) continue;
            const float2 prev = w == 0 ? make_float2(0.0f, 0.0f) : red[g][c];
            red[g][c] = make_float2(prev.x + acc[g][j].x, prev.y + acc[g][j].y);
          }
        }
      }
      __syncthreads();
    }
    for (int i = tid; i < ng * pairs; i += kDecodeThreads) {
      const int g = i / pairs, c = i % pairs;
      StoreResult<T>(a, p, seq, part, h0 + g, 2 * c, red[g][c].x, row_sum[g]);
      StoreResult<T>(a, p, seq, part, h0 + g, 2 * c + 1, red[g][c].y, row_sum[g]);
    }
    if (tid < ng) StoreStats(a, p, seq, part, h0 + tid, row_max[tid], row_sum[tid]);
    // No barrier needed before the next pass: it first writes only q_s (not read above), and the
    // barrier after that separates these reads of red/row_sum from their next writes.
  }
  static_assert(kGenericHeads * kScoreStride >= kMergeScratchFloats, "the merge's scratch fits");
  FinishPartitions<T>(a, p, seq, kvh, scores);
}

}  // namespace pagoda::worker::cuda::attention_internal
