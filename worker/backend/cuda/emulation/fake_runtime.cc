// The part of the CUDA runtime API that the kernel tests call, over host memory, for test
// binaries that run the kernels under the emulator (cuda_emulation.h) instead of linking cudart.
// "Device" memory is ordinary 256-byte-aligned host memory, every call is synchronous, and the
// one emulated device reports itself as such. A call outside this subset fails to link, which
// is the intended signal that a test needs the real runtime.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "worker/backend/cuda/emulation/cuda_emulation.h"

namespace emulation = ::pagoda::worker::cuda::emulation;

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "CUDA host emulation", sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = size_t{16} << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                      cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t CUDARTAPI cudaDeviceSynchronize() { return emulation::PeekLastError(); }

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return emulation::PeekLastError(); }

cudaError_t CUDARTAPI cudaGetLastError() { return emulation::TakeLastError(); }

cudaError_t CUDARTAPI cudaPeekAtLastError() { return emulation::PeekLastError(); }

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (emulation: see the message on stderr)";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    default:
      return "CUDA error (emulation)";
  }
}

}  // extern "C"
