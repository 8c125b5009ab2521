// Decode attention kernels (see paged_attention.h for the contract). One block per (KV head,
// sequence, partition of partition_tokens positions) handles every query head of the KV
// head's group:
//   1. slot table: the partition's page slots go to shared memory (the only page-table reads);
//   2. K pass: scores of the group's heads for every position of the partition, in shared memory
//      (base-2 logits: q is pre-scaled by scale * log2(e));
//   3. softmax: per head max m and sum l of exp2(score - m); scores become the probabilities;
//   4. V pass: unnormalized sum_t p_t * v_t, reduced across the block;
//   5. a sequence with one partition writes out = sum / l directly; otherwise the partition's
//      sum and (m, l) go to the workspace, and the block of the (sequence, KV head) that finishes
//      last (a counter per pair, ArrivesLast) merges the partitions of the group's heads
//      (FinishPartitions), in the same launch.
// Blocks of padding entries or of partitions past the context exit at once; every block derives
// the partition count from the context the same way (GetPartition), so the count the last block
// waits for is exactly the number of partials written.
//
// This header: the pieces the split kernels share, the merge among them. The split kernels:
// decode_fast_kernel.cuh (head_dim 64/128, group <= 8) and decode_generic_kernel.cuh.
//
// Internal to decode_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/kernel_args.h"
#include "worker/backend/cuda/last_block.cuh"
#include "worker/backend/cuda/launch.cuh"

namespace pagoda::worker::cuda::attention_internal {

inline constexpr int kDecodeThreads = 128;
inline constexpr int kDecodeWarps = kDecodeThreads / 32;
// Score rows are padded by one float so that heads of one position fall in different banks.
inline constexpr int kScoreStride = kDecodePartitionTokens + 1;

// Everything the decode kernels read.
struct DecodeArgs : PagedAttentionArgs {
  float* part_out;     // [num_seqs][n_heads][max_partitions][head_dim] unnormalized sums
  float2* part_ml;     // [num_seqs][n_heads][max_partitions] (max, sum), base 2
  uint32_t* counters;  // [num_seqs][n_kv_heads] partitions done; zero between launches
  int max_partitions;
  int partition_tokens;  // positions per partition: a power of two <= kDecodePartitionTokens
};

// The positions one block covers.
struct Partition {
  int row;        // q/out row of the sequence's token
  int pos0;       // first position of the partition
  int n;          // positions in the partition, 1..partition_tokens
  int num_parts;  // partitions of the sequence (clamped to max_partitions)
};

// False when block `part` of `seq` has nothing to do: a padding entry, or a partition that starts
// past the context (context = start_pos + 1).
__device__ __forceinline__ bool GetPartition(const DecodeArgs& a, int seq, int part, Partition* p) {
  if (a.num_tokens[seq] == 0) return false;
  const int context = a.start_pos[seq] + 1;
  const int num_parts = min(DivUp(context, a.partition_tokens), a.max_partitions);
  if (part >= num_parts) return false;
  p->row = a.token_start[seq];
  p->pos0 = part * a.partition_tokens;
  p->n = min(a.partition_tokens, context - p->pos0);
  p->num_parts = num_parts;
  return true;
}

// slots[t] = page slot of position pos0 + t, for t < n. kContiguous ignores the page table: the
// sequence's pages are seq * page_table_stride, +1, ...
template <bool kContiguous>
__device__ __forceinline__ void FillSlots(const DecodeArgs& a, int seq, const Partition& p,
                                          int* slots) {
  const int32_t* table = a.page_table + static_cast<size_t>(seq) * a.page_table_stride;
  for (int t = threadIdx.x; t < p.n; t += blockDim.x) {
    const int pos = p.pos0 + t;
    const int page_index = pos / a.page_size;
    int page;
    if constexpr (kContiguous) {
      page = seq * a.page_table_stride + page_index;
    } else {
      page = table[page_index];
    }
    slots[t] = page * a.page_size + pos % a.page_size;
  }
}

// For heads g < num_heads: scores[g][0, n) -> exp2(score - m), m = max, and row_max[g] = m,
// row_sum[g] = sum of the exponentials. Warp w handles heads w, w + warps, ...
__device__ __forceinline__ void PartitionSoftmax(float* scores, int n, int num_heads,
                                                 float* row_max, float* row_sum) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int g = warp; g < num_heads; g += warps) {
    float* s = scores + g * kScoreStride;
    float m = -INFINITY;
    for (int t = lane; t < n; t += 32) m = fmaxf(m, s[t]);
    m = WarpMax(m);
    float l = 0;
    for (int t = lane; t < n; t += 32) {
      const float e = exp2f(s[t] - m);
      s[t] = e;
      l += e;
    }
    l = WarpSum(l);
    if (lane == 0) {
      row_max[g] = m;
      row_sum[g] = l;
    }
  }
}

// The partition's result for query head h, dim d: `value` = sum_t p_t v_t[d] (unnormalized).
template <typename T>
__device__ __forceinline__ void StoreResult(const DecodeArgs& a, const Partition& p, int seq,
                                            int part, int h, int d, float value, float row_sum) {
  if (p.num_parts == 1) {
    static_cast<T*>(a.out)[(static_cast<size_t>(p.row) * a.n_heads + h) * a.head_dim + d] =
        FromFloat<T>(value / row_sum);
  } else {
    a.part_out[((static_cast<size_t>(seq) * a.n_heads + h) * a.max_partitions + part) * a.head_dim +
               d] = value;
  }
}

__device__ __forceinline__ void StoreStats(const DecodeArgs& a, const Partition& p, int seq,
                                           int part, int h, float m, float l) {
  if (p.num_parts == 1) return;
  a.part_ml[(static_cast<size_t>(seq) * a.n_heads + h) * a.max_partitions + part] =
      make_float2(m, l);
}

// Combines the partitions of one (sequence, query head): out = sum_i w_i o_i / sum_i w_i l_i with
// w_i = exp2(m_i - max_j m_j). The block finds the max together, computes each partition's
// weight once into shared memory (kMergeChunk partitions at a time), and each thread sums its
// dims over them with several partitions' loads in flight: a loop of dependent loads per thread
// made the merge a tenth of decode attention's time at 4 x 32k (bench/journal/gpu.md). The
// partials come from other blocks of the launch, so they are read through L2 (__ldcg).
inline constexpr int kMergeChunk = 256;
// MergeHead's shared scratch: the weights of a chunk, then a float per warp.
inline constexpr int kMergeScratchFloats = kMergeChunk + kDecodeWarps;

// The block-wide reduction of v by `op` (every thread gets it); red holds kDecodeWarps floats.
template <typename Op>
__device__ __forceinline__ float BlockReduce(float v, float* red, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  __syncthreads();  // red's previous use is done
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < kDecodeWarps; ++w) v = op(v, red[w]);
  return v;
}

// The merge of query head h of sequence seq (p: its partition 0), by every thread of the block.
template <typename T>
__device__ __forceinline__ void MergeHead(const DecodeArgs& a, const Partition& p, int seq, int h,
                                          float* scratch) {
  float* const weight = scratch;
  float* const red = scratch + kMergeChunk;
  const size_t unit = static_cast<size_t>(seq) * a.n_heads + h;
  const float2* ml = a.part_ml + unit * a.max_partitions;
  const float* part_out = a.part_out + unit * a.max_partitions * a.head_dim;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < p.num_parts; i += kDecodeThreads) m = fmaxf(m, __ldcg(ml + i).x);
  m = BlockReduce(m, red, [](float x, float y) { return fmaxf(x, y); });
  // Each thread's dims: threadIdx.x and threadIdx.x + kDecodeThreads (head_dim <= 256).
  static_assert(2 * kDecodeThreads >= kMaxHeadDimArg, "two dims per thread cover a head");
  const int d0 = threadIdx.x, d1 = threadIdx.x + kDecodeThreads;
  float acc0 = 0.0f, acc1 = 0.0f, l = 0.0f;
  for (int c0 = 0; c0 < p.num_parts; c0 += kMergeChunk) {
    const int len = min(kMergeChunk, p.num_parts - c0);
    __syncthreads();  // the previous chunk's weights are read
    for (int i = threadIdx.x; i < len; i += kDecodeThreads) {
      const float2 s = __ldcg(ml + c0 + i);
      const float w = exp2f(s.x - m);
      weight[i] = w;
      l = fmaf(w, s.y, l);  // this thread's share of the denominator
    }
    __syncthreads();
    const float* o = part_out + static_cast<size_t>(c0) * a.head_dim;
#pragma unroll 8
    for (int i = 0; i < len; ++i) {
      const float w = weight[i];
      if (d0 < a.head_dim) {
        acc0 = fmaf(w, __ldcg(o + static_cast<size_t>(i) * a.head_dim + d0), acc0);
      }
      if (d1 < a.head_dim) {
        acc1 = fmaf(w, __ldcg(o + static_cast<size_t>(i) * a.head_dim + d1), acc1);
      }
    }
  }
  l = BlockReduce(l, red, [](float x, float y) { return x + y; });
  T* out = static_cast<T*>(a.out) + (static_cast<size_t>(p.row) * a.n_heads + h) * a.head_dim;
  if (d0 < a.head_dim) out[d0] = FromFloat<T>(acc0 / l);
  if (d1 < a.head_dim) out[d1] = FromFloat<T>(acc1 / l);
}

// The end of every split block, by all its threads once its StoreResult and StoreStats calls are
// done: for a sequence of several partitions, the last block of (seq, KV head kvh) to get here
// merges the partitions of the group's query heads. `scratch`: kMergeScratchFloats floats of
// shared memory that the block no longer reads.
template <typename T>
__device__ __forceinline__ void FinishPartitions(const DecodeArgs& a, const Partition& p, int seq,
                                                 int kvh, float* scratch) {
  if (p.num_parts == 1) return;  // its block wrote the output
  uint32_t* counter = a.counters + static_cast<size_t>(seq) * a.n_kv_heads + kvh;
  if (!ArrivesLast(counter, static_cast<uint32_t>(p.num_parts))) return;
  // MergeHead meets a barrier before each write of the scratch, so heads follow one another.
  for (int g = 0; g < a.group; ++g) MergeHead<T>(a, p, seq, kvh * a.group + g, scratch);
}

}  // namespace pagoda::worker::cuda::attention_internal
