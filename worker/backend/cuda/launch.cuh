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

// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched by
// LaunchKernelAfterPrior may be scheduled before the kernel ahead of it in the stream is done,
// as soon as that kernel's blocks have all started its successor's launch or exited, so its own
// launch overlaps that kernel's tail: at batch 1 a decode step is hundreds of short kernels, and
// the gap between two of them is a real share of the step. Such a kernel must call
// PriorGridsDone() first, before it reads or writes any memory: it returns once every grid
// before it in the stream has completed and its writes are visible (griddepcontrol.wait), then
// lets the next kernel's launch start (griddepcontrol.launch_dependents), so at most one
// kernel ahead is launched early. The emulator fails a launch whose threads never call it, or
// call it after a barrier, warp collective or cp.async.
__device__ __forceinline__ void PriorGridsDone() {
#ifdef PAGODA_CUDA_EMULATION
  emulation::PriorGridsDone();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// LaunchKernel as a programmatic dependent launch of a kernel that begins with PriorGridsDone()
// (a plain launch while ProgrammaticLaunch() is off). In a stream capture the graph keeps the
// relaxed edge.
template <typename... Params, typename... Args>
cudaError_t LaunchKernelAfterPrior(void (*kernel)(Params...), dim3 grid, dim3 block,
                                   size_t dynamic_shared_bytes, cudaStream_t stream,
                                   const Args&... args) {
#ifdef PAGODA_CUDA_EMULATION
  if (cudaError_t err = emulation::CheckConfiguration(grid, block, dynamic_shared_bytes);
      err != cudaSuccess) {
    return err;
  }
  const bool after_prior = ProgrammaticLaunch();
  const cudaError_t err = emulation::Enqueue(stream, [=] {
    return emulation::Launch(
        grid, block, dynamic_shared_bytes, [&] { kernel(args...); }, after_prior);
  });
  emulation::TakeLastError();
  return err;
#else
  if (!ProgrammaticLaunch()) {
    return LaunchKernel(kernel, grid, block, dynamic_shared_bytes, stream, args...);
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  if (err != cudaSuccess) cudaGetLastError();  // consumed here, as LaunchKernel's is
  return err != cudaSuccess ? err : cudaGetLastError();
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
