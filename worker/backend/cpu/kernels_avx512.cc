// The avx512 table (AVX-512 F, BW, VL, DQ with FMA and F16C), compiled with those extensions
// for this file only (CMakeLists.txt); called only where the CPU supports them
// (kernel_table.cc). Its own kernels: dequantize_row (DequantizeRowAvx512), the float32 register
// tiles of gemm_panel (GemmF32Tile<RB, TB>), one token's product with float weights read in
// place (GemvFloat<kType, RB>), the quantization of activations, attention, SwiGLU and the KV
// cache's halves; the rest is the portable code of kernels_body.inc compiled with AVX-512,
// including the products of quantized weights. The avx512vnni and avx512amx tables are this
// one with other products of quantized weights (kernel_table.cc).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "common/fp16.h"
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

// 16 weights of a row of kType from element k as floats (exact conversions: what
// dequantize_row writes); lanes outside m are zero.
template <common::GgmlType kType>
inline __m512 LoadWeights(const uint8_t* row, int k, __mmask16 m) {
  if constexpr (kType == common::GgmlType::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kType == common::GgmlType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * static_cast<size_t>(k)));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * static_cast<size_t>(k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// DequantizeRowSimd with BF16 widened 16 at a time (LoadWeights: the bits moved up 16, exact,
// as the portable Bf16RowToFloat of dequantize_blocks.inc) instead of one element at a time.
void DequantizeRowAvx512(common::GgmlType type, const uint8_t* row, int n, float* out) {
  if (type != common::GgmlType::BF16) return DequantizeRowSimd(type, row, n, out);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, LoadWeights<common::GgmlType::BF16>(row, i, m));
  }
}

// ReduceAdd (avx512_common.inc) of 16 accumulators at once, v[row][token] for 4 rows x 4 tokens:
// 128-bit block t of the result holds token t's four row sums in row order. Each sum is made by
// ReduceAdd's additions, on the same operands in the same order (lane i + lane i+8, then the
// first four of those + the next four, then + 2, then + 1); the shuffles between the levels only
// move other outputs' partial sums beside it. So a sum's bits do not depend on what it was
// reduced with.
inline __m512 ReduceAdd4x4(const __m512 (&v)[4][4]) {
  __m512 s4[4];  // per row: block t = token t's (i + i+8) + (i+4 + i+12), i < 4
  for (int r = 0; r < 4; ++r) {
    __m512 s8[2];  // tokens (0, 1) and (2, 3): 8 lanes each of lane i + lane i+8
    for (int p = 0; p < 2; ++p) {
      const __m512 x = v[r][2 * p], y = v[r][2 * p + 1];
      s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    s4[r] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[0], s8[1], 0x88),
                          _mm512_shuffle_f32x4(s8[0], s8[1], 0xDD));
  }
  __m512 s2[2];  // rows (0, 1) and (2, 3): per token, each row's 0 + 2 and 1 + 3
  for (int p = 0; p < 2; ++p) {
    const __m512 x = s4[2 * p], y = s4[2 * p + 1];
    s2[p] = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], 0x88),
                       _mm512_shuffle_ps(s2[0], s2[1], 0xDD));
}

// Float32 weights x float32 activations, a register tile of RB weight rows x TB tokens: one
// 16-lane accumulator per output (from zero, or from the lane sums of the previous k block),
// summed over the block in 16-element steps (the k tail masked), then reduced across lanes (or
// stored for the next block): one token's outputs by ReduceAdd (avx512_common.inc), several
// tokens' by ReduceAdd4x4, which makes the same additions. The operations on one output are the
// same for every (RB, TB), so the result of a row does not depend on the tile it was computed in
// (MatMulIsBatchInvariantOnEveryPath fails if ReduceAdd4x4 pairs its lanes otherwise).
// Reference: GemmPanelPortable (kernels_portable.cc).

template <int RB, int TB>
void GemmF32Tile(const GemmPanelArgs& a, int r0, int t0) {
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
  if (!a.finish) {
    for (int t = 0; t < TB; ++t) {
      for (int r = 0; r < RB; ++r) _mm512_storeu_ps(LaneSums(a, r0 + r, t0 + t), acc[r][t]);
    }
    return;
  }
  if (TB == 1) {  // one token (GEMV): the grouped reduction would be mostly padding
    float* out = a.out + static_cast<size_t>(t0) * a.ldo + r0;
    for (int r = 0; r < RB; ++r) out[r] = ReduceAdd(acc[r][0]);
    return;
  }
  // Four tokens at a time (missing rows and tokens are zero accumulators, whose sums are not
  // stored).
  static_assert(RB <= 4);
  for (int tg = 0; tg < TB; tg += 4) {
    __m512 v[4][4];
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < 4; ++t) {
        v[r][t] = r < RB && tg + t < TB ? acc[r][tg + t] : _mm512_setzero_ps();
      }
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, ReduceAdd4x4(v));
    for (int t = 0; t < 4 && tg + t < TB; ++t) {
      std::memcpy(a.out + static_cast<size_t>(t0 + tg + t) * a.ldo + r0, sums + 4 * t,
                  RB * sizeof(float));
    }
  }
}

// QuantizeActivationsPortable (kernels_body.inc) 16 values at a time: the same IEEE operations
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

// exp(x) in 16 lanes by the clamp, range reduction and polynomial of kernels_body.inc (|r| <=
// ln2 / 2, truncation under 6e-9 relative), scaled by 2^n with vscalefps, which rounds e^-110 to
// 0 (so exp(-inf) = 0). NaN stays NaN (max and min return their second operand when either is
// NaN).
inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(kExpMax), _mm512_max_ps(_mm512_set1_ps(kExpMin), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpTaylor7);
  for (const float c : kExpTaylor) {
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  }
  return _mm512_scalef_ps(p, n);
}

// gate = gate / (1 + exp(-gate)) * up, 16 at a time (SwiGluPortable's operations with Exp16).
void SwiGluAvx512(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// Lane i of the result: the sum of v[i]'s 16 lanes, for 16 vectors at once (pairs, then
// quadruples within each 128-bit quarter, then the quarters).
inline __m512 ReduceAdd16(const __m512* v) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // quads[i]'s quarter j: vectors 4i..4i+3 summed over quarter j of their lanes.
  const __m512 h0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 h1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(h0, h1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(h0, h1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 values per vcvtps2ph, rounded to nearest even (as common::FloatToF16); the tail masked.
void FloatToHalfAvx512(const float* x, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m,
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// The F16 values of the KV cache at p (lanes outside m: zero) as floats.
inline __m512 LoadHalves(__mmask16 m, const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// Positions per pass of AttentionHeadAvx512Chunks: the pass's scores and weights (1 KiB) stay in
// L1.
constexpr int kAttentionPass = 256;

// AttentionHeadPortable (kernels_body.inc, the reference) a pass of up to kAttentionPass
// positions at a time: all of the pass's
// scores first (dot products in 16 lanes, reduced 16 positions together by ReduceAdd16), their
// maximum, their weights by Exp16, then the weighted values into the running output (two
// sums, of even and of odd positions, added at the end) and the denominator (16 lane sums),
// both rescaled by exp(old max - new max) once per pass (exactly 1 when the max holds). kChunks
// = head_dim / 16 rounded up, a constant so that q and the sums stay in registers. The steps
// depend on the head's own inputs only.
template <int kChunks>
void AttentionHeadAvx512Chunks(const AttentionHeadArgs& a) {
  const __mmask16 tail = a.head_dim % 16 == 0
                             ? __mmask16{0xFFFF}
                             : static_cast<__mmask16>((1u << (a.head_dim % 16)) - 1);
  const auto chunk_mask = [tail](int c) { return c + 1 == kChunks ? tail : __mmask16{0xFFFF}; };
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 q[kChunks], even[kChunks], odd[kChunks];
#pragma GCC unroll 16
  for (int c = 0; c < kChunks; ++c) {
    q[c] = _mm512_maskz_loadu_ps(chunk_mask(c), a.q + 16 * c);
    even[c] = odd[c] = _mm512_setzero_ps();
  }
  __m512 m = neg_inf, l = _mm512_setzero_ps();  // m: the max so far in every lane
  alignas(64) float weights[kAttentionPass];
  const uint16_t* values[kAttentionPass];
  KvWalk kv{a};
  for (int32_t p0 = 0; p0 <= a.last_pos; p0 += kAttentionPass) {
    const int count = a.last_pos + 1 - p0 < kAttentionPass ? a.last_pos + 1 - p0 : kAttentionPass;
    __m512 pass_max = neg_inf;
    for (int b = 0; b < count; b += 16) {
      __m512 dots[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        dots[i] = _mm512_setzero_ps();
        if (b + i >= count) continue;
        const uint16_t* k = kv.Next(&values[b + i]);
#pragma GCC unroll 16
        for (int c = 0; c < kChunks; ++c) {
          dots[i] = _mm512_fmadd_ps(q[c], LoadHalves(chunk_mask(c), k + 16 * c), dots[i]);
        }
      }
      const __mmask16 valid =
          count - b >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (count - b)) - 1);
      const __m512 s =
          _mm512_mask_mul_ps(neg_inf, valid, ReduceAdd16(dots), _mm512_set1_ps(a.scale));
      _mm512_store_ps(weights + b, s);
      pass_max = _mm512_max_ps(pass_max, s);
    }
    const __m512 new_m = _mm512_max_ps(m, _mm512_set1_ps(_mm512_reduce_max_ps(pass_max)));
    const __m512 correction = Exp16(_mm512_sub_ps(m, new_m));
    m = new_m;
    l = _mm512_mul_ps(l, correction);
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) {
      even[c] = _mm512_mul_ps(even[c], correction);
      odd[c] = _mm512_mul_ps(odd[c], correction);
    }
    for (int b = 0; b < count; b += 16) {
      const __mmask16 valid =
          count - b >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (count - b)) - 1);
      const __m512 w =
          _mm512_maskz_mov_ps(valid, Exp16(_mm512_sub_ps(_mm512_load_ps(weights + b), m)));
      _mm512_store_ps(weights + b, w);
      l = _mm512_add_ps(l, w);
    }
    int i = 0;
    for (; i + 2 <= count; i += 2) {
      const __m512 w0 = _mm512_set1_ps(weights[i]), w1 = _mm512_set1_ps(weights[i + 1]);
#pragma GCC unroll 16
      for (int c = 0; c < kChunks; ++c) {
        even[c] = _mm512_fmadd_ps(w0, LoadHalves(chunk_mask(c), values[i] + 16 * c), even[c]);
        odd[c] = _mm512_fmadd_ps(w1, LoadHalves(chunk_mask(c), values[i + 1] + 16 * c), odd[c]);
      }
    }
    if (i < count) {
      const __m512 w0 = _mm512_set1_ps(weights[i]);
#pragma GCC unroll 16
      for (int c = 0; c < kChunks; ++c) {
        even[c] = _mm512_fmadd_ps(w0, LoadHalves(chunk_mask(c), values[i] + 16 * c), even[c]);
      }
    }
  }
  const __m512 inv = _mm512_set1_ps(1.0f / ReduceAdd(l));
#pragma GCC unroll 16
  for (int c = 0; c < kChunks; ++c) {
    _mm512_mask_storeu_ps(a.out + 16 * c, chunk_mask(c),
                          _mm512_mul_ps(_mm512_add_ps(even[c], odd[c]), inv));
  }
}

template <int... kChunks>
void AttentionHeadAvx512Dispatch(const AttentionHeadArgs& a,
                                 std::integer_sequence<int, kChunks...>) {
  using Fn = void (*)(const AttentionHeadArgs&);
  static constexpr Fn kByChunks[] = {&AttentionHeadAvx512Chunks<kChunks + 1>...};
  kByChunks[(a.head_dim + 15) / 16 - 1](a);
}

void AttentionHeadAvx512(const AttentionHeadArgs& a) {
  AttentionHeadAvx512Dispatch(a, std::make_integer_sequence<int, kMaxHeadDim / 16>());
}

constexpr int kRowBlock = 4;
constexpr int kTokenBlock = 6;
#include "worker/backend/cpu/gemm_tiles.inc"

// F32, F16 or BF16 weights x one token's float32 activations, RB rows read in place:
// GemmF32Tile<RB, 1>'s lanes and reduction over the whole row, without the decoded copy (each
// row streams through once), so the bits of GemmPanelTiles over the decoded rows. Reference:
// GemmPanelPortable (kernels_portable.cc). The next panel's bytes (a.prefetch) are asked for a
// cache line per row as this panel's are read, into L2 (prefetcht1) and one panel ahead: the
// hint and distance that decode steps ran fastest with (bench/journal/cpu-kernel-notes.md).
template <common::GgmlType kType, int RB>
void GemvFloat(const FloatGemvArgs& a) {
  __m512 acc[RB];
  for (int r = 0; r < RB; ++r) acc[r] = _mm512_setzero_ps();
  // 16 elements from k (lanes outside m zero) into every row's lanes.
  const auto step = [&](int k, __mmask16 m) {
    const __m512 xv = _mm512_maskz_loadu_ps(m, a.x + k);
    for (int r = 0; r < RB; ++r) {
      const __m512 wv = LoadWeights<kType>(a.w + static_cast<size_t>(r) * a.w_stride, k, m);
      acc[r] = _mm512_fmadd_ps(wv, xv, acc[r]);
    }
  };
  constexpr int kElemBytes = kType == common::GgmlType::F32 ? 4 : 2;
  constexpr int kLineElems = 64 / kElemBytes;  // a cache line
  int k = 0;
  for (; k + kLineElems <= a.k; k += kLineElems) {
    if (a.prefetch != nullptr) {
      for (int r = 0; r < RB; ++r) {
        _mm_prefetch(
            reinterpret_cast<const char*>(a.prefetch + static_cast<size_t>(r) * a.w_stride +
                                          static_cast<size_t>(k) * kElemBytes),
            _MM_HINT_T1);
      }
    }
    for (int s = 0; s < kLineElems; s += 16) step(k + s, 0xFFFF);
  }
  for (; k + 16 <= a.k; k += 16) step(k, 0xFFFF);
  if (k < a.k) step(k, static_cast<__mmask16>((1u << (a.k - k)) - 1));
  for (int r = 0; r < RB; ++r) a.out[r] = ReduceAdd(acc[r]);
}

using GemvFn = void (*)(const FloatGemvArgs&);
template <common::GgmlType kType, int... R>
constexpr std::array<GemvFn, kMaxGemvRows> GemvFloatByRows(std::integer_sequence<int, R...>) {
  return {&GemvFloat<kType, R + 1>...};
}
template <common::GgmlType kType>
constexpr auto kGemvFloat = GemvFloatByRows<kType>(std::make_integer_sequence<int, kMaxGemvRows>{});

void FloatGemvAvx512(const FloatGemvArgs& a) {
  switch (a.type) {
    case common::GgmlType::F32:
      return kGemvFloat<common::GgmlType::F32>[a.rows - 1](a);
    case common::GgmlType::F16:
      return kGemvFloat<common::GgmlType::F16>[a.rows - 1](a);
    case common::GgmlType::BF16:
      return kGemvFloat<common::GgmlType::BF16>[a.rows - 1](a);
    default:
      std::abort();  // RunPanel sends only float weights
  }
}

}  // namespace

const KernelTable kAvx512Kernels = {
    .isa = CpuIsa::kAvx512,
    .dequantize_row = DequantizeRowAvx512,
    .gemm_panel = GemmPanelTiles,
    .quant_gemm_panel = QuantGemmPanelPortable,
    .quantize_activations = QuantizeActivationsAvx512,
    .attention_head = AttentionHeadAvx512,
    .rms_norm_row = RmsNormRowPortable,
    .swiglu = SwiGluAvx512,
    .add = AddPortable,
    .float_to_half = FloatToHalfAvx512,
    .float_gemv = FloatGemvAvx512,
};

}  // namespace pagoda::worker::cpu
