// Device decoders of the GGUF block formats (weight_format.h): DecodeUnit<F> turns unit `u` of a
// row (elements [32u, 32u + 32)) into float32.
//
// The formulas and their float operation order are llama.cpp's dequantize_row_* (the CPU twin:
// worker/model/dequantize_blocks.inc), so values agree to float32 rounding (nvcc may contract a
// multiply and a subtract into one FMA, a last-bit difference). Layouts (bytes per block):
//   Q8_0 (34): half d; int8 q[32]. y = q d.
//   Q4_0 (18): half d; uint8 qs[16]. y[j] = (lo4 - 8) d, y[j + 16] = (hi4 - 8) d.
//   Q4_K (144): half d, dmin; scales[12]; qs[128]. Sub-block j of 32: (d sc_j) q - dmin m_j.
//   Q5_K (176): half d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K; bit j of qh[l] is the fifth.
//   Q6_K (210): ql[128]; qh[64]; int8 scales[16]; half d. Sub-blocks of 16: (d sc) (q - 32).
// Every half sits at an even offset of a block of even size, so it loads as one 16-bit word.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "worker/backend/cuda/weight_format.h"

namespace pagoda::worker::cuda {

__device__ __forceinline__ float LoadHalf(const uint8_t* p) {
  __half_raw raw;
  raw.x = *reinterpret_cast<const uint16_t*>(p);
  return __half2float(__half(raw));
}

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K/Q5_K block.
__device__ __forceinline__ void KScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The integer form of unit `u` for products with 8-bit activations: y[l] = scale(l) * q[l] - min,
// scale(l) = lo for l < 16 and hi beyond (they differ only for Q6_K's sub-blocks of 16), q in
// [-128, 127]: Q8_0 q; Q4_0 q - 8; Q4_K and Q5_K the 4- and 5-bit values with min = dmin m;
// Q6_K q - 32. DecodeUnit below multiplies it out.
struct IntUnit {
  int8_t q[kQuantUnit];
  float lo, hi, min;
};
template <WeightFormat F>
__device__ __forceinline__ void DecodeUnitInt(const uint8_t* row, int u, IntUnit& out) {
  if constexpr (F == WeightFormat::kQ8_0) {
    const uint8_t* b = row + 34 * u;
    out.lo = out.hi = LoadHalf(b);
    out.min = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) out.q[i] = static_cast<int8_t>(b[2 + i]);
  } else if constexpr (F == WeightFormat::kQ4_0) {
    const uint8_t* b = row + 18 * u;
    out.lo = out.hi = LoadHalf(b);
    out.min = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      out.q[j] = static_cast<int8_t>((b[2 + j] & 0x0F) - 8);
      out.q[j + 16] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
    }
  } else if constexpr (F == WeightFormat::kQ4_K || F == WeightFormat::kQ5_K) {
    constexpr bool kFive = F == WeightFormat::kQ5_K;
    const int j = u & 7;
    const uint8_t* b = row + (kFive ? 176 : 144) * (u >> 3);
    int sc, m;
    KScaleMin(j, b + 4, &sc, &m);
    out.lo = out.hi = LoadHalf(b) * static_cast<float>(sc);
    out.min = LoadHalf(b + 2) * static_cast<float>(m);
    const uint8_t* q = b + (kFive ? 48 : 16) + 32 * (j >> 1);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0x0F;
      if constexpr (kFive) v += ((b[16 + l] >> j) & 1) << 4;
      out.q[l] = static_cast<int8_t>(v);
    }
  } else {
    static_assert(F == WeightFormat::kQ6_K, "no decoder for this format");
    const int within = u & 7, half = within >> 2, qd = within & 3;
    const uint8_t* b = row + 210 * (u >> 3);
    const uint8_t* ql = b + 64 * half + 32 * (qd & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * half) + 2 * qd;
    const float d = LoadHalf(b + 208);
    out.lo = d * static_cast<float>(scales[0]);
    out.hi = d * static_cast<float>(scales[1]);
    out.min = 0.0f;
    const int lo_shift = (qd >> 1) * 4, hi_shift = 2 * qd;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      out.q[l] = static_cast<int8_t>(
          (((ql[l] >> lo_shift) & 0x0F) | (((qh[l] >> hi_shift) & 3) << 4)) - 32);
    }
  }
}

// Unit `u` as float32: scale(l) * q[l] - min, llama.cpp's values in its operation order (a
// min of 0 subtracts nothing, exactly).
template <WeightFormat F>
__device__ __forceinline__ void DecodeUnit(const uint8_t* row, int u, float (&y)[kQuantUnit]) {
  IntUnit unit;
  DecodeUnitInt<F>(row, u, unit);
#pragma unroll
  for (int l = 0; l < kQuantUnit; ++l) {
    y[l] = (l < 16 ? unit.lo : unit.hi) * static_cast<float>(unit.q[l]) - unit.min;
  }
}

// Calls f(std::integral_constant-like tag) with the format as a template argument: the one
// place a WeightFormat becomes one. kDense and kFp8 have no decoder
// here: callers refuse them first (IsBlockFormat).
template <WeightFormat F>
struct FormatTag {
  static constexpr WeightFormat kFormat = F;
};
template <typename Fn>
auto DispatchFormat(WeightFormat f, Fn&& fn) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return fn(FormatTag<WeightFormat::kQ8_0>{});
    case WeightFormat::kQ4_0:
      return fn(FormatTag<WeightFormat::kQ4_0>{});
    case WeightFormat::kQ4_K:
      return fn(FormatTag<WeightFormat::kQ4_K>{});
    case WeightFormat::kQ5_K:
      return fn(FormatTag<WeightFormat::kQ5_K>{});
    default:
      return fn(FormatTag<WeightFormat::kQ6_K>{});
  }
}

}  // namespace pagoda::worker::cuda
