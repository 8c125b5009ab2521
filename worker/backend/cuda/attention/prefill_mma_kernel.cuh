// Prefill attention on tensor cores (head dims 64 and 128): a flash-attention kernel whose
// Q·Kᵀ and P·V are warp-level mma.sync (16-bit inputs, fp32 accumulators) fed by ldmatrix, over
// paged KV, with an online softmax in fp32 (base 2). Contract in paged_attention.h; the SIMT
// kernel in prefill_attention.cu serves the other head dims.
//
// Rows, limits and the softmax are prefill_tile.cuh's. A block takes kRows rows; each of its 4
// warps owns one or two m16 tiles of rows (kRows below). It streams the positions in tiles of
// kKeys, masking only the tiles that reach past its first row's limit.
//
// Pipeline (shared memory: Q, one K tile, one V tile, rows padded by 16 bytes so that ldmatrix's
// eight row addresses fall in distinct banks): the V tile of step t loads while the warps compute
// S = Q·K(t)ᵀ and its softmax, and K(t+1) loads while they accumulate P·V(t). Rows of a tile past
// the block's last position are zero-filled, never read from the cache.
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

namespace pagoda::worker::cuda::attention_internal {
namespace prefill_mma {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kKeys = 64;
inline constexpr int kPad = 8;  // elements (16 bytes) after each shared-memory row

// A block's query rows when each warp owns kMTiles m16 tiles (1 or 2): two tiles reuse each K/V
// fragment twice (half the shared-memory reads per FLOP), one tile doubles the blocks of a
// small launch (a short chunk over a long prefix would otherwise leave SMs idle).
template <int kMTiles>
inline constexpr int kRows = kWarps* kMTiles * 16;

template <int kDim, int kMTiles>
constexpr size_t SmemBytes() {
  return static_cast<size_t>(kRows<kMTiles> + 2 * kKeys) * (kDim + kPad) * sizeof(uint16_t);
}

// Copies kRowCount rows of kDim elements into shared memory rows of kDim + kPad, 16 bytes per
// cp.async; row r comes from src(r), or is zeros where src(r) is null (`any` is then the
// never-read global address the instruction is given).
template <int kDim, int kRowCount, typename Src>
__device__ __forceinline__ void LoadRows(uint16_t* dst, const uint16_t* any, Src src) {
  constexpr int kChunks = kDim / 8;  // 16-byte pieces per row
  static_assert((kRowCount * kChunks) % kThreads == 0, "every thread copies the same count");
  const int c = threadIdx.x % kChunks;
#pragma unroll
  for (int i = 0; i < kRowCount * kChunks / kThreads; ++i) {
    const int r = threadIdx.x / kChunks + i * (kThreads / kChunks);
    const uint16_t* row = src(r);
    mma::CpAsync16(dst + r * (kDim + kPad) + c * 8, row != nullptr ? row + c * 8 : any,
                   row != nullptr);
  }
}

template <typename T, int kDim, int kMTiles>
__global__ void __launch_bounds__(kThreads, kMTiles == 1 ? 3 : 2)
    PrefillMmaKernel(const PrefillArgs a) {
  constexpr int kRows = prefill_mma::kRows<kMTiles>;
  constexpr int kLd = kDim + kPad;
  constexpr int kSteps = kDim / 16;  // k-steps of Q·Kᵀ, n-tile pairs of P·V
  PAGODA_DYNAMIC_SHARED(uint32_t, smem_words);
  uint16_t* const q_s = reinterpret_cast<uint16_t*>(smem_words);
  uint16_t* const k_s = q_s + kRows * kLd;
  uint16_t* const v_s = k_s + kKeys * kLd;

  PrefillBlock blk;
  if (!blk.Init(a, kRows)) return;
  const uint16_t* const q = static_cast<const uint16_t*>(a.q);
  LoadRows<kDim, kRows>(q_s, q, [&](int r) -> const uint16_t* {
    return r < blk.rows_here ? q + blk.RowOffset(a, r, kDim) : nullptr;
  });
  auto load_tile = [&](const void* cache, uint16_t* dst, int kt) {
    LoadRows<kDim, kKeys>(dst, q, [&](int j) { return blk.CacheRow<kDim>(a, cache, kt + j); });
  };
  load_tile(a.k_cache, k_s, 0);
  mma::CpAsyncCommit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int warp_row = warp * kMTiles * 16;
  // This thread's rows: warp_row + 16 m + g + 8 h, with their limits.
  int limit[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) limit[m][h] = blk.Limit(a, warp_row + 16 * m + g + 8 * h);
  }
  float row_max[kMTiles][2], row_sum[kMTiles][2];
  float o[kMTiles][kDim / 8][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) row_max[m][h] = -INFINITY, row_sum[m][h] = 0.0f;
#pragma unroll
    for (int n = 0; n < kDim / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[m][n][i] = 0.0f;
    }
  }

  const int tiles = DivUp(blk.kv_end, kKeys);
  for (int tile = 0; tile < tiles; ++tile) {
    const int kt = tile * kKeys;
    mma::CpAsyncWait<0>();
    __syncthreads();  // Q and K(tile) landed; every warp is done with V(tile - 1)
    load_tile(a.v_cache, v_s, kt);
    mma::CpAsyncCommit();

    // S = Q·K(tile)ᵀ: s[m][n] is the m16 x n8 tile of rows 16 m, keys 8 n.
    float s[kMTiles][kKeys / 8][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[m][n][i] = 0.0f;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        mma::LdMatrixX4(qa[m],
                        q_s + (warp_row + 16 * m + lane % 16) * kLd + ks * 16 + lane / 16 * 8);
      }
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        // Keys 16 np + [0, 16): b[0], b[1] of n-tile 2 np, then of 2 np + 1.
        uint32_t kb[4];
        mma::LdMatrixX4(
            kb, k_s + (16 * np + lane / 16 * 8 + lane % 8) * kLd + ks * 16 + (lane / 8 % 2) * 8);
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          mma::MmaM16N8K16<T>(s[m][2 * np], qa[m], kb[0], kb[1]);
          mma::MmaM16N8K16<T>(s[m][2 * np + 1], qa[m], kb[2], kb[3]);
        }
      }
    }

    // Online softmax per row; the four lanes of a quad hold one row's 64 scores.
    const bool masked = kt + kKeys - 1 > blk.first_limit;
    float correction[kMTiles][2];
    bool rescale = false;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      rescale = SoftmaxTile<kKeys>(&s[m][0][0], kt, masked, limit[m], a.scale_log2, row_max[m],
                                   row_sum[m], correction[m]) ||
                rescale;
    }
    // Once the rows' maxima settle (most tiles of a long row), the output needs no rescaling.
    if (__ballot_sync(kFullMask, rescale) != 0) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int n = 0; n < kDim / 8; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) o[m][n][i] *= correction[m][i / 2];
        }
      }
    }

    mma::CpAsyncWait<0>();
    __syncthreads();  // V(tile) landed; every warp is done with K(tile)
    if (tile + 1 < tiles) load_tile(a.k_cache, k_s, kt + kKeys);
    mma::CpAsyncCommit();

    // O += P·V(tile): the accumulator layout of S is the A layout of P, keys as k.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        pa[m][0] = PackPair<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
        pa[m][1] = PackPair<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
        pa[m][2] = PackPair<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
        pa[m][3] = PackPair<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kSteps; ++dp) {
        // Keys 16 kk + [0, 16), dims 16 dp + [0, 16): b[0], b[1] of n-tile 2 dp, then 2 dp + 1.
        uint32_t vb[4];
        mma::LdMatrixX4Trans(vb, v_s + (16 * kk + lane % 16) * kLd + dp * 16 + lane / 16 * 8);
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          mma::MmaM16N8K16<T>(o[m][2 * dp], pa[m], vb[0], vb[1]);
          mma::MmaM16N8K16<T>(o[m][2 * dp + 1], pa[m], vb[2], vb[3]);
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    StoreRows<T, kDim>(a, blk, &o[m][0][0], row_sum[m], warp_row + 16 * m + g);
  }
}

}  // namespace prefill_mma
}  // namespace pagoda::worker::cuda::attention_internal
