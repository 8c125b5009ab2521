// Helpers shared by the CUDA kernel tests (tests/gpu, also built for the host emulator): a
// cudaMalloc'd buffer that frees itself and dtype <-> float conversion of 16-bit values. Launchers'
// statuses are checked with ASSERT_OK (tests/support/status_assertions.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/fp16.h"
#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

constexpr uint16_t kPoison = 0xffff;  // NaN in bf16 and in fp16

// Value-parameterized tests over the dtypes: parameters print as bf16 / fp16 (found by argument
// lookup), and instances are named Bf16 / Fp16.
inline void PrintTo(DType d, std::ostream* os) { *os << DTypeName(d); }
inline std::string DTypeTestName(DType d) { return d == DType::kBf16 ? "Bf16" : "Fp16"; }

inline uint16_t ToBits(float f, DType d) {
  return d == DType::kBf16 ? common::FloatToBf16(f) : common::FloatToF16(f);
}
inline float FromBits(uint16_t b, DType d) {
  return d == DType::kBf16 ? common::Bf16ToFloat(b) : common::F16ToFloat(b);
}

// Owns one cudaMalloc'd buffer (at least 16 bytes, so empty inputs still have an address).
class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) : bytes_(bytes) {
    status_ = cudaMalloc(&ptr_, std::max<size_t>(bytes, 16));
  }
  ~DeviceArray() {
    if (status_ == cudaSuccess) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  cudaError_t status() const { return status_; }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  cudaError_t Upload(const std::vector<T>& v) {
    return cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  // The first v.size() elements, back to the host (after the work on the stream finished).
  template <typename T>
  cudaError_t Download(std::vector<T>& v) const {
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) return err;
    return cudaMemcpy(v.data(), ptr_, v.size() * sizeof(T), cudaMemcpyDeviceToHost);
  }
  cudaError_t Poison() { return cudaMemset(ptr_, 0xff, bytes_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
  cudaError_t status_;
};

}  // namespace pagoda::worker::cuda
