// The product of activations with weights kept in GGUF blocks, or FP8 rows, on Hopper's
// warpgroup tensor cores (sm_90a): LaunchQuantGemm's contract (quant_kernels.h), for steps of
// more than a few tokens.
//
// A block is one warpgroup and takes kRows = 64 weight rows (the m64 of wgmma) and kN tokens (its
// n: 32, 64 or 128). Along the row it walks steps of kCols = 64 columns, two units of 32. Each
// thread decodes the weights its A fragments hold straight from the blocks into registers (rows g
// and g + 8 of its warp's 16, columns 2t, 2t + 1, 2t + 8 and 2t + 9 of each k-step of 16:
// wgmma.cuh), so the weights never pass through shared memory; the activations come in by cp.async
// into 128-byte swizzled tiles (kN token rows of 64 columns), kStages - 1 steps ahead, and are
// wgmma's B operand, K-major. Step k issues its four m64nNk16 with A from registers, waits for step
// k - 1's, then, while step k's run on the tensor cores, decodes step k + 1's fragments into the
// register set step k - 1 read; one barrier a step. The weights of a step kPrefetchSteps ahead
// are asked into L2 meanwhile.
//
// The values are DecodeUnit's (the same formulas and float operations), rounded to the dtype as
// the mma.sync kernel rounds them; sums are fp32 in the tensor cores' order. FP8 rows (kFp8) are
// units of 32 E4M3 bytes, exact in the dtype; each output takes its row's scale at the end.
//
// Grid: (token tiles, row tiles, splits), so that blocks of the same rows run side by side and the
// second token tile finds the weights in L2. With splits (split-K: gridDim.z > 1, for products
// whose tiles alone would leave SMs idle) block z takes the steps [z, z + 1) * split_steps of its
// tile and writes its sums to the workspace; the tile's last block to finish (a counter per tile)
// adds the splits' sums in z order, so the result does not depend on which block finished last,
// writes out as an unsplit block would, and sets the counter back to zero for the next launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/last_block.cuh"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/mma.cuh"
#include "worker/backend/cuda/quant/quant_blocks.cuh"
#include "worker/backend/cuda/quant/quant_kernels.h"
#include "worker/backend/cuda/wgmma.cuh"

namespace pagoda::worker::cuda::quant_wgmma {

inline constexpr int kThreads = 128;  // one warpgroup
inline constexpr int kRows = 64;
inline constexpr int kCols = 2 * kQuantUnit;
inline constexpr int kStages = 4;
inline constexpr int kPrefetchSteps = 4;

// Bytes of one stage's activation tile: kN rows of kCols 16-bit elements, one swizzled block.
template <int kN>
constexpr uint32_t StageBytes() {
  return static_cast<uint32_t>(kN) * wgmma::kRowBytes;
}
template <int kN>
constexpr size_t SmemBytes() {
  return wgmma::kAtomBytes + kStages * StageBytes<kN>();
}

__device__ __forceinline__ uint32_t LoadU16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint16_t*>(p));
}

// Asks L2 for the line at p ahead of its use (a hint: nothing waits for it).
__device__ __forceinline__ void PrefetchL2(const void* p) {
#ifdef PAGODA_CUDA_EMULATION
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#endif
}

// Byte offset in a row of the block holding unit u's weights (where a step's bytes start).
template <WeightFormat F>
__device__ __forceinline__ size_t UnitBlockOffset(int u) {
  if constexpr (F == WeightFormat::kFp8) return size_t{kQuantUnit} * u;
  if constexpr (F == WeightFormat::kQ8_0) return size_t{34} * u;
  if constexpr (F == WeightFormat::kQ4_0) return size_t{18} * u;
  if constexpr (F == WeightFormat::kQ4_K) return size_t{144} * (u >> 3);
  if constexpr (F == WeightFormat::kQ5_K) return size_t{176} * (u >> 3);
  return size_t{210} * (u >> 3);
}

// A value 0 <= n < 2^23 as float, exactly, with no conversion instruction (Int8ToFloat's trick).
__device__ __forceinline__ float SmallToFloat(uint32_t n) {
  return __uint_as_float(0x4B000000u | n) - 8388608.0f;
}

// The values at columns l = 2t + 8i + e (i < 4, e < 2) of units u0 and u0 + 1 (u0 even) of a row:
// v[ui][2i + e] for unit u0 + ui (zeros for a unit at or past `units`). Each is DecodeUnit's
// y[l], from two bytes at a time; the K formats' two units are one block's neighbours and share
// its header and, for Q4_K and Q5_K, their bytes (the low and high nibbles), Q6_K its high bits.
template <WeightFormat F>
__device__ __forceinline__ void DecodeStepRow(const uint8_t* row, int u0, int units, int t,
                                              float (&v)[2][8]) {
  if constexpr (F == WeightFormat::kFp8) {  // E4M3 bytes, exactly; the row scale comes last
#pragma unroll
    for (int ui = 0; ui < 2; ++ui) {
      const int u = u0 + ui;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = u < units ? Fp8PairToFloat2(LoadU16(row + kQuantUnit * u + 2 * t + 8 * i))
                                   : make_float2(0.0f, 0.0f);
        v[ui][2 * i] = f.x, v[ui][2 * i + 1] = f.y;
      }
    }
  } else if constexpr (F == WeightFormat::kQ8_0 || F == WeightFormat::kQ4_0) {
#pragma unroll
    for (int ui = 0; ui < 2; ++ui) {
      const int u = u0 + ui;
      if (u >= units) {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[ui][i] = 0.0f;
        continue;
      }
      if constexpr (F == WeightFormat::kQ8_0) {
        const uint8_t* b = row + 34 * u;
        const float d = LoadHalf(b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t w = LoadU16(b + 2 + 2 * t + 8 * i);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[ui][2 * i + e] = d * Int8ToFloat(static_cast<int8_t>((w >> (8 * e)) & 0xFFu));
          }
        }
      } else {
        const uint8_t* b = row + 18 * u;
        const float d = LoadHalf(b);
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // bytes 2t + 8i: low nibbles are l < 16, high ones l + 16
          const uint32_t w = LoadU16(b + 2 + 2 * t + 8 * i);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[ui][2 * i + e] = d * (SmallToFloat((w >> (8 * e)) & 0x0Fu) - 8.0f);
            v[ui][2 * (i + 2) + e] = d * (SmallToFloat((w >> (8 * e + 4)) & 0x0Fu) - 8.0f);
          }
        }
      }
    }
  } else if constexpr (F == WeightFormat::kQ4_K || F == WeightFormat::kQ5_K) {
    constexpr bool kFive = F == WeightFormat::kQ5_K;
    const int j = u0 & 7;  // even: the low nibbles' unit; j + 1 the high ones'
    const uint8_t* b = row + (kFive ? 176 : 144) * (u0 >> 3);
    uint32_t head[4];
    LoadWords16(b, head);
    float scale[2], min[2];
#pragma unroll
    for (int ui = 0; ui < 2; ++ui) {
      int sc, m;
      KScaleMin(j + ui, head + 1, &sc, &m);
      scale[ui] = HalfToFloat(head[0] & 0xFFFFu) * static_cast<float>(sc);
      min[ui] = HalfToFloat(head[0] >> 16) * static_cast<float>(m);
    }
    const uint8_t* qs = b + (kFive ? 48 : 16) + 32 * (j >> 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = LoadU16(qs + 2 * t + 8 * i);
      const uint32_t h = kFive ? LoadU16(b + 16 + 2 * t + 8 * i) >> j : 0u;
#pragma unroll
      for (int ui = 0; ui < 2; ++ui) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          uint32_t q = (w >> (8 * e + 4 * ui)) & 0x0Fu;
          if constexpr (kFive) q |= ((h >> (8 * e + ui)) & 1u) << 4;
          // DecodeUnit's scale * q - min, q exact: the same float operations.
          v[ui][2 * i + e] = scale[ui] * SmallToFloat(q) - min[ui];
        }
      }
    }
  } else {
    static_assert(F == WeightFormat::kQ6_K, "no decoder for this format");
    const int within = u0 & 7, half = within >> 2, qd = within & 3;  // qd 0 or 2; u0 + 1: qd + 1
    const uint8_t* b = row + 210 * (u0 >> 3);
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const float d = LoadHalf(b + 208);
    float lo[2], hi[2];
#pragma unroll
    for (int ui = 0; ui < 2; ++ui) {
      const uint32_t scales = LoadU16(b + 192 + 8 * half + 2 * (qd + ui));
      lo[ui] = d * static_cast<float>(static_cast<int8_t>(scales & 0xFFu));
      hi[ui] = d * static_cast<float>(static_cast<int8_t>(scales >> 8));
    }
    const int lo_shift = (qd >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t wh = LoadU16(qh + 2 * t + 8 * i) >> (2 * qd);
#pragma unroll
      for (int ui = 0; ui < 2; ++ui) {
        const uint32_t wl = LoadU16(ql + 32 * ui + 2 * t + 8 * i) >> lo_shift;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const uint32_t q = ((wl >> (8 * e)) & 0x0Fu) | ((wh >> (8 * e + 2 * ui)) & 3u) << 4;
          v[ui][2 * i + e] = (i < 2 ? lo[ui] : hi[ui]) * (SmallToFloat(q) - 32.0f);
        }
      }
    }
  }
}

// Step k's A fragments of this thread from its rows (rows[h]: row g + 8 h of its warp's 16, null
// past the matrix): a[s] for k-step s of 16 columns, unit 2k + s / 2. Rows past the matrix and
// units past the row are zeros.
template <WeightFormat F, typename T>
__device__ __forceinline__ void DecodeStep(const uint8_t* const (&rows)[2], int units, int k, int t,
                                           uint32_t (&a)[4][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[2][8] = {};
    if (rows[h] != nullptr && 2 * k < units) DecodeStepRow<F>(rows[h], 2 * k, units, t, v);
#pragma unroll
    for (int ui = 0; ui < 2; ++ui) {
      // Column l = 2t + 8i + e of unit 2k + ui is in k-step 2 ui + i / 2, register h + 2 (i % 2).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[2 * ui + i / 2][h + 2 * (i % 2)] = PackPair<T>(v[ui][2 * i], v[ui][2 * i + 1]);
      }
    }
  }
}

template <WeightFormat F, typename T, int kN>
__global__ void __launch_bounds__(kThreads)
    QuantGemmWgmmaKernel(const QuantGemvParams p, int split_steps) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built for a GPU without wgmma: the launcher never chooses this kernel there
#else
  PAGODA_DYNAMIC_SHARED(uint32_t, smem_words);
  char* const raw = reinterpret_cast<char*>(smem_words);
  char* const xs =
      raw + (wgmma::kAtomBytes - wgmma::SharedAddress(raw) % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  const uint32_t xs_addr = wgmma::SharedAddress(xs);
  const int tok0 = static_cast<int>(blockIdx.x) * kN, row0 = static_cast<int>(blockIdx.y) * kRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int row_g = row0 + 16 * warp + g;
  const int n_in = p.w.cols;
  const int units = n_in / kQuantUnit;
  // Steps of two units, rounded up to an even count so that the loop below takes them in pairs
  // (the two register sets alternate without a condition around a wgmma): a step past the row's
  // end has zero weights and zero activations, and adds nothing.
  const int steps = (units + 3) / 4 * 2;
  // This block's steps [k_first, k_end): split_steps is even, so their count is too.
  const int k_first = static_cast<int>(blockIdx.z) * split_steps;
  const int k_end = min(steps, k_first + split_steps);
  const uint16_t* const x = static_cast<const uint16_t*>(p.x);
  const uint8_t* rows[2];  // this thread's rows g and g + 8 of its warp's 16
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_g + 8 * h;
    rows[h] = row < p.w.rows
                  ? static_cast<const uint8_t*>(p.w.data) + static_cast<size_t>(row) * p.w.row_bytes
                  : nullptr;
  }

  // Step k's activations into stage `stage`: kN rows of 8 pieces of 16 bytes, zeros for tokens
  // and columns past the end.
  auto load_x = [&](int k, int stage) {
    if (k >= k_end) return;
    char* const dst = xs + static_cast<uint32_t>(stage) * StageBytes<kN>();
    const int c = static_cast<int>(threadIdx.x) % 8;
    const int col = k * kCols + c * 8;
#pragma unroll
    for (int i = 0; i < kN * 8 / kThreads; ++i) {
      const int r = static_cast<int>(threadIdx.x) / 8 + i * (kThreads / 8);
      const bool inside = tok0 + r < p.num_tokens && col < n_in;
      mma::CpAsync16(dst + wgmma::SwizzledOffset(r, c * 8),
                     inside ? x + static_cast<size_t>(tok0 + r) * n_in + col : x, inside);
    }
  };
  // Step k's bytes of this thread's rows, into L2. Q8_0, Q4_0 and FP8 steps read two blocks or
  // units (68, 36 or 64 bytes): thread t of a quad asks for the 32-byte sector at 32 t (FP8's
  // two sectors: threads 0 and 1). The K
  // formats' four steps of a block read all of it (up to 210 bytes): the block's first step asks
  // for the whole block, 64 t from its start (and so does a split's first step, which may fall
  // inside a block).
  auto prefetch = [&](int k) {
    const int u = 2 * k;
    constexpr bool kWholeBlock =
        F != WeightFormat::kQ8_0 && F != WeightFormat::kQ4_0 && F != WeightFormat::kFp8;
    if (k >= k_end || u >= units || (kWholeBlock && (u & 7) != 0 && k != k_first)) return;
    if (F == WeightFormat::kFp8 && t >= 2) return;  // a step's 64 bytes are two sectors
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(row_g + 8 * h, p.w.rows - 1);
      const size_t at = UnitBlockOffset<F>(u) + (kWholeBlock ? 64 : 32) * t;
      if (at < p.w.row_bytes) {
        PrefetchL2(static_cast<const uint8_t*>(p.w.data) +
                   static_cast<size_t>(row) * p.w.row_bytes + at);
      }
    }
  };

  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
  uint32_t a0[4][4], a1[4][4];

  // Step k's activations go to stage (k - k_first) % kStages.
#pragma unroll
  for (int s = 0; s + 1 < kStages; ++s) {
    load_x(k_first + s, s);
    mma::CpAsyncCommit();
  }
#pragma unroll
  for (int k = 0; k < kPrefetchSteps; ++k) prefetch(k_first + k);
  DecodeStep<F, T>(rows, units, k_first, t, a0);
  mma::CpAsyncWait<kStages - 2>();  // this thread's pieces of step k_first landed
  wgmma::FenceProxyAsync();
  __syncthreads();  // everyone's did

  // Step k: its wgmma on `cur` and stage k % kStages; then, with them in flight, step k + 1's
  // fragments into `next` (free once step k - 1's wgmma is done), and step k + kStages - 1's
  // activations into the stage step k - 1 read.
  auto step = [&](int k, uint32_t(&cur)[4][4], uint32_t(&next)[4][4]) {
    const int i = k - k_first;
    const uint32_t stage = xs_addr + static_cast<uint32_t>(i % kStages) * StageBytes<kN>();
    wgmma::FenceOperand(acc);
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma::FenceOperand(cur[s]);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      wgmma::MmaRS<T, false, kN>(acc, cur[s],
                                 wgmma::Descriptor(stage + 32 * s, 16, wgmma::kAtomBytes), true);
    }
    wgmma::Commit();
    wgmma::Wait<1>();  // step k - 1's wgmma is done: `next` and its stage are free
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma::FenceOperand(next[s]);
    prefetch(k + kPrefetchSteps);
    if (k + 1 < k_end) DecodeStep<F, T>(rows, units, k + 1, t, next);
    mma::CpAsyncWait<kStages - 3>();  // this thread's pieces of step k + 1 landed
    wgmma::FenceProxyAsync();
    __syncthreads();  // everyone's did, and every thread is past step k - 1's wait
    load_x(k + kStages - 1, (i + kStages - 1) % kStages);
    mma::CpAsyncCommit();
  };
  for (int k = k_first; k < k_end; k += 2) {
    step(k, a0, a1);
    step(k + 1, a1, a0);
  }
  wgmma::Wait<0>();
  wgmma::FenceOperand(acc);

  if (gridDim.z > 1) {
    // Partial sums of split z of a tile: (kN / 2) x kThreads floats, register-major, so that
    // each store and load of a warp is 128 contiguous bytes.
    const size_t tile = size_t{blockIdx.y} * gridDim.x + blockIdx.x;
    float* const parts = p.split.partials + tile * gridDim.z * (kN / 2) * kThreads + threadIdx.x;
    float* const mine = parts + size_t{blockIdx.z} * (kN / 2) * kThreads;
#pragma unroll
    for (int r = 0; r < kN / 2; ++r) __stcg(mine + r * kThreads, acc[r]);
    if (!ArrivesLast(p.split.counters + tile, gridDim.z)) return;  // a later block finishes it
    // split z's sum r; this block's own from its registers
    auto part = [&](unsigned z, int r) {
      return z == blockIdx.z ? acc[r] : __ldcg(parts + (size_t{z} * (kN / 2) + r) * kThreads);
    };
#pragma unroll
    for (int r = 0; r < kN / 2; ++r) {
      float sum = part(0, r);
      for (unsigned z = 1; z < gridDim.z; ++z) sum += part(z, r);
      acc[r] = sum;
    }
  }

  // acc[4 j + 2 h + e] = D[16 warp + g + 8 h][8 j + 2 t + e]: D's rows are weight rows
  // (outputs), its columns tokens.
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = row_g + 8 * h, tok = tok0 + 8 * j + 2 * t + e;
        if (row >= p.w.rows || tok >= p.num_tokens) continue;
        float* o = p.out + static_cast<size_t>(tok) * p.ld_out + row;
        float v = acc[4 * j + 2 * h + e];
        if constexpr (F == WeightFormat::kFp8) v *= p.w.row_scales[row];
        *o = p.accumulate ? *o + v : v;
      }
    }
  }
#endif
}

}  // namespace pagoda::worker::cuda::quant_wgmma
