// Device helpers shared by the decode and prefill attention kernels: argument checks, the
// kernels' arguments, read-only loads, warp reductions and the compile-time dispatch of small
// integers (packed bf16/fp16 <-> float conversions are dtype.cuh's).
//
// Contract: internal to worker/backend/cuda/attention (included only by its .cu files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/dtype.cuh"

namespace pagoda::worker::cuda::attention_internal {

// Softmax runs in base 2: scores are pre-multiplied by scale * log2(e), so exp2f gives the same
// probabilities as exp of the natural-base scores.
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr unsigned kFullMask = 0xffffffffu;

__host__ __device__ constexpr int DivUp(int a, int b) { return (a + b - 1) / b; }

inline constexpr int kMaxGridYZ = 65535;
inline constexpr int kMaxHeadDimArg = 256;  // kMaxHeadDim, before the kernels' headers define it

// Whether p is a multiple of `bytes`: the tensor-core and fast paths need 16-byte copies.
inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The rules both launchers share: the shape, the batch size against the grid, and the tensors,
// `alignment`-byte aligned.
inline void CheckAttentionArgs(ArgCheck& check, const AttentionShape& s, const AttentionBatch& b,
                               const void* q, const void* k_cache, const void* v_cache,
                               const void* out, uintptr_t alignment) {
  check.RequirePositive(s.n_heads, "n_heads")
      .Require(s.n_kv_heads > 0 && s.n_kv_heads <= kMaxGridYZ, "n_kv_heads %d must be in [1, %d]",
               s.n_kv_heads, kMaxGridYZ)
      .Require(s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads == 0,
               "n_kv_heads %d must divide n_heads %d", s.n_kv_heads, s.n_heads)
      .Require(s.head_dim > 0 && s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDimArg,
               "head_dim %d must be even, in [2, %d]", s.head_dim, kMaxHeadDimArg)
      .RequirePositive(s.page_size, "page_size")
      .RequireRange(b.num_seqs, 0, kMaxGridYZ, "num_seqs")
      .RequirePointer(b.token_start, "batch.token_start")
      .RequirePointer(b.num_tokens, "batch.num_tokens")
      .RequirePointer(b.start_pos, "batch.start_pos")
      .RequirePointer(q, "q", alignment)
      .RequirePointer(k_cache, "k_cache", alignment)
      .RequirePointer(v_cache, "v_cache", alignment)
      .RequirePointer(out, "out", 2);
}

// What every attention kernel reads: the batch, the tensors (device pointers cast to their
// element types by the kernel) and the shape. DecodeArgs and PrefillArgs add their own fields.
struct PagedAttentionArgs {
  const int32_t* token_start;  // [num_seqs]
  const int32_t* num_tokens;   // [num_seqs]
  const int32_t* start_pos;    // [num_seqs]
  const int32_t* page_table;   // [num_seqs][page_table_stride]
  int page_table_stride;
  const void* q;        // [rows][n_heads][head_dim] dtype
  const void* k_cache;  // [num_pages][page_size][n_kv_heads][head_dim] dtype
  const void* v_cache;  // [num_pages][page_size][n_kv_heads][head_dim] dtype
  void* out;            // [rows][n_heads][head_dim] dtype
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int page_size;
  int group;         // n_heads / n_kv_heads
  float scale_log2;  // scale * log2(e)
};

// The shared fields of a launch's arguments.
inline void FillPagedArgs(const AttentionBatch& b, const AttentionShape& s, const void* q,
                          const void* k_cache, const void* v_cache, void* out,
                          PagedAttentionArgs* a) {
  a->token_start = b.token_start;
  a->num_tokens = b.num_tokens;
  a->start_pos = b.start_pos;
  a->page_table = b.page_table;
  a->page_table_stride = b.page_table_stride;
  a->q = q;
  a->k_cache = k_cache;
  a->v_cache = v_cache;
  a->out = out;
  a->n_heads = s.n_heads;
  a->n_kv_heads = s.n_kv_heads;
  a->head_dim = s.head_dim;
  a->page_size = s.page_size;
  a->group = s.n_heads / s.n_kv_heads;
  a->scale_log2 = s.scale * kLog2e;
}

// Read-only 16-byte / 4-byte global loads (the KV cache and q are never written by attention).
__device__ __forceinline__ uint4 Load16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ uint32_t Load4(const void* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Calls f(std::integral_constant<int, P>{}) with P the smallest of {1, 2, 4, 8} that is >= n
// (1 <= n <= 8; the caller checks the range) and returns what f returns.
template <typename F>
auto DispatchPow2UpTo8(int n, F&& f) {
  if (n <= 1) return f(std::integral_constant<int, 1>{});
  if (n <= 2) return f(std::integral_constant<int, 2>{});
  if (n <= 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

}  // namespace pagoda::worker::cuda::attention_internal
