// LaunchKernel and PAGODA_DYNAMIC_SHARED: the two places where kernel code differs between nvcc
// and the host emulator (tests/support/cuda_emulation/cuda_emulation.h), so that the same launchers
// and kernels also run in tests on machines without a GPU; and OptInSharedMemory.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>

#include "worker/backend/cuda/device.h"

// Declares the block's dynamic shared memory as `type name[]` (16-byte aligned).
#ifdef PAGODA_CUDA_EMULATION
#define PAGODA_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::pagoda::worker::cuda::emulation::DynamicShared())
#else
#define PAGODA_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

namespace pagoda::worker::cuda {

// kernel<<<grid, block, dynamic_shared_bytes, stream>>>(args...), then the launch's error
// (configuration errors; faults surface at the next synchronization, as with <<<>>>).
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                         size_t dynamic_shared_bytes, cudaStream_t stream, const Args&... args) {
#ifdef PAGODA_CUDA_EMULATION
  // Checked now, as <<<>>> does, not when a captured graph runs the work.
  if (cudaError_t err = emulation::CheckConfiguration(grid, block, dynamic_shared_bytes);
      err != cudaSuccess) {
    return err;
  }
  // The work owns copies of the arguments: a captured graph launches it again later.
  const cudaError_t err = emulation::Enqueue(stream, [=] {
    return emulation::Launch(grid, block, dynamic_shared_bytes, [&] { kernel(args...); });
  });
  emulation::TakeLastError();  // what cudaGetLastError does below
  return err;
#else
  // clang-format reads <<< >>> as shifts and comparisons.
  // clang-format off
  kernel<<<grid, block, dynamic_shared_bytes, stream>>>(args...);
  // clang-format on
  return cudaGetLastError();
#endif
}

// Lets kKernel use `bytes` of dynamic shared memory: above the default 48 KiB a kernel must opt
// in, once per device.
template <auto kKernel>
cudaError_t OptInSharedMemory(size_t bytes) {
  static std::atomic<bool> opted_in[kMaxDevices] = {};
  const int device = CurrentDevice();
  if (device < 0) return cudaErrorInvalidDevice;
  if (!opted_in[device].load(std::memory_order_acquire)) {
    const cudaError_t err =
        cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err != cudaSuccess) return err;
    opted_in[device].store(true, std::memory_order_release);
  }
  return cudaSuccess;
}

}  // namespace pagoda::worker::cuda
