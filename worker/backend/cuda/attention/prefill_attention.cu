// Prefill attention over paged KV (contract in paged_attention.h): head dims 64 and 128 run a
// tensor-core kernel, prefill_wgmma_kernel.cuh's on Hopper and prefill_mma_kernel.cuh's
// elsewhere; the others this SIMT flash-attention kernel.
//
// A sequence's query rows are its (token, head-in-group) pairs, row = token * group + g, so one
// block of kRows rows serves kRows / group tokens of one KV head (or part of one token's heads
// when the group is larger than kRows). The block streams the positions [0, last row's limit]
// through shared memory in tiles of kKeys positions, K tile then V tile in the same buffer, with
// an online softmax in fp32 (base 2) per row: row i of the chunk attends to [0, start_pos + i].
// Four threads share a row: for the scores each takes the keys sub, sub + 4, ...; for the output
// each owns the element pairs sub, sub + 4, ... Grid: (DivUp(max_chunk_tokens * group, kRows),
// n_kv_heads, num_seqs); blocks past a sequence's rows exit at once.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/status_macros.h"
#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/attention/prefill_mma_kernel.cuh"
#include "worker/backend/cuda/attention/prefill_wgmma_kernel.cuh"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/launch.cuh"

namespace pagoda::worker::cuda {
namespace {

using attention_internal::kFullMask;
using attention_internal::Load4;
using attention_internal::PrefillArgs;

constexpr int kThreads = 128;
constexpr int kRows = 32;  // query rows per block
constexpr int kKeys = 32;  // positions per K/V tile
constexpr int kThreadsPerRow = kThreads / kRows;
constexpr int kKeysPerThread = kKeys / kThreadsPerRow;
constexpr int kProbStride = kKeys + 1;  // padded rows of the probability tile
static_assert(kThreadsPerRow == 4, "the row reductions below shuffle over 4 lanes");

// Shared memory: q tile [kRows][ld] and K-or-V tile [kKeys][ld] of packed element pairs (ld =
// head_dim / 2 + 1 words, padded against bank conflicts), then probabilities [kRows][kProbStride].
size_t SmemBytes(int head_dim) {
  const size_t ld = head_dim / 2 + 1;
  return (kRows + kKeys) * ld * sizeof(uint32_t) + kRows * kProbStride * sizeof(float);
}

// tile[j][c] = pair c of position kt + j's K or V row, zero past kv_end (slots[j] < 0).
template <typename T>
__device__ __forceinline__ void LoadTile(const T* cache, const int* slots, size_t row_stride,
                                         int pairs, int ld, uint32_t* tile) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = warp; j < kKeys; j += kThreads / 32) {
    const int slot = slots[j];
    const T* row = cache + static_cast<size_t>(slot < 0 ? 0 : slot) * row_stride;
    for (int c = lane; c < pairs; c += 32) tile[j * ld + c] = slot < 0 ? 0u : Load4(row + 2 * c);
  }
}

template <typename T, int kMaxDim>
__global__ void __launch_bounds__(kThreads) PrefillKernel(const PrefillArgs a) {
  PAGODA_DYNAMIC_SHARED(uint32_t, smem);
  __shared__ int slots[kKeys];
  const int seq = blockIdx.z, kvh = blockIdx.y;
  const int num_tokens = a.num_tokens[seq];
  const int rows_total = num_tokens * a.group;
  const int row0 = blockIdx.x * kRows;
  if (num_tokens <= 0 || row0 >= rows_total) return;
  const int rows_here = min(kRows, rows_total - row0);
  const int start_pos = a.start_pos[seq], token_start = a.token_start[seq];
  const int kv_end = start_pos + (row0 + rows_here - 1) / a.group + 1;  // positions the block reads
  const int pairs = a.head_dim / 2, ld = pairs + 1;
  uint32_t* q_tile = smem;
  uint32_t* kv_tile = smem + kRows * ld;
  float* probs = reinterpret_cast<float*>(smem + (kRows + kKeys) * ld);

  // The block's query rows; rows past the sequence are zero (computed, never stored).
  const T* q = static_cast<const T*>(a.q);
  for (int r = threadIdx.x / 32; r < kRows; r += kThreads / 32) {
    const int row = row0 + r, token = row / a.group;
    const T* src =
        q + (static_cast<size_t>(token_start + token) * a.n_heads + kvh * a.group + row % a.group) *
                a.head_dim;
    for (int c = threadIdx.x % 32; c < pairs; c += 32) {
      q_tile[r * ld + c] = r < rows_here ? Load4(src + 2 * c) : 0u;
    }
  }

  const int r = threadIdx.x / kThreadsPerRow, sub = threadIdx.x % kThreadsPerRow;
  // Row r attends to [0, limit]; rows past the sequence borrow the last row's limit (>= 0, so
  // every row sees position 0 in its first tile and its running max is finite from then on).
  const int limit = start_pos + (row0 + min(r, rows_here - 1)) / a.group;
  const size_t row_stride = static_cast<size_t>(a.n_kv_heads) * a.head_dim;
  const T* k_cache = static_cast<const T*>(a.k_cache) + kvh * a.head_dim;
  const T* v_cache = static_cast<const T*>(a.v_cache) + kvh * a.head_dim;
  const int32_t* table = a.page_table + static_cast<size_t>(seq) * a.page_table_stride;

  float m = -INFINITY, l = 0.0f;
  float2 acc[kMaxDim / 8];  // pairs sub + 4 * i
#pragma unroll
  for (int i = 0; i < kMaxDim / 8; ++i) acc[i] = make_float2(0.0f, 0.0f);

  for (int kt = 0; kt < kv_end; kt += kKeys) {
    // slots is last read by the previous tile's V load, which every thread finished before the
    // barrier ahead of its PV loop, so it can be rewritten without a barrier here.
    if (threadIdx.x < kKeys) {
      const int pos = kt + threadIdx.x;
      slots[threadIdx.x] =
          pos < kv_end ? table[pos / a.page_size] * a.page_size + pos % a.page_size : -1;
    }
    __syncthreads();  // slots written; the previous tile's PV reads of kv_tile are done
    LoadTile(k_cache, slots, row_stride, pairs, ld, kv_tile);
    __syncthreads();

    // Scores of row r against keys sub + 4 * j.
    float s[kKeysPerThread];
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j) s[j] = 0.0f;
    for (int c = 0; c < pairs; ++c) {
      const float2 qv = UnpackPair<T>(q_tile[r * ld + c]);
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) {
        const float2 kv = UnpackPair<T>(kv_tile[(sub + kThreadsPerRow * j) * ld + c]);
        s[j] = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, s[j]));
      }
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j) {
      const int pos = kt + sub + kThreadsPerRow * j;
      s[j] = pos <= limit ? s[j] * a.scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
    const float m_new = fmaxf(m, tile_max);     // finite: position 0 is in every row's first tile
    const float correction = exp2f(m - m_new);  // 0 on the first tile (m = -inf)
    float p_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j) {
      const float p = exp2f(s[j] - m_new);  // 0 for masked keys
      probs[r * kProbStride + sub + kThreadsPerRow * j] = p;
      p_sum += p;
    }
    p_sum += __shfl_xor_sync(kFullMask, p_sum, 1);
    p_sum += __shfl_xor_sync(kFullMask, p_sum, 2);
    l = l * correction + p_sum;
    m = m_new;
#pragma unroll
    for (int i = 0; i < kMaxDim / 8; ++i) {
      acc[i].x *= correction;
      acc[i].y *= correction;
    }
    __syncthreads();  // K reads done, probabilities written
    LoadTile(v_cache, slots, row_stride, pairs, ld, kv_tile);
    __syncthreads();

    for (int j = 0; j < kKeys; ++j) {
      const float p = probs[r * kProbStride + j];
#pragma unroll
      for (int i = 0; i < kMaxDim / 8; ++i) {
        const int c = sub + kThreadsPerRow * i;
        if (c < pairs) {
          const float2 v = UnpackPair<T>(kv_tile[j * ld + c]);
          acc[i].x = fmaf(p, v.x, acc[i].x);
          acc[i].y = fmaf(p, v.y, acc[i].y);
        }
      }
    }
  }

  if (r >= rows_here) return;
  const int row = row0 + r;
  uint32_t* out = static_cast<uint32_t*>(a.out) +
                  ((static_cast<size_t>(token_start + row / a.group) * a.n_heads + kvh * a.group +
                    row % a.group) *
                   a.head_dim) /
                      2;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kMaxDim / 8; ++i) {
    const int c = sub + kThreadsPerRow * i;
    if (c < pairs) out[c] = PackPair<T>(acc[i].x * inv, acc[i].y * inv);
  }
}

template <typename T, int kMaxDim>
cudaError_t Launch(const PrefillArgs& args, dim3 grid, cudaStream_t stream) {
  return LaunchKernel(PrefillKernel<T, kMaxDim>, grid, kThreads, SmemBytes(args.head_dim), stream,
                      args);
}

// The mma.sync kernel (prefill_mma_kernel.cuh) for head_dim kDim, kMTiles m16 tiles per warp.
template <typename T, int kDim, int kMTiles>
cudaError_t LaunchMma(const PrefillArgs& args, int rows, int num_seqs, cudaStream_t stream) {
  namespace pm = attention_internal::prefill_mma;
  constexpr size_t kSmem = pm::SmemBytes<kDim, kMTiles>();
  constexpr auto* kKernel = pm::PrefillMmaKernel<T, kDim, kMTiles>;
  if (const cudaError_t err = OptInSharedMemory<kKernel>(kSmem); err != cudaSuccess) return err;
  const dim3 grid(args.n_kv_heads, attention_internal::DivUp(rows, pm::kRows<kMTiles>), num_seqs);
  return LaunchKernel(kKernel, grid, pm::kThreads, kSmem, stream, args);
}

// The wgmma kernel (prefill_wgmma_kernel.cuh) for head_dim kDim.
template <typename T, int kDim>
cudaError_t LaunchWgmma(const PrefillArgs& args, int rows, int num_seqs, cudaStream_t stream) {
  namespace pw = attention_internal::prefill_wgmma;
  constexpr size_t kSmem = pw::SmemBytes<kDim>();
  constexpr auto* kKernel = pw::PrefillWgmmaKernel<T, kDim>;
  if (const cudaError_t err = OptInSharedMemory<kKernel>(kSmem); err != cudaSuccess) return err;
  const dim3 grid(args.n_kv_heads, attention_internal::DivUp(rows, pw::kRows), num_seqs);
  return LaunchKernel(kKernel, grid, pw::kThreads, kSmem, stream, args);
}

// Whether LaunchPrefillAttention takes a tensor-core kernel: head_dim 64 or 128, and q and the
// caches 16-byte aligned for their cp.async copies (every row then is, at these head dims) and
// out 4-byte aligned for its paired stores. Anything else takes the generic kernel.
bool HasMmaPath(const PrefillAttentionParams& p) {
  namespace ai = attention_internal;
  return (p.shape.head_dim == 64 || p.shape.head_dim == 128) && ai::Aligned(p.q, 16) &&
         ai::Aligned(p.k_cache, 16) && ai::Aligned(p.v_cache, 16) && ai::Aligned(p.out, 4);
}

}  // namespace

absl::Status LaunchPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream) {
  const AttentionShape& s = p.shape;
  const AttentionBatch& b = p.batch;
  if (b.num_seqs == 0 || p.max_chunk_tokens == 0) return absl::OkStatus();
  ArgCheck check("LaunchPrefillAttention");
  attention_internal::CheckAttentionArgs(check, s, b, p.q, p.k_cache, p.v_cache, p.out, 4);
  check.Require(p.max_chunk_tokens > 0, "max_chunk_tokens %d must be >= 0", p.max_chunk_tokens)
      .RequirePointer(b.page_table, "batch.page_table");
  RETURN_IF_ERROR(check.status());
  PrefillArgs args{};
  attention_internal::FillPagedArgs(b, s, p.q, p.k_cache, p.v_cache, p.out, &args);
  args.page_shift = -1;
  for (int shift = 0; shift < 31; ++shift) {
    if (s.page_size == 1 << shift) args.page_shift = shift;
  }
  const int64_t rows = static_cast<int64_t>(p.max_chunk_tokens) * args.group;
  const bool has_wgmma = PrefillWgmmaAvailable();
  if (HasMmaPath(p) &&
      (p.kernel == PrefillKernel::kWgmma || (p.kernel == PrefillKernel::kAuto && has_wgmma))) {
    namespace pw = attention_internal::prefill_wgmma;
    RETURN_IF_ERROR(check.Require(has_wgmma, "kernel wgmma needs a GPU of compute capability 9.0")
                        .Require(rows <= int64_t{attention_internal::kMaxGridYZ} * pw::kRows,
                                 "max_chunk_tokens %d x group %d is %d rows, over %d",
                                 p.max_chunk_tokens, args.group, rows,
                                 attention_internal::kMaxGridYZ * pw::kRows)
                        .Require(p.rows_per_block == 0 || p.rows_per_block == pw::kRows,
                                 "rows_per_block %d must be 0 or %d for the wgmma kernel",
                                 p.rows_per_block, pw::kRows)
                        .status());
    return CudaStatus(DispatchDType(s.dtype,
                                    [&](auto tag) -> cudaError_t {
                                      using T = decltype(tag);
                                      const int r = static_cast<int>(rows);
                                      return s.head_dim == 64
                                                 ? LaunchWgmma<T, 64>(args, r, b.num_seqs, stream)
                                                 : LaunchWgmma<T, 128>(args, r, b.num_seqs, stream);
                                    }),
                      "LaunchPrefillAttention");
  }
  if (HasMmaPath(p)) {
    namespace pm = attention_internal::prefill_mma;
    RETURN_IF_ERROR(check
                        .Require(rows <= int64_t{attention_internal::kMaxGridYZ} * pm::kRows<1>,
                                 "max_chunk_tokens %d x group %d is %d rows, over %d",
                                 p.max_chunk_tokens, args.group, rows,
                                 attention_internal::kMaxGridYZ * pm::kRows<1>)
                        .Require(p.rows_per_block == 0 || p.rows_per_block == pm::kRows<1> ||
                                     p.rows_per_block == pm::kRows<2>,
                                 "rows_per_block %d must be 0, %d or %d", p.rows_per_block,
                                 pm::kRows<1>, pm::kRows<2>)
                        .status());
    // Two m16 tiles per warp unless that leaves fewer than two blocks per multiprocessor.
    int tiles = p.rows_per_block == pm::kRows<1> ? 1 : 2;
    if (p.rows_per_block == 0) {
      const int64_t big_blocks =
          (rows + pm::kRows<2> - 1) / pm::kRows<2> * s.n_kv_heads * b.num_seqs;
      tiles = big_blocks < 2 * static_cast<int64_t>(MultiprocessorCount()) ? 1 : 2;
    }
    return CudaStatus(
        DispatchDType(s.dtype,
                      [&](auto tag) -> cudaError_t {
                        using T = decltype(tag);
                        const int r = static_cast<int>(rows);
                        if (s.head_dim == 64) {
                          return tiles == 1 ? LaunchMma<T, 64, 1>(args, r, b.num_seqs, stream)
                                            : LaunchMma<T, 64, 2>(args, r, b.num_seqs, stream);
                        }
                        return tiles == 1 ? LaunchMma<T, 128, 1>(args, r, b.num_seqs, stream)
                                          : LaunchMma<T, 128, 2>(args, r, b.num_seqs, stream);
                      }),
        "LaunchPrefillAttention");
  }
  const int64_t row_blocks = (rows + kRows - 1) / kRows;
  RETURN_IF_ERROR(check
                      .Require(row_blocks <= 0x7fffffff,
                               "max_chunk_tokens %d x group %d needs %d row blocks, over 2^31 - 1",
                               p.max_chunk_tokens, args.group, row_blocks)
                      .status());
  const dim3 grid(static_cast<unsigned>(row_blocks), s.n_kv_heads, b.num_seqs);
  return CudaStatus(DispatchDType(s.dtype,
                                  [&](auto tag) -> cudaError_t {
                                    using T = decltype(tag);
                                    if (s.head_dim <= 64) return Launch<T, 64>(args, grid, stream);
                                    if (s.head_dim <= 128)
                                      return Launch<T, 128>(args, grid, stream);
                                    return Launch<T, 256>(args, grid, stream);
                                  }),
                    "LaunchPrefillAttention");
}

bool PrefillWgmmaAvailable() { return WgmmaAvailable(); }

}  // namespace pagoda::worker::cuda
