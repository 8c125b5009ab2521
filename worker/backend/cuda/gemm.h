// GEMMs of the CUDA backend through cuBLAS (loaded at run time, cublas_library.h): dtype inputs,
// float32 accumulation and output.
//
// Contract: out[t][o] = sum_i w[o][i] * x[t][i] (+ out[t][o] when accumulating: the residual add
// fused into the projection). Weights are row-major [n_out][n_in] as in the model; out's rows are
// ld_out apart (n_out when 0), so a product may fill a column range of a wider output. Enqueued on
// the stream given at Create(); never synchronizes; uses a fixed workspace so that it can be
// captured in a CUDA graph.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend/cuda/cublas_library.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

struct GemmParams {
  const void* x;  // [num_tokens][n_in] dtype
  const void* w;  // [n_out][n_in] dtype
  float* out;     // [num_tokens][ld_out]
  int num_tokens = 0;
  int n_in = 0;
  int n_out = 0;
  bool accumulate = false;
  int ld_out = 0;  // 0: n_out
};

class Gemm {
 public:
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(cudaStream_t stream, DType dtype);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  absl::Status Run(const GemmParams& p);
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  Gemm(const CublasLibrary* lib, cublasHandle_t handle, DType dtype, DeviceBuffer workspace)
      : lib_(lib), handle_(handle), dtype_(dtype), workspace_(std::move(workspace)) {}

  const CublasLibrary* lib_;  // loaded at run time (cublas_library.h)
  cublasHandle_t handle_;
  DType dtype_;
  DeviceBuffer workspace_;
};

}  // namespace pagoda::worker::cuda
