// Device-side helpers for the two element types: conversions and the single dtype dispatch
// every launcher uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Calls f(T{}) with T the CUDA type of `dtype`: the one place a DType becomes a template
// argument.
template <typename F>
auto DispatchDType(DType dtype, F&& f) {
  if (dtype == DType::kBf16) return std::forward<F>(f)(__nv_bfloat16{});
  return std::forward<F>(f)(__half{});
}

}  // namespace pagoda::worker::cuda
