// The avx2 table (AVX2 with FMA and F16C), compiled with those extensions for this file only
// (CMakeLists.txt); called only where the CPU supports them (kernel_table.cc). Its own kernels:
// dequantize_row (DequantizeRowSimd), the float32 register tiles of gemm_panel (GemmF32Tile<RB,
// TB>), attention, SwiGLU and the KV cache's halves; the rest is the portable code of
// kernels_body.inc compiled with AVX2, including the products of quantized weights.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "common/fp16.h"
#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

constexpr int kLanes = 8;

float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

void HalfRowToFloat(const uint8_t* p, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = LoadHalf(p + 2 * i);
}

#include "worker/backend/cpu/kernels_body.inc"

// out[i] = float(int(q[i]) - sub) * mul for 16 unsigned bytes, as two 8-lane halves.
inline void EmitU8(__m128i q, int sub, float mul, float* out) {
  for (int h = 0; h < 2; ++h) {
    const __m128i part = h == 0 ? q : _mm_srli_si128(q, 8);
    const __m256i i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(part), _mm256_set1_epi32(sub));
    _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(mul)));
  }
}

// out[i] = float(q[i]) * mul - off for 16 unsigned bytes.
inline void EmitU8Min(__m128i q, float mul, float off, float* out) {
  for (int h = 0; h < 2; ++h) {
    const __m128i part = h == 0 ? q : _mm_srli_si128(q, 8);
    const __m256 v =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part)), _mm256_set1_ps(mul));
    _mm256_storeu_ps(out + 8 * h, _mm256_sub_ps(v, _mm256_set1_ps(off)));
  }
}

inline void EmitI8(__m128i q, float mul, float* out) {
  for (int h = 0; h < 2; ++h) {
    const __m128i part = h == 0 ? q : _mm_srli_si128(q, 8);
    _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)),
                                                _mm256_set1_ps(mul)));
  }
}

#include "worker/backend/cpu/dequantize_simd.inc"

// Sum of the 8 lanes in a fixed tree: the two 128-bit halves, then their halves, then the pair.
inline float ReduceAdd(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Float32 weights x float32 activations, a register tile of RB weight rows x TB tokens: one
// 8-lane accumulator per output (from zero, or from the lane sums of the previous k block),
// summed over the block in 8-element steps (the k tail masked), then reduced across lanes (or
// stored for the next block). The operations on one output are the same for every (RB, TB), so
// the result of a row does not depend on the tile it was computed in. Reference:
// GemmPanelPortable (kernels_portable.cc).
template <int RB, int TB>
void GemmF32Tile(const GemmPanelArgs& a, int r0, int t0) {
  __m256 acc[RB][TB];
  for (int r = 0; r < RB; ++r) {
    for (int t = 0; t < TB; ++t) {
      acc[r][t] = a.resume ? _mm256_loadu_ps(LaneSums(a, r0 + r, t0 + t)) : _mm256_setzero_ps();
    }
  }
  const float* w = a.w + static_cast<size_t>(r0) * a.ldw;
  const float* x = a.x + static_cast<size_t>(t0) * a.ldx;
  int k = 0;
  for (; k + 8 <= a.k; k += 8) {
    __m256 wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = _mm256_loadu_ps(w + static_cast<size_t>(r) * a.ldw + k);
    for (int t = 0; t < TB; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + static_cast<size_t>(t) * a.ldx + k);
      for (int r = 0; r < RB; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k < a.k) {
    alignas(32) int32_t bits[8];
    for (int l = 0; l < 8; ++l) bits[l] = k + l < a.k ? -1 : 0;
    const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(bits));
    __m256 wv[RB];
    for (int r = 0; r < RB; ++r) {
      wv[r] = _mm256_maskload_ps(w + static_cast<size_t>(r) * a.ldw + k, m);
    }
    for (int t = 0; t < TB; ++t) {
      const __m256 xv = _mm256_maskload_ps(x + static_cast<size_t>(t) * a.ldx + k, m);
      for (int r = 0; r < RB; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < TB; ++t) {
    float* out = a.out + static_cast<size_t>(t0 + t) * a.ldo + r0;
    for (int r = 0; r < RB; ++r) {
      if (a.finish) {
        out[r] = ReduceAdd(acc[r][t]);
      } else {
        _mm256_storeu_ps(LaneSums(a, r0 + r, t0 + t), acc[r][t]);
      }
    }
  }
}

// Lanes of `mask` bits for the first n of 8 (n <= 8), for maskload / maskstore.
inline __m256i FirstLanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) in 8 lanes: kernels_avx512.cc's Exp16 (the same clamp, range reduction and polynomial),
// with 2^n applied as two factors 2^(n/2) built in the exponent bits, each a normal float for
// every clamped x (AVX2 has no vscalefps). NaN stays NaN.
inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(kExpMax), _mm256_max_ps(_mm256_set1_ps(kExpMin), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpTaylor7);
  for (const float c : kExpTaylor) {
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  }
  const __m256i ni = _mm256_cvtps_epi32(n);  // in [-159, 128]
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const auto pow2 = [](__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  };
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
}

// 8 values per vcvtps2ph (F16C), rounded to nearest even as common::FloatToF16, which writes
// the tail.
void FloatToHalfAvx2(const float* x, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = common::FloatToF16(x[i]);
}

// gate = gate / (1 + exp(-gate)) * up, 8 at a time (SwiGluPortable's operations with Exp8).
void SwiGluAvx2(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const __m256i m = FirstLanes(n - i >= 8 ? 8 : static_cast<int>(n - i));
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_maskstore_ps(gate + i, m, _mm256_mul_ps(silu, _mm256_maskload_ps(up + i, m)));
  }
}

// Lane i of the result: the sum of v[i]'s 8 lanes, for 8 vectors at once.
inline __m256 ReduceAdd8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Positions per pass of AttentionHeadAvx2Chunks (scores and weights: 1 KiB, in L1).
constexpr int kAttentionPass = 256;

// kernels_avx512.cc's AttentionHeadAvx512Chunks in 8 lanes (reference: AttentionHeadPortable,
// kernels_body.inc): passes of up to kAttentionPass positions, all scores first (8 positions'
// dot products reduced together by ReduceAdd8), the pass's maximum, its weights by Exp8, then
// the weighted values into one register sum per 8 elements (q is read from memory in the
// scores: 16 registers hold only the sums), with the output and the denominator rescaled once
// per pass. kChunks = head_dim / 8 rounded up. The steps depend on the head's own inputs only.
template <int kChunks>
void AttentionHeadAvx2Chunks(const AttentionHeadArgs& a) {
  const int tail = a.head_dim - 8 * (kChunks - 1);  // 1..8 elements in the last chunk
  const __m256i tail_mask = FirstLanes(tail);
  const auto load = [&](const float* p, int c) {
    return c + 1 == kChunks && tail < 8 ? _mm256_maskload_ps(p + 8 * c, tail_mask)
                                        : _mm256_loadu_ps(p + 8 * c);
  };
  // The KV cache's F16 values (a tail chunk's missing lanes: zero, nothing read past it).
  const auto load_halves = [&](const uint16_t* p, int c) {
    if (c + 1 == kChunks && tail < 8) {
      alignas(16) uint16_t part[8] = {};
      std::memcpy(part, p + 8 * c, sizeof(uint16_t) * tail);
      return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(part)));
    }
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * c)));
  };
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 acc[kChunks];
  for (int c = 0; c < kChunks; ++c) acc[c] = _mm256_setzero_ps();
  __m256 m = neg_inf, l = _mm256_setzero_ps();
  alignas(32) float weights[kAttentionPass];
  const uint16_t* values[kAttentionPass];
  KvWalk kv{a};
  for (int32_t p0 = 0; p0 <= a.last_pos; p0 += kAttentionPass) {
    const int count = a.last_pos + 1 - p0 < kAttentionPass ? a.last_pos + 1 - p0 : kAttentionPass;
    __m256 pass_max = neg_inf;
    for (int b = 0; b < count; b += 8) {
      __m256 dots[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        dots[i] = _mm256_setzero_ps();
        if (b + i >= count) continue;
        const uint16_t* k = kv.Next(&values[b + i]);
#pragma GCC unroll 32
        for (int c = 0; c < kChunks; ++c) {
          dots[i] = _mm256_fmadd_ps(load(a.q, c), load_halves(k, c), dots[i]);
        }
      }
      const __m256 valid = _mm256_castsi256_ps(FirstLanes(count - b));
      const __m256 s = _mm256_blendv_ps(
          neg_inf, _mm256_mul_ps(ReduceAdd8(dots), _mm256_set1_ps(a.scale)), valid);
      _mm256_store_ps(weights + b, s);
      pass_max = _mm256_max_ps(pass_max, s);
    }
    const __m256 new_m = _mm256_max_ps(m, _mm256_set1_ps(ReduceMax(pass_max)));
    const __m256 correction = Exp8(_mm256_sub_ps(m, new_m));
    m = new_m;
    l = _mm256_mul_ps(l, correction);
#pragma GCC unroll 32
    for (int c = 0; c < kChunks; ++c) acc[c] = _mm256_mul_ps(acc[c], correction);
    for (int b = 0; b < count; b += 8) {
      const __m256 valid = _mm256_castsi256_ps(FirstLanes(count - b));
      const __m256 w = _mm256_and_ps(valid, Exp8(_mm256_sub_ps(_mm256_load_ps(weights + b), m)));
      _mm256_store_ps(weights + b, w);
      l = _mm256_add_ps(l, w);
    }
    for (int i = 0; i < count; ++i) {
      const __m256 wi = _mm256_broadcast_ss(weights + i);
#pragma GCC unroll 32
      for (int c = 0; c < kChunks; ++c) {
        acc[c] = _mm256_fmadd_ps(wi, load_halves(values[i], c), acc[c]);
      }
    }
  }
  const __m256 inv = _mm256_set1_ps(1.0f / ReduceAdd(l));
#pragma GCC unroll 32
  for (int c = 0; c < kChunks; ++c) {
    const __m256 out = _mm256_mul_ps(acc[c], inv);
    if (c + 1 == kChunks && tail < 8) {
      _mm256_maskstore_ps(a.out + 8 * c, tail_mask, out);
    } else {
      _mm256_storeu_ps(a.out + 8 * c, out);
    }
  }
}

template <int... kChunks>
void AttentionHeadAvx2Dispatch(const AttentionHeadArgs& a, std::integer_sequence<int, kChunks...>) {
  using Fn = void (*)(const AttentionHeadArgs&);
  static constexpr Fn kByChunks[] = {&AttentionHeadAvx2Chunks<kChunks + 1>...};
  kByChunks[(a.head_dim + 7) / 8 - 1](a);
}

void AttentionHeadAvx2(const AttentionHeadArgs& a) {
  AttentionHeadAvx2Dispatch(a, std::make_integer_sequence<int, kMaxHeadDim / 8>());
}

constexpr int kRowBlock = 2;
constexpr int kTokenBlock = 5;
#include "worker/backend/cpu/gemm_tiles.inc"

}  // namespace

const KernelTable kAvx2Kernels = {
    .isa = CpuIsa::kAvx2,
    .dequantize_row = DequantizeRowSimd,
    .gemm_panel = GemmPanelTiles,
    .quant_gemm_panel = QuantGemmPanelPortable,
    .quantize_activations = QuantizeActivationsPortable,
    .attention_head = AttentionHeadAvx2,
    .rms_norm_row = RmsNormRowPortable,
    .swiglu = SwiGluAvx2,
    .add = AddPortable,
    .float_to_half = FloatToHalfAvx2,
};

}  // namespace pagoda::worker::cpu
