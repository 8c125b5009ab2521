// AVX2 kernels (with FMA and F16C), compiled with those extensions for this file only
// (CMakeLists.txt); called only where the CPU supports them (kernel_table.cc).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

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

// A register tile of RB weight rows x TB tokens: one 8-lane accumulator per output (from zero,
// or from the lane sums of the previous k block), summed over the block in 8-element steps
// (the k tail masked), then reduced across lanes (or stored for the next block). The operations on
// one output are the same for every (RB, TB), so the result of a row does not depend on the
// tile it was computed in.
inline float ReduceAdd(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <int RB, int TB>
void Tile(const GemmPanelArgs& a, int r0, int t0) {
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

constexpr int kRowBlock = 2;
constexpr int kTokenBlock = 5;
#include "worker/backend/cpu/gemm_tiles.inc"

}  // namespace

const KernelTable kAvx2Kernels = {CpuIsa::kAvx2,
                                  DequantizeRowSimd,
                                  GemmPanelImpl,
                                  QuantGemmPanelImpl,
                                  QuantizeActivationsImpl,
                                  AttentionHeadImpl,
                                  RmsNormRowImpl,
                                  SwiGluImpl,
                                  AddImpl};

}  // namespace pagoda::worker::cpu
