// Owned CUDA memory, move-only: device memory (cudaMalloc / cudaFree) and pinned host memory
// (cudaMallocHost / cudaFreeHost), one template for both. An empty buffer holds nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pagoda::worker::cuda {

// InternalError naming `what` and the CUDA error, or OK.
absl::Status CudaStatus(cudaError_t err, const char* what);

enum class MemoryKind { kDevice, kPinnedHost };

template <MemoryKind kKind>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  // ResourceExhausted (naming `what` and the size) when there is no room; 0 bytes: empty.
  static absl::StatusOr<CudaBuffer> Allocate(size_t bytes, const char* what);
  CudaBuffer(CudaBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer();

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<MemoryKind::kDevice>;
using PinnedBuffer = CudaBuffer<MemoryKind::kPinnedHost>;

extern template class CudaBuffer<MemoryKind::kDevice>;
extern template class CudaBuffer<MemoryKind::kPinnedHost>;

}  // namespace pagoda::worker::cuda
