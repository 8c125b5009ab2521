#include "worker/backend/cuda/device_buffer.h"

#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("CUDA error in %s: %s (%s)", what, cudaGetErrorString(err),
                      cudaGetErrorName(err)));
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, const char* what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.data_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    b.data_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB of GPU memory for %s: %s", bytes / 1048576.0, what,
        cudaGetErrorString(err)));
  }
  b.bytes_ = bytes;
  return b;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, const char* what) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMallocHost(&b.data_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    b.data_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB of pinned host memory for %s: %s", bytes / 1048576.0, what,
        cudaGetErrorString(err)));
  }
  b.bytes_ = bytes;
  return b;
}

}  // namespace pagoda::worker::cuda
