#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/gpu/copy_bandwidth.h"

namespace pagoda::bench {
namespace {

__global__ void FillRandom(uint32_t* data, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    data[i] = x;
  }
}

double Measure() {
  constexpr size_t kBytes = size_t{2} << 30;
  void *src = nullptr, *dst = nullptr;
  PAGODA_BENCH_CUDA(cudaMalloc(&src, kBytes));
  PAGODA_BENCH_CUDA(cudaMalloc(&dst, kBytes));
  FillRandom<<<1024, 256>>>(static_cast<uint32_t*>(src), kBytes / 4, 12345);
  PAGODA_BENCH_CUDA(cudaGetLastError());
  cudaEvent_t start, stop;
  PAGODA_BENCH_CUDA(cudaEventCreate(&start));
  PAGODA_BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i)
    PAGODA_BENCH_CUDA(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice));
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    PAGODA_BENCH_CUDA(cudaEventRecord(start));
    PAGODA_BENCH_CUDA(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice));
    PAGODA_BENCH_CUDA(cudaEventRecord(stop));
    PAGODA_BENCH_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    PAGODA_BENCH_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * kBytes / (ms[ms.size() / 2] * 1e-3);
}

}  // namespace

double CopyBandwidth() {
  static const double bandwidth = Measure();
  return bandwidth;
}

void CheckCuda(int err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what,
               cudaGetErrorString(static_cast<cudaError_t>(err)));
  std::abort();
}

}  // namespace pagoda::bench
