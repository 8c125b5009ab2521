// IEEE half (F16) and bfloat16 (BF16) <-> float32 conversion.
//
// Contract: widening (to float) is exact for every input, including subnormals, infinities and
// NaNs. Narrowing (from float) rounds to nearest, ties to even; values beyond the F16 range
// become infinity, NaNs stay NaNs (quiet). Pure functions, no state, usable from any thread.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace pagoda::common {

inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24, exactly representable in float.
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t FloatToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN; keep NaNs quiet and non-zero.
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity.
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): result is subnormal or zero, in units of 2^-24.
    const uint32_t e = abs >> 23;
    if (e < 102) return sign;  // < 2^-25: rounds to zero.
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // in [14, 24]
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
    return static_cast<uint16_t>(sign | q);  // q == 0x400 encodes the smallest normal: correct.
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // ties to even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

// The F16 value stored at p (two bytes, little-endian, any alignment).
inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return F16ToFloat(h);
}

// out[i] = the i-th of the n F16 values stored from p.
inline void F16RowToFloat(const uint8_t* p, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = LoadF16(p + 2 * i);
}

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace pagoda::common
