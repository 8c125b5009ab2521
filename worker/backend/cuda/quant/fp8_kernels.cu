#include <cuda_fp8.h>

#include <algorithm>

#include "common/status_macros.h"
#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/quant/fp8_kernels.h"
#include "worker/backend/cuda/sampling/counter_uniform.cuh"

namespace pagoda::worker::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float BlockMax(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, partial[w]);
    total = m;
  }
  __syncthreads();
  return total;
}

// One block per row of out (padding rows write zeros).
template <typename T>
__global__ void __launch_bounds__(kThreads) QuantizeFp8Kernel(QuantizeFp8Params p) {
  const int r = static_cast<int>(blockIdx.x);
  uint8_t* out = p.out + static_cast<size_t>(r) * p.cols;
  if (r >= p.rows) {
    for (int i = static_cast<int>(threadIdx.x); i < p.cols; i += kThreads) out[i] = 0;
    return;
  }
  const T* x = static_cast<const T*>(p.x) + static_cast<size_t>(r) * p.cols;
  float amax = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < p.cols; i += kThreads) {
    amax = fmaxf(amax, fabsf(ToFloat(x[i])));
  }
  amax = BlockMax(amax);
  const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  if (threadIdx.x == 0) p.scales[r] = scale;
  for (int i = static_cast<int>(threadIdx.x); i < p.cols; i += kThreads) {
    out[i] = __nv_cvt_float_to_fp8(ToFloat(x[i]) / scale, __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void Fp8EpilogueKernel(Fp8EpilogueParams p) {
  const size_t n = static_cast<size_t>(p.tokens) * p.n_out;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const int t = static_cast<int>(i / p.n_out), o = static_cast<int>(i % p.n_out);
    const float v = p.products[i] * p.row_scales[o] * p.token_scales[t];
    float* dst = p.out + static_cast<size_t>(t) * p.ld_out + o;
    *dst = p.accumulate ? *dst + v : v;
  }
}

__global__ void FillRandomFp8Kernel(uint8_t* data, float* row_scales, int rows, int cols,
                                    float amplitude, uint64_t seed) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint8_t b = static_cast<uint8_t>(CounterMix64(seed ^ (i * 0x9e3779b97f4a7c15ull)));
    if ((b & 0x7F) == 0x7F) b ^= 1;  // S.1111.111 is E4M3's NaN
    data[i] = b;
    if (i < static_cast<size_t>(rows)) row_scales[i] = amplitude / kFp8E4M3Max;
  }
}

unsigned GridFor(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 65536));
}

}  // namespace

absl::Status LaunchQuantizeFp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  ArgCheck check("LaunchQuantizeFp8");
  check.RequirePositive(p.rows, "rows")
      .RequirePositive(p.cols, "cols")
      .Require(p.padded_rows >= p.rows, "padded_rows %d must be at least rows %d", p.padded_rows,
               p.rows)
      .RequirePointer(p.x, "x", 2)
      .RequirePointer(p.out, "out")
      .RequirePointer(p.scales, "scales", 4);
  RETURN_IF_ERROR(check.status());
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto t) {
                                    return LaunchKernel(QuantizeFp8Kernel<decltype(t)>,
                                                        dim3(p.padded_rows), dim3(kThreads), 0,
                                                        stream, p);
                                  }),
                    "LaunchQuantizeFp8");
}

absl::Status LaunchFp8Epilogue(const Fp8EpilogueParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchFp8Epilogue");
  check.RequirePositive(p.tokens, "tokens")
      .RequirePositive(p.n_out, "n_out")
      .Require(p.ld_out >= p.n_out, "ld_out %d must be at least n_out %d", p.ld_out, p.n_out)
      .RequirePointer(p.products, "products", 4)
      .RequirePointer(p.row_scales, "row_scales", 4)
      .RequirePointer(p.token_scales, "token_scales", 4)
      .RequirePointer(p.out, "out", 4);
  RETURN_IF_ERROR(check.status());
  const size_t n = static_cast<size_t>(p.tokens) * p.n_out;
  return CudaStatus(LaunchKernel(Fp8EpilogueKernel, dim3(GridFor(n)), dim3(kThreads), 0, stream, p),
                    "LaunchFp8Epilogue");
}

absl::Status LaunchFillRandomFp8(uint8_t* data, float* row_scales, int rows, int cols,
                                 float amplitude, uint64_t seed, cudaStream_t stream) {
  ArgCheck check("LaunchFillRandomFp8");
  check.RequirePositive(rows, "rows").RequirePositive(cols, "cols");
  RETURN_IF_ERROR(check.status());
  const size_t n = static_cast<size_t>(rows) * cols;
  return CudaStatus(LaunchKernel(FillRandomFp8Kernel, dim3(GridFor(n)), dim3(kThreads), 0, stream,
                                 data, row_scales, rows, cols, amplitude, seed),
                    "LaunchFillRandomFp8");
}

}  // namespace pagoda::worker::cuda
