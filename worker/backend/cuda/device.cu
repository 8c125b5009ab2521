#include <cuda_runtime.h>

#include <atomic>
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

int CurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return -1;
  return device;
}

int MultiprocessorCount() {
  static std::atomic<int> counts[kMaxDevices] = {};
  const int device = CurrentDevice();
  if (device < 0) return 1;
  if (counts[device].load(std::memory_order_relaxed) == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    counts[device].store(n > 0 ? n : 1, std::memory_order_relaxed);
  }
  return counts[device].load(std::memory_order_relaxed);
}

bool WgmmaAvailable() {
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not read yet, 1: no, 2: yes
  const int device = CurrentDevice();
  if (device < 0) return false;
  if (known[device].load(std::memory_order_relaxed) == 0) {
    int major = 0, minor = 0;
    const bool read =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    known[device].store(read && major == 9 && minor == 0 ? 2 : 1, std::memory_order_relaxed);
  }
  return known[device].load(std::memory_order_relaxed) == 2;
}

namespace {
std::atomic<bool> programmatic_launch{true};
}  // namespace

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on, std::memory_order_relaxed); }

bool ProgrammaticLaunch() { return programmatic_launch.load(std::memory_order_relaxed); }

}  // namespace pagoda::worker::cuda
