// AVX-512 kernels (F, BW, VL, DQ with FMA and F16C), compiled with those extensions for this
// file only (CMakeLists.txt); called only where the CPU supports them (kernel_table.cc).
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

constexpr int kLanes = 16;

#include "worker/backend/cpu/avx512_common.inc"

void HalfRowToFloat(const uint8_t* p, int n, float* out) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = LoadHalf(p + 2 * i);
}

#include "worker/backend/cpu/kernels_body.inc"

// out[i] = float(int(q[i]) - sub) * mul for 16 unsigned bytes.
inline void EmitU8(__m128i q, int sub, float mul, float* out) {
  const __m512i i = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(sub));
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(mul)));
}

// out[i] = float(q[i]) * mul - off for 16 unsigned bytes.
inline void EmitU8Min(__m128i q, float mul, float off, float* out) {
  const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), _mm512_set1_ps(mul));
  _mm512_storeu_ps(out, _mm512_sub_ps(v, _mm512_set1_ps(off)));
}

inline void EmitI8(__m128i q, float mul, float* out) {
  _mm512_storeu_ps(out,
                   _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(mul)));
}

#include "worker/backend/cpu/dequantize_simd.inc"

// A register tile of RB weight rows x TB tokens: one 16-lane accumulator per output (from zero,
// or from the lane sums of the previous k block), summed over the block in 16-element steps
// (the k tail masked), then reduced across lanes (or stored for the next block). The operations on
// one output are the same for every (RB, TB), so the result of a row does not depend on the
// tile it was computed in (ReduceAdd: avx512_common.inc).

template <int RB, int TB>
void Tile(const GemmPanelArgs& a, int r0, int t0) {
  __m512 acc[RB][TB];
  for (int r = 0; r < RB; ++r) {
    for (int t = 0; t < TB; ++t) {
      acc[r][t] = a.resume ? _mm512_loadu_ps(LaneSums(a, r0 + r, t0 + t)) : _mm512_setzero_ps();
    }
  }
  const float* w = a.w + static_cast<size_t>(r0) * a.ldw;
  const float* x = a.x + static_cast<size_t>(t0) * a.ldx;
  int k = 0;
  for (; k + 16 <= a.k; k += 16) {
    __m512 wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = _mm512_loadu_ps(w + static_cast<size_t>(r) * a.ldw + k);
    for (int t = 0; t < TB; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + static_cast<size_t>(t) * a.ldx + k);
      for (int r = 0; r < RB; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k < a.k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (a.k - k)) - 1);
    __m512 wv[RB];
    for (int r = 0; r < RB; ++r) {
      wv[r] = _mm512_maskz_loadu_ps(m, w + static_cast<size_t>(r) * a.ldw + k);
    }
    for (int t = 0; t < TB; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + static_cast<size_t>(t) * a.ldx + k);
      for (int r = 0; r < RB; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < TB; ++t) {
    float* out = a.out + static_cast<size_t>(t0 + t) * a.ldo + r0;
    for (int r = 0; r < RB; ++r) {
      if (a.finish) {
        out[r] = ReduceAdd(acc[r][t]);
      } else {
        _mm512_storeu_ps(LaneSums(a, r0 + r, t0 + t), acc[r][t]);
      }
    }
  }
}

constexpr int kRowBlock = 4;
constexpr int kTokenBlock = 6;
#include "worker/backend/cpu/gemm_tiles.inc"

}  // namespace

const KernelTable kAvx512Kernels = {
    CpuIsa::kAvx512, DequantizeRowSimd, GemmPanelImpl, QuantGemmPanelImpl, AttentionHeadImpl,
    RmsNormRowImpl,  SwiGluImpl,        AddImpl};

}  // namespace pagoda::worker::cpu
