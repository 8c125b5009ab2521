// AVX-512 kernels (F, BW, VL, DQ with FMA and F16C), compiled with those extensions for this
// file only (CMakeLists.txt); called only where the CPU supports them (kernel_table.cc).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
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

// QuantizeActivationsImpl (kernels_body.inc) 16 values at a time: the same IEEE operations
// (max of |x|, d = max / 127, one product x * (1 / d) rounded to nearest even, clamped), so
// the same bytes.
inline float AbsMax(const float* x, int n, bool* finite) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    bad |= _mm512_fpclass_ps_mask(v, 0x99);  // NaN (quiet, signalling) or +-infinity
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
  }
  *finite = bad == 0;
  return _mm512_reduce_max_ps(m);
}

// 16 values of x * id rounded and clamped to [-127, 127], as 32-bit integers (id = 0: zeros,
// the values of a block that is not finite).
inline __m512i Round16(const float* x, __m512 id) {
  if (_mm512_cmpeq_ps_mask(id, _mm512_setzero_ps()) == 0xFFFF) return _mm512_setzero_si512();
  const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x), id),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvtps_epi32(c);
}

void QuantizeActivationsAvx512(pagoda::common::GgmlType type, const float* x, int k, uint8_t* out) {
  const auto scale = [](float amax, bool finite, float* d) {
    if (!finite) {
      *d = std::numeric_limits<float>::quiet_NaN();
      return _mm512_setzero_ps();
    }
    *d = amax / 127.0f;
    return _mm512_set1_ps(*d > 0.0f ? 1.0f / *d : 0.0f);
  };
  if (ActivationFormatFor(type) == ActivationFormat::kBlock32) {
    float* scales = reinterpret_cast<float*>(out + Block32ScaleOffset(k));
    for (int b = 0; b < k / 32; ++b) {
      bool finite;
      float d;
      const float amax = AbsMax(x + 32 * b, 32, &finite);
      const __m512 id = scale(amax, finite, &d);
      for (int h = 0; h < 2; ++h) {
        const __m128i q = _mm512_cvtepi32_epi8(Round16(x + 32 * b + 16 * h, id));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * b + 16 * h),
                         _mm_xor_si128(q, _mm_set1_epi8(static_cast<char>(0x80))));
      }
      _mm256_storeu_ps(scales + 8 * b, _mm256_set1_ps(d));
    }
    return;
  }
  const bool natural = type == pagoda::common::GgmlType::Q6_K;
  for (int s = 0; s < k / 256; ++s) {
    uint8_t* rec = out + static_cast<size_t>(s) * kSuperRecordBytes;
    const float* xs = x + 256 * s;
    bool finite;
    float d;
    const float amax = AbsMax(xs, 256, &finite);
    const __m512 id = scale(amax, finite, &d);
    int16_t sums32[8], sums16[16];
    for (int j = 0; j < 16; ++j) {  // sub-blocks of 16
      const __m512i q = Round16(xs + 16 * j, id);
      sums16[j] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
      const int slot = natural ? j / 2 : KQuantSlot(j / 2);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(rec + 32 * slot + 16 * (j % 2)),
                       _mm512_cvtepi32_epi8(q));
    }
    for (int j = 0; j < 8; ++j) sums32[j] = static_cast<int16_t>(sums16[2 * j] + sums16[2 * j + 1]);
    std::memcpy(rec + kSuperScaleOffset, &d, sizeof(d));
    std::memcpy(rec + kSuperSums32Offset, sums32, sizeof(sums32));
    std::memcpy(rec + kSuperSums16Offset, sums16, sizeof(sums16));
  }
}

constexpr int kRowBlock = 4;
constexpr int kTokenBlock = 6;
#include "worker/backend/cpu/gemm_tiles.inc"

}  // namespace

const KernelTable kAvx512Kernels = {CpuIsa::kAvx512,
                                    DequantizeRowSimd,
                                    GemmPanelImpl,
                                    QuantGemmPanelImpl,
                                    QuantizeActivationsAvx512,
                                    AttentionHeadImpl,
                                    RmsNormRowImpl,
                                    SwiGluImpl,
                                    AddImpl};

}  // namespace pagoda::worker::cpu
