// Fp8Gemm: products with FP8 E4M3 weights (--dtype fp8) through cuBLASLt's FP8 path. The
// activations are quantized to E4M3 with a scale per token (LaunchQuantizeFp8), cuBLASLt
// multiplies the two FP8 matrices into float32 (TN layout, fp32 accumulation, unit scales), and
// an epilogue applies the weight's per-row and the token's scales and the residual add
// (LaunchFp8Epilogue). Tokens go in slices of at most kFp8SliceTokens, each padded to a multiple
// of 16 with zero rows (cuBLASLt's FP8 kernels want every dimension 16-aligned).
//
// Contract: out[t][o] = sum_i w[o][i] * x[t][i] (+ out[t][o]), as WeightProducts. Weights are
// DeviceMatrix kFp8: [rows][cols] E4M3 bytes and row_scales [rows]; cols and rows multiples of
// 16. Enqueued on the stream given at Create(); never synchronizes. A shape is planned on the
// host (cuBLASLt descriptors and its heuristic's algorithm) by Prepare(), or at its first Run;
// prepared shapes allocate nothing (CUDA-graph safe). Not thread-safe.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "worker/backend/cuda/cublas_library.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/weight_format.h"

namespace pagoda::worker::cuda {

inline constexpr int kFp8SliceTokens = 256;

class Fp8Gemm {
 public:
  // max_n_in, max_n_out: the widest FP8 part's columns and rows.
  static absl::StatusOr<std::unique_ptr<Fp8Gemm>> Create(cudaStream_t stream, DType dtype,
                                                         int max_n_in, int max_n_out);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  absl::Status Run(const void* x, const DeviceMatrix& w, float* out, int ld_out, int num_tokens,
                   bool accumulate);
  // Plans `w`'s products for every padded slice size (16 .. kFp8SliceTokens): a shape cuBLASLt
  // cannot run fails here, not in a request or a graph capture.
  absl::Status Prepare(const DeviceMatrix& w);
  size_t workspace_bytes() const {
    return workspace_.bytes() + x8_.bytes() + x_scales_.bytes() + products_.bytes();
  }

 private:
  // The cuBLASLt descriptors and algorithm of one (n_out, padded tokens, n_in).
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Fp8Gemm(const CublasLtLibrary* lib, cudaStream_t stream, DType dtype, int max_n_in, int max_n_out)
      : lib_(lib), stream_(stream), dtype_(dtype), max_n_in_(max_n_in), max_n_out_(max_n_out) {}
  absl::StatusOr<const Plan*> PlanFor(int n_out, int tokens, int n_in);
  void Destroy(const Plan& p) const;

  const CublasLtLibrary* lib_;
  cudaStream_t stream_;
  DType dtype_;
  int max_n_in_, max_n_out_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer x8_;        // [kFp8SliceTokens][max_n_in] E4M3
  DeviceBuffer x_scales_;  // [kFp8SliceTokens] float
  DeviceBuffer products_;  // [kFp8SliceTokens][max_n_out] float
  std::map<std::tuple<int, int, int>, Plan> plans_;
};

}  // namespace pagoda::worker::cuda
