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
//
// FP8 rows (kFp8, --dtype fp8) have no blocks: a unit is 32 E4M3 bytes, decoded exactly (every
// E4M3 value is a float16 one); their per-row scale is the caller's to apply.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "worker/backend/cuda/weight_format.h"

namespace pagoda::worker::cuda {

__device__ __forceinline__ float HalfToFloat(uint32_t bits) {
  __half_raw raw;
  raw.x = static_cast<unsigned short>(bits);
  return __half2float(__half(raw));
}
__device__ __forceinline__ float LoadHalf(const uint8_t* p) {
  return HalfToFloat(*reinterpret_cast<const uint16_t*>(p));
}

// The decoders' loads: a unit's bytes in as few loads as the block's alignment allows (they were
// read one byte at a time). Q4_K and Q5_K blocks (144 and 176 bytes) start at
// multiples of 16 of rows whose first byte is 16-byte aligned (DecodeAlignment; the launchers
// check it), so they are read 16 bytes at a time. Q8_0, Q4_0 and Q6_K blocks (34, 18 and 210
// bytes) are only 2-byte aligned: read 4 bytes at a time and joined across the misalignment.
__host__ __device__ constexpr int DecodeAlignment(WeightFormat f) {
  return f == WeightFormat::kQ4_K || f == WeightFormat::kQ5_K ? 16 : 2;
}

// The 4 kWords bytes at p (16-byte aligned) as little-endian words.
template <int kWords>
__device__ __forceinline__ void LoadWords16(const uint8_t* p, uint32_t (&w)[kWords]) {
  static_assert(kWords % 4 == 0, "whole 16-byte loads");
#pragma unroll
  for (int i = 0; i < kWords / 4; ++i) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
    w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
  }
}

// The same for p 2-byte aligned: the 4-byte words around it, the last one as 2 bytes when p is
// not 4-byte aligned, so that nothing outside [p - 2, p + 4 kWords) is read (the bytes before p
// are the block's own scale, or the end of an earlier block of the same allocation).
template <int kWords>
__device__ __forceinline__ void LoadWords2(const uint8_t* p, uint32_t (&w)[kWords]) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uint32_t* base = reinterpret_cast<const uint32_t*>(at & ~uintptr_t{3});
  const bool odd = (at & 2) != 0;
  uint32_t raw[kWords + 1];
#pragma unroll
  for (int i = 0; i < kWords; ++i) raw[i] = __ldg(base + i);
  raw[kWords] = odd ? __ldg(reinterpret_cast<const uint16_t*>(base + kWords)) : 0u;
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = odd ? (raw[i] >> 16 | raw[i + 1] << 16) : raw[i];
}

// Byte i of little-endian words, as the int8 value it holds minus `offset`.
template <int kWords>
__device__ __forceinline__ int8_t ByteOf(const uint32_t (&w)[kWords], int i, int offset = 0) {
  return static_cast<int8_t>(static_cast<int>((w[i / 4] >> (8 * (i % 4))) & 0xFFu) - offset);
}

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K/Q5_K block,
// given as three little-endian words s: bytes j and j + 4 for j < 4, else bytes j + 4, j - 4 and
// j (byte j & 3 of each word).
__device__ __forceinline__ void KScaleMin(int j, const uint32_t* s, int* sc, int* m) {
  const int shift = 8 * (j & 3);
  const int b0 = static_cast<int>((s[0] >> shift) & 0xFFu);
  const int b1 = static_cast<int>((s[1] >> shift) & 0xFFu);
  const int b2 = static_cast<int>((s[2] >> shift) & 0xFFu);
  if (j < 4) {
    *sc = b0 & 63;
    *m = b1 & 63;
  } else {
    *sc = (b2 & 0x0F) | ((b0 >> 6) << 4);
    *m = (b2 >> 4) | ((b1 >> 6) << 4);
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
    uint32_t q[8];
    LoadWords2(b + 2, q);
#pragma unroll
    for (int i = 0; i < 32; ++i) out.q[i] = ByteOf(q, i);
  } else if constexpr (F == WeightFormat::kQ4_0) {
    const uint8_t* b = row + 18 * u;
    out.lo = out.hi = LoadHalf(b);
    out.min = 0.0f;
    uint32_t q[4];
    LoadWords2(b + 2, q);
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) lo[i] = q[i] & 0x0F0F0F0Fu, hi[i] = (q[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      out.q[j] = ByteOf(lo, j, 8);
      out.q[j + 16] = ByteOf(hi, j, 8);
    }
  } else if constexpr (F == WeightFormat::kQ4_K || F == WeightFormat::kQ5_K) {
    constexpr bool kFive = F == WeightFormat::kQ5_K;
    const int j = u & 7;
    const uint8_t* b = row + (kFive ? 176 : 144) * (u >> 3);
    uint32_t head[4];  // d, dmin; the 12 scale bytes
    LoadWords16(b, head);
    int sc, m;
    KScaleMin(j, head + 1, &sc, &m);
    out.lo = out.hi = HalfToFloat(head[0] & 0xFFFFu) * static_cast<float>(sc);
    out.min = HalfToFloat(head[0] >> 16) * static_cast<float>(m);
    uint32_t q[8];
    LoadWords16(b + (kFive ? 48 : 16) + 32 * (j >> 1), q);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = (q[i] >> shift) & 0x0F0F0F0Fu;
    if constexpr (kFive) {
      uint32_t qh[8];  // bit j of byte l is the fifth bit of value l
      LoadWords16(b + 16, qh);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[i] |= ((qh[i] >> j) & 0x01010101u) << 4;
    }
#pragma unroll
    for (int l = 0; l < 32; ++l) out.q[l] = ByteOf(q, l);
  } else {
    static_assert(F == WeightFormat::kQ6_K, "no decoder for this format");
    const int within = u & 7, half = within >> 2, qd = within & 3;
    const uint8_t* b = row + 210 * (u >> 3);
    uint32_t ql[8], qh[8];
    LoadWords2(b + 64 * half + 32 * (qd & 1), ql);
    LoadWords2(b + 128 + 32 * half, qh);
    const uint32_t scales = *reinterpret_cast<const uint16_t*>(b + 192 + 8 * half + 2 * qd);
    const float d = LoadHalf(b + 208);
    out.lo = d * static_cast<float>(static_cast<int8_t>(scales & 0xFFu));
    out.hi = d * static_cast<float>(static_cast<int8_t>(scales >> 8));
    out.min = 0.0f;
    const int lo_shift = (qd >> 1) * 4, hi_shift = 2 * qd;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ql[i] = ((ql[i] >> lo_shift) & 0x0F0F0F0Fu) | ((qh[i] >> hi_shift) & 0x03030303u) << 4;
    }
#pragma unroll
    for (int l = 0; l < 32; ++l) out.q[l] = ByteOf(ql, l, 32);
  }
}

// An int8 value as float, exactly, without a conversion instruction (on sm_90 those run at an
// eighth of the rate of float adds): 2^23 + 128 + q holds q + 128 in its low mantissa bits.
__device__ __forceinline__ float Int8ToFloat(int8_t q) {
  return __uint_as_float(0x4B000000u | (static_cast<uint32_t>(static_cast<uint8_t>(q)) ^ 0x80u)) -
         8388736.0f;
}

// Two E4M3 bytes (the low one first) -> floats, exactly (cuda_fp8.h's conversion: one
// instruction per pair on compute capability 8.9 and later).
__device__ __forceinline__ float2 Fp8PairToFloat2(uint32_t pair) {
  return __half22float2(
      __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
}

// Sixteen E4M3 bytes -> floats in address order.
__device__ __forceinline__ void DecodeFp8x16(const uint4& raw, float (&f)[16]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 v = Fp8PairToFloat2(words[q] >> (16 * h));
      f[4 * q + 2 * h] = v.x, f[4 * q + 2 * h + 1] = v.y;
    }
  }
}

// Unit `u` as float32: scale(l) * q[l] - min, llama.cpp's values in its operation order (a
// min of 0 subtracts nothing, exactly); for kFp8 the 32 E4M3 values (16-byte aligned rows).
template <WeightFormat F>
__device__ __forceinline__ void DecodeUnit(const uint8_t* row, int u, float (&y)[kQuantUnit]) {
  if constexpr (F == WeightFormat::kFp8) {
    const uint4* at = reinterpret_cast<const uint4*>(row + kQuantUnit * u);
    float half[16];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      DecodeFp8x16(__ldg(at + i), half);
#pragma unroll
      for (int l = 0; l < 16; ++l) y[16 * i + l] = half[l];
    }
  } else {
    IntUnit unit;
    DecodeUnitInt<F>(row, u, unit);
#pragma unroll
    for (int l = 0; l < kQuantUnit; ++l) {
      y[l] = (l < 16 ? unit.lo : unit.hi) * Int8ToFloat(unit.q[l]) - unit.min;
    }
  }
}

// Calls f(std::integral_constant-like tag) with the format as a template argument: the one
// place a WeightFormat becomes one, for the block formats (callers refuse kDense and kFp8 first:
// IsBlockFormat). DispatchTensorFormat adds kFp8, for the tensor-core products.
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
template <typename Fn>
auto DispatchTensorFormat(WeightFormat f, Fn&& fn) {
  if (f == WeightFormat::kFp8) return fn(FormatTag<WeightFormat::kFp8>{});
  return DispatchFormat(f, fn);
}

}  // namespace pagoda::worker::cuda
