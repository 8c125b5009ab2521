#include <cuda_runtime.h>

#include <cstdio>

#include "worker/backend/cuda/device.h"

namespace pagoda::worker::cuda {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string DeviceDescription(int index) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %zu GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem >> 30);
  return buf;
}

}  // namespace pagoda::worker::cuda
