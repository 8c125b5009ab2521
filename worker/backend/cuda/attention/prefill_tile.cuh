// What the tensor-core prefill kernels (prefill_mma_kernel.cuh, prefill_wgmma_kernel.cuh) share:
// the block's rows and positions, the online softmax of one tile of scores held in an
// accumulator fragment, and the store of the output rows.
//
// Rows: a sequence's query rows are its (token, head-in-group) pairs, row = token * group + g,
// so the group's query heads share each K/V tile a block loads. A block takes `rows_per_block`
// rows of one sequence and one KV head; row i of the chunk attends to positions [0, start_pos +
// token(i)], so the block streams [0, its last row's limit]. Rows past the sequence's end are
// zero queries that borrow the last row's limit (so no row's softmax is empty) and are never
// stored.
//
// Fragments: a thread holds two rows (h = 0, 1: rows g and g + 8 of a 16-row tile, g = lane / 4,
// t = lane % 4) of an fp32 accumulator, element (row h, column 8 n + 2 t + e) at [4 n + 2 h + e]:
// the layout of mma.sync's m16n8 tiles laid side by side and of wgmma's m64nN per warp alike.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/attention/attention_common.cuh"

namespace pagoda::worker::cuda::attention_internal {

// Everything the prefill kernels read.
struct PrefillArgs : PagedAttentionArgs {
  int page_shift;  // log2(page_size) when it is a power of two, else -1
};

// One block's rows: grid (n_kv_heads, row blocks, sequences), row blocks in reverse (the causal
// diagonal's longest blocks start first, shortening the tail).
struct PrefillBlock {
  int kvh, seq, row0, rows_here, start_pos, token_start;
  int kv_end;       // positions [0, kv_end) are read
  int first_limit;  // the smallest limit of the block's rows
  const int32_t* table;

  // False when the block has no rows (a padding entry, or past the sequence's rows): it exits.
  __device__ __forceinline__ bool Init(const PrefillArgs& a, int rows_per_block) {
    kvh = blockIdx.x, seq = blockIdx.z;
    const int num_tokens = a.num_tokens[seq];
    const int rows_total = num_tokens * a.group;
    row0 = (gridDim.y - 1 - blockIdx.y) * rows_per_block;
    if (num_tokens <= 0 || row0 >= rows_total) return false;
    rows_here = min(rows_per_block, rows_total - row0);
    start_pos = a.start_pos[seq], token_start = a.token_start[seq];
    kv_end = start_pos + (row0 + rows_here - 1) / a.group + 1;
    first_limit = start_pos + row0 / a.group;
    table = a.page_table + static_cast<size_t>(seq) * a.page_table_stride;
    return true;
  }

  // The element offset of block row r (< rows_here) in q and out.
  __device__ __forceinline__ size_t RowOffset(const PrefillArgs& a, int r, int dim) const {
    const int row = row0 + r;
    return (static_cast<size_t>(token_start + row / a.group) * a.n_heads + kvh * a.group +
            row % a.group) *
           dim;
  }

  // The last position block row r attends to; rows past the end borrow the last row's.
  __device__ __forceinline__ int Limit(const PrefillArgs& a, int r) const {
    return start_pos + (row0 + min(r, rows_here - 1)) / a.group;
  }

  // Position pos's row of this KV head in `cache` (a layer's K or V), or null past kv_end.
  template <int kDim>
  __device__ __forceinline__ const uint16_t* CacheRow(const PrefillArgs& a, const void* cache,
                                                      int pos) const {
    if (pos >= kv_end) return nullptr;
    const int slot = a.page_shift >= 0
                         ? table[pos >> a.page_shift] << a.page_shift | (pos & (a.page_size - 1))
                         : table[pos / a.page_size] * a.page_size + pos % a.page_size;
    return static_cast<const uint16_t*>(cache) +
           (static_cast<size_t>(slot) * a.n_kv_heads + kvh) * kDim;
  }
};

// The online softmax of one tile of kKeys scores (keys kt ..) for a thread's two rows, in place:
// scores past a row's limit are masked when `masked`, then become probabilities against the
// updated running max; row_sum gains this thread's share (the quad's four shares are added at
// the end: each lane scales its own alike). correction[h] is what the row's output must be
// multiplied by (0 on the first tile, exactly 1 while its max stands). Returns whether any
// correction differs from 1. Maxima are kept unscaled (the scale is positive), so each
// probability is one fma and one exp2.
template <int kKeys>
__device__ __forceinline__ bool SoftmaxTile(float* s, int kt, bool masked, const int (&limit)[2],
                                            float scale_log2, float (&row_max)[2],
                                            float (&row_sum)[2], float (&correction)[2]) {
  const int t = threadIdx.x % 4;
  bool rescale = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[4 * n + 2 * h + e];
        if (masked && kt + 8 * n + 2 * t + e > limit[h]) v = -INFINITY;
        tile_max = fmaxf(tile_max, v);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
    // Finite: every row sees position 0 in the first tile, and keeps its max after.
    const float m_new = fmaxf(row_max[h], tile_max);
    correction[h] = exp2f((row_max[h] - m_new) * scale_log2);
    rescale = rescale || correction[h] != 1.0f;
    row_max[h] = m_new;
    const float offset = -m_new * scale_log2;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[4 * n + 2 * h + e];
        v = exp2f(fmaf(v, scale_log2, offset));  // 0 where masked
        sum += v;
      }
    }
    row_sum[h] = row_sum[h] * correction[h] + sum;
  }
  return rescale;
}

// Writes a thread's two output rows, block rows r and r + 8 (o: kDim columns in the fragment
// layout), each divided by its quad's summed row_sum; rows past rows_here are not stored.
template <typename T, int kDim>
__device__ __forceinline__ void StoreRows(const PrefillArgs& a, const PrefillBlock& b,
                                          const float* o, const float (&row_sum)[2], int r) {
  const int t = threadIdx.x % 4;
  uint32_t* const out = static_cast<uint32_t*>(a.out);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    if (r + 8 * h >= b.rows_here) continue;
    const float inv = 1.0f / sum;
    uint32_t* const dst = out + b.RowOffset(a, r + 8 * h, kDim) / 2 + t;
#pragma unroll
    for (int n = 0; n < kDim / 8; ++n) {
      dst[4 * n] = PackPair<T>(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
    }
  }
}

}  // namespace pagoda::worker::cuda::attention_internal
