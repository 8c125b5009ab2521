// Device-side helpers for the two element types: conversions (single and packed) and the single
// dtype dispatch every launcher uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half(v);
}

// Element bits <-> elements, and packed words: a 32-bit word holds two elements, the
// lower-addressed one in the low 16 bits (little endian), so a uint32_t / uint4 loaded from
// memory unpacks to elements in address order.
template <typename T>
__device__ __forceinline__ T FromBits(uint16_t bits);
template <>
__device__ __forceinline__ __nv_bfloat16 FromBits<__nv_bfloat16>(uint16_t bits) {
  return __ushort_as_bfloat16(bits);
}
template <>
__device__ __forceinline__ __half FromBits<__half>(uint16_t bits) {
  return __ushort_as_half(bits);
}

__device__ __forceinline__ uint16_t ToBits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint16_t ToBits(__half v) { return __half_as_ushort(v); }

// Two elements packed in one 32-bit word -> floats (x = lower address).
template <typename T>
__device__ __forceinline__ float2 UnpackPair(uint32_t w) {
  return make_float2(ToFloat(FromBits<T>(static_cast<uint16_t>(w & 0xffffu))),
                     ToFloat(FromBits<T>(static_cast<uint16_t>(w >> 16))));
}

// Two floats -> two elements packed in one 32-bit word (x in the low half), rounded to nearest
// even by one packed conversion (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32).
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float x, float y) {
  uint32_t word;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    memcpy(&word, &v, sizeof(word));
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    memcpy(&word, &v, sizeof(word));
  }
  return word;
}

// Eight elements (16 bytes) -> floats in address order.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&f)[8]) {
  const float2 a = UnpackPair<T>(raw.x), b = UnpackPair<T>(raw.y);
  const float2 c = UnpackPair<T>(raw.z), d = UnpackPair<T>(raw.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

// Calls f(T{}) with T the CUDA type of `dtype`: the one place a DType becomes a template
// argument.
template <typename F>
auto DispatchDType(DType dtype, F&& f) {
  if (dtype == DType::kBf16) return std::forward<F>(f)(__nv_bfloat16{});
  return std::forward<F>(f)(__half{});
}

}  // namespace pagoda::worker::cuda
