#include "worker/backend/cuda/device_buffer.h"

#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("CUDA error in %s: %s (%s)", what,
                                             cudaGetErrorString(err), cudaGetErrorName(err)));
}

template <MemoryKind kKind>
absl::StatusOr<CudaBuffer<kKind>> CudaBuffer<kKind>::Allocate(size_t bytes, const char* what) {
  constexpr bool kDevice = kKind == MemoryKind::kDevice;
  CudaBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = kDevice ? cudaMalloc(&b.data_, bytes) : cudaMallocHost(&b.data_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    b.data_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB of %s for %s: %s", bytes / 1048576.0,
        kDevice ? "GPU memory" : "pinned host memory", what, cudaGetErrorString(err)));
  }
  b.bytes_ = bytes;
  return b;
}

template <MemoryKind kKind>
CudaBuffer<kKind>::~CudaBuffer() {
  if (data_ == nullptr) return;
  if constexpr (kKind == MemoryKind::kDevice) {
    cudaFree(data_);
  } else {
    cudaFreeHost(data_);
  }
}

template class CudaBuffer<MemoryKind::kDevice>;
template class CudaBuffer<MemoryKind::kPinnedHost>;

}  // namespace pagoda::worker::cuda
