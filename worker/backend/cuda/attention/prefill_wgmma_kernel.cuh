// Prefill attention on Hopper's warpgroup tensor cores (sm_90a; head dims 64 and 128): the
// flash-attention kernel of prefill_mma_kernel.cuh with Q·Kᵀ and P·V as wgmma.mma_async
// (wgmma.cuh) instead of warp-level mma.sync. Contract in paged_attention.h; rows, causal limits
// and the online softmax (fp32, base 2) are prefill_tile.cuh's, as for the mma.sync kernel.
//
// A block is two warpgroups and takes kRows = 128 query rows of one sequence and one KV head;
// warpgroup w owns rows 64 w .. 64 w + 63, the m64 of its wgmma. Per tile of kKeys = 128 positions
// each warpgroup computes S = Q·Kᵀ (m64n128k16, Q and K from shared memory), its softmax in
// registers, then O += P·V (m64nDk16, P from registers in the accumulator's own layout, V from
// shared memory read transposed by the instruction, so it is stored as it comes from the cache).
//
// Pipeline: step t issues S(t + 1) = Q·K(t + 1)ᵀ, then O += P(t)·V(t), and runs the softmax of
// tile t + 1 as soon as its scores are done, while P·V(t) still occupies the tensor cores (the
// intra-warpgroup overlap of FlashAttention-3); the two warpgroups' steps interleave on the SM.
// Shared memory: Q, then two stages of K tiles and two of V tiles, each in wgmma.cuh's 128-byte
// swizzled blocks, written by cp.async straight from the pages: during step t, K(t + 2) and
// V(t + 1) load into the stages K(t) and V(t - 1) left, one barrier per step, the copies issued
// after the step's wgmma. Positions past the block's last are zero-filled, never read from the
// cache.
//
// Grid: (n_kv_heads, row blocks, sequences) as PrefillBlock reads it.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/attention/prefill_tile.cuh"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/mma.cuh"
#include "worker/backend/cuda/wgmma.cuh"

namespace pagoda::worker::cuda::attention_internal::prefill_wgmma {

inline constexpr int kWarpgroups = 2;
inline constexpr int kThreads = 128 * kWarpgroups;
inline constexpr int kRows = 64 * kWarpgroups;
inline constexpr int kKeys = 128;
inline constexpr int kStages = 2;

// Bytes of a tile of `rows` rows of kDim 16-bit elements (kDim / 64 swizzled blocks).
template <int kDim>
constexpr uint32_t TileBytes(int rows) {
  return static_cast<uint32_t>(rows) * kDim * 2;
}

// Q, the K and V stages, and room to align them to a swizzle atom.
template <int kDim>
constexpr size_t SmemBytes() {
  return wgmma::kAtomBytes + TileBytes<kDim>(kRows) + 2 * kStages * TileBytes<kDim>(kKeys);
}

// Copies kRowCount rows of kDim elements into a swizzled tile, 16 bytes per cp.async; row r
// comes from src(r), or is zeros where src(r) is null (`any` is then the never-read global
// address the instruction is given).
template <int kDim, int kRowCount, typename Src>
__device__ __forceinline__ void LoadTile(char* dst, const uint16_t* any, Src src) {
  constexpr int kChunks = kDim / 8;  // 16-byte pieces per row
  static_assert((kRowCount * kChunks) % kThreads == 0, "every thread copies the same count");
  const int c = threadIdx.x % kChunks;
  char* const block = dst + (c / 8) * kRowCount * wgmma::kRowBytes;
#pragma unroll
  for (int i = 0; i < kRowCount * kChunks / kThreads; ++i) {
    const int r = threadIdx.x / kChunks + i * (kThreads / kChunks);
    const uint16_t* row = src(r);
    mma::CpAsync16(block + wgmma::SwizzledOffset(r, (c % 8) * 8),
                   row != nullptr ? row + c * 8 : any, row != nullptr);
  }
}

template <typename T, int kDim>
__global__ void __launch_bounds__(kThreads, 1) PrefillWgmmaKernel(const PrefillArgs a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built for a GPU without wgmma: the launcher never chooses this kernel there
#else
  constexpr int kSteps = kDim / 16;      // k-steps of Q·Kᵀ
  constexpr int kKeySteps = kKeys / 16;  // k-steps of P·V
  constexpr uint32_t kKeyTile = TileBytes<kDim>(kKeys);
  PAGODA_DYNAMIC_SHARED(uint32_t, smem_words);
  char* const raw = reinterpret_cast<char*>(smem_words);
  char* const q_s =
      raw + (wgmma::kAtomBytes - wgmma::SharedAddress(raw) % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  char* const k_s = q_s + TileBytes<kDim>(kRows);
  char* const v_s = k_s + kStages * kKeyTile;

  PrefillBlock blk;
  if (!blk.Init(a, kRows)) return;
  const uint16_t* const q = static_cast<const uint16_t*>(a.q);
  LoadTile<kDim, kRows>(q_s, q, [&](int r) -> const uint16_t* {
    return r < blk.rows_here ? q + blk.RowOffset(a, r, kDim) : nullptr;
  });
  auto load_kv = [&](const void* cache, char* dst, int kt) {
    LoadTile<kDim, kKeys>(dst, q, [&](int j) { return blk.CacheRow<kDim>(a, cache, kt + j); });
  };
  const int tiles = DivUp(blk.kv_end, kKeys);
  // K and V of tile t live in stage t % 2 of their buffers.
  auto stage = [](int t) { return static_cast<uint32_t>(t % kStages) * kKeyTile; };
  load_kv(a.k_cache, k_s, 0);
  mma::CpAsyncCommit();  // group: Q and K(0)
  if (tiles > 1) load_kv(a.k_cache, k_s + stage(1), kKeys);
  load_kv(a.v_cache, v_s, 0);
  mma::CpAsyncCommit();  // group: K(1) and V(0)

  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const uint32_t q_addr = wgmma::SharedAddress(q_s) + wg * 64 * wgmma::kRowBytes;
  const uint32_t k_addr = wgmma::SharedAddress(k_s), v_addr = wgmma::SharedAddress(v_s);
  // This thread's rows: 64 wg + 16 warp + lane / 4 + 8 h, with their limits.
  const int row = 64 * wg + 16 * warp + lane / 4;
  const int limit[2] = {blk.Limit(a, row), blk.Limit(a, row + 8)};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float o[kDim / 2];  // O's accumulators: o[4 n + 2 h + e] = O[row h][8 n + 2 t + e]
#pragma unroll
  for (int i = 0; i < kDim / 2; ++i) o[i] = 0.0f;
  float s[kKeys / 2];        // S's accumulators, key 8 n + 2 t + e of the tile at [4 n + 2 h + e]
  uint32_t p[kKeySteps][4];  // P of the tile P·V multiplies, as the A fragment of each k-step

  // Issues S = Q·K(t)ᵀ into s (one commit group).
  auto issue_scores = [&](int t) {
    wgmma::FenceOperand(s);
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t a_desc = wgmma::Descriptor(
          q_addr + (ks / 4) * kRows * wgmma::kRowBytes + (ks % 4) * 32, 16, wgmma::kAtomBytes);
      const uint64_t b_desc =
          wgmma::Descriptor(k_addr + stage(t) + (ks / 4) * kKeys * wgmma::kRowBytes + (ks % 4) * 32,
                            16, wgmma::kAtomBytes);
      wgmma::MmaSS<T, false, kKeys>(s, a_desc, b_desc, ks > 0);
    }
    wgmma::Commit();
  };
  // The softmax of tile t's scores in s, in place; returns whether the output needs rescaling
  // by `correction` (once the rows' maxima settle, most tiles of a long row, it does not).
  float correction[2];
  auto softmax = [&](int t) {
    wgmma::FenceOperand(s);
    const int kt = t * kKeys;
    const bool rescale = SoftmaxTile<kKeys>(s, kt, kt + kKeys - 1 > blk.first_limit, limit,
                                            a.scale_log2, row_max, row_sum, correction);
    return __ballot_sync(kFullMask, rescale) != 0;
  };
  // Ties p's registers to the surrounding Mma and Wait calls, as FenceOperand(o) does o's.
  auto fence_probabilities = [&] {
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) wgmma::FenceOperand(p[kk]);
  };
  // P in the A fragment of each k-step of 16 keys: the accumulator layout of two n8 tiles.
  auto pack_probabilities = [&] {
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[kk][i] = PackPair<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    }
  };

  // Tile 0's scores and probabilities; the output is still zero, so it needs no rescaling.
  mma::CpAsyncWait<1>();  // this thread's pieces of Q and K(0) landed
  wgmma::FenceProxyAsync();
  __syncthreads();  // everyone's did
  issue_scores(0);
  wgmma::Wait<0>();
  softmax(0);
  pack_probabilities();

  // At the start of step t: waits for this thread's pieces of K(t + 1) and V(t) (its only loads
  // in flight), then for everyone's. Every warpgroup is then also done with S(t) and P·V(t - 1).
  auto landed = [&] {
    mma::CpAsyncWait<0>();
    wgmma::FenceProxyAsync();
    __syncthreads();
  };
  // After step t's wgmma are issued (they read K(t + 1) and V(t)): K(t + 2) loads into K(t)'s
  // stage and V(t + 1) into V(t - 1)'s, freed at `landed`. Issued behind the tensor cores' work,
  // the page-table reads and copies leave no gap before it.
  auto next_loads = [&](int t) {
    if (t + 2 < tiles) load_kv(a.k_cache, k_s + stage(t), (t + 2) * kKeys);
    if (t + 1 < tiles) load_kv(a.v_cache, v_s + stage(t + 1), (t + 1) * kKeys);
    mma::CpAsyncCommit();
  };
  // Issues O += P(t)·V(t) (one commit group): V's rows are keys (k), its 64-element blocks dims
  // (n), read transposed.
  auto issue_output = [&](int t) {
    wgmma::FenceOperand(o);
    fence_probabilities();
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      const uint64_t b_desc = wgmma::Descriptor(v_addr + stage(t) + kk * 16 * wgmma::kRowBytes,
                                                kKeys * wgmma::kRowBytes, wgmma::kAtomBytes);
      wgmma::MmaRS<T, true, kDim>(o, p[kk], b_desc, true);
    }
    wgmma::Commit();
  };

  // Step t: O += P(t)·V(t) on the tensor cores while this warpgroup's softmax of tile t + 1
  // runs on its scores, issued just before (as FlashAttention-3 overlaps them). The last step
  // is peeled off: with the S issue and its wait under a condition, ptxas serializes every
  // wgmma of the kernel (C7514).
  for (int t = 0; t + 1 < tiles; ++t) {
    landed();
    issue_scores(t + 1);
    issue_output(t);
    next_loads(t);
    wgmma::Wait<1>();  // S(t + 1) is done; P(t)·V(t) may still run
    const bool rescale = softmax(t + 1);
    wgmma::Wait<0>();  // P(t)·V(t) is done: o and p are this thread's again
    wgmma::FenceOperand(o);
    fence_probabilities();
    if (rescale) {
#pragma unroll
      for (int i = 0; i < kDim / 2; ++i) o[i] *= correction[i / 2 % 2];
    }
    pack_probabilities();
  }
  landed();
  issue_output(tiles - 1);
  wgmma::Wait<0>();
  wgmma::FenceOperand(o);

  StoreRows<T, kDim>(a, blk, o, row_sum, row);
#endif
}

}  // namespace pagoda::worker::cuda::attention_internal::prefill_wgmma
