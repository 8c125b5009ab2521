// WeightProducts: the CUDA backend's products of activations with a Projection (weight_format.h),
// whatever its parts' formats. Dense parts go through cuBLAS (gemm.h), or for steps of at most
// dense_gemv_max_tokens tokens through our own GEMV (LaunchDenseGemv; CudaBackend times both to
// set it). Quantized parts, for at
// most gemv_max_tokens tokens, take the fused decode-and-multiply kernel (LaunchQuantGemv); for
// more, the tensor-core kernel that decodes tiles on the fly (LaunchQuantGemm: the decoded
// weights are rounded to the dtype there, where the fused product keeps them FP32, so logits
// differ in their last bits between the two sides of gemv_max_tokens), or, for steps of at
// least cublas_min_tokens, are decoded a slice of rows at a time into a dtype scratch buffer
// that cuBLAS then multiplies (CudaBackend times which is faster from which size).
//
// FP8 parts go through Fp8Gemm (cuBLASLt), or for at most fp8_gemv_max_tokens tokens through
// our own GEMV (LaunchFp8Gemv: one kernel, activations in the dtype, where Fp8Gemm quantizes
// them to FP8 per token), so logits differ between the two sides of it too; past the GEMV, for
// steps below fp8_cublaslt_min_tokens, through the tensor-core product of the kept blocks
// (LaunchQuantGemm, also one kernel with activations in the dtype).
//
// Contract: out[t][o] = sum_i W[o][i] * x[t][i] (+ out[t][o] when accumulating), W the
// projection's parts stacked along o. Enqueued on the stream given at Create(); never
// synchronizes, and allocates nothing after Create once Prepare() has seen each projection with
// FP8 or block parts (CUDA-graph safe). Not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/fp8_gemm.h"
#include "worker/backend/cuda/gemm.h"
#include "worker/backend/cuda/quant/quant_kernels.h"
#include "worker/backend/cuda/weight_format.h"

namespace pagoda::worker::cuda {

// The most bytes the decode scratch takes; bigger parts are decoded and multiplied in slices.
inline constexpr size_t kMaxDecodeScratchBytes = size_t{64} << 20;

class WeightProducts {
 public:
  struct Options {
    int gemv_max_tokens = 8;  // in [0, kQuantGemvMaxTokens]
    // Dense parts for at most this many tokens take LaunchDenseGemv instead of cuBLAS (0: never;
    // at most kQuantGemvMaxTokens), where their rows allow it (16-byte aligned, columns a
    // multiple of 8).
    int dense_gemv_max_tokens = 0;
    // The fused product with activations quantized to 8-bit blocks (LaunchQuantGemvInt8), not
    // in the dtype; gemv_int8_max_cols: the widest block part's columns (sizes the buffers).
    bool gemv_int8 = false;
    int gemv_int8_max_cols = 0;
    // Quantized parts past gemv_max_tokens, for steps of at least this many tokens: decoded a
    // slice of rows at a time into the scratch and multiplied by cuBLAS (0: never; 1: always).
    int cublas_min_tokens = 0;
    // LaunchQuantGemm's kernel for the tensor-core product (kAuto: wgmma where the GPU has it).
    QuantGemmKernel gemm_kernel = QuantGemmKernel::kAuto;
    // Room for the decoded slices (0: no scratch, and cublas_min_tokens must stay 0); a
    // quantized part's row must fit.
    size_t scratch_bytes = 0;
    // The widest FP8 part's columns and rows (0: no FP8 parts, no cuBLASLt).
    int fp8_max_n_in = 0;
    int fp8_max_n_out = 0;
    // FP8 parts for at most this many tokens take LaunchFp8Gemv (0: never; at most
    // kQuantGemvMaxTokens).
    int fp8_gemv_max_tokens = 8;
    // FP8 parts past fp8_gemv_max_tokens, for steps of at least this many tokens: cuBLASLt
    // (Fp8Gemm); below, LaunchQuantGemm where the part fits it (Fp8TensorCoresFit). 1: cuBLASLt
    // always; 0: never.
    int fp8_cublaslt_min_tokens = 1;
    // RunGlu fuses the gate/up product with silu * up where a GEMV takes the step.
    bool fuse_glu = true;
    // The device's multiprocessors: with num_sms > 0, Create allocates split-K's workspace
    // (QuantGemmSplitWorkspace: room for the splits QuantGemmAutoSplits asks for, at most two
    // blocks an SM), and steps of at most split_k_max_tokens tokens on the tensor-core product
    // (LaunchQuantGemm, blocks and FP8) cut their columns into those splits where the tiles
    // alone leave SMs idle (0: never). forced_k_splits > 0 (tests): that many splits instead,
    // in a workspace sized for them.
    int num_sms = 0;
    int split_k_max_tokens = 0;
    int forced_k_splits = 0;
  };
  static absl::StatusOr<std::unique_ptr<WeightProducts>> Create(cudaStream_t stream, DType dtype,
                                                                const Options& options);

  absl::Status Run(const void* x, const Projection& w, float* out, int num_tokens, bool accumulate);
  // The feed-forward block's gate/up product and activation in one kernel: h[t][j] =
  // dtype(silu(gate_j . x_t) * (up_j . x_t)) for w = [Wgate; Wup] (n_out = 2 F, h [num_tokens][F]
  // in the dtype), where w is one part whose product at this step is one of the GEMVs (their GLU
  // mode, quant_kernels.h). Returns false, having done nothing, where it is not (or fuse_glu is
  // off): the caller then runs Run() and LaunchSiluMul, which give the same values bit for bit.
  absl::StatusOr<bool> RunGlu(const void* x, const Projection& w, void* h, int num_tokens);
  // Changes Options::dense_gemv_max_tokens and fp8_gemv_max_tokens (each 0 to
  // kQuantGemvMaxTokens): CudaBackend times both sides of each at start.
  absl::Status SetGemvTokens(int dense, int fp8);
  // Changes Options::cublas_min_tokens (CudaBackend times both products of kept parts).
  absl::Status SetCublasMinTokens(int tokens);
  // Changes Options::fp8_cublaslt_min_tokens (>= 0; CudaBackend times both sides).
  absl::Status SetFp8CublasltMinTokens(int tokens);
  // Changes Options::split_k_max_tokens (>= 0, and 0 without a workspace; CudaBackend times
  // both sides).
  absl::Status SetSplitKMaxTokens(int tokens);
  // Plans the FP8 parts' cuBLASLt products ahead (Fp8Gemm::Prepare) and sets up the tensor-core
  // kernels of the block parts and of the FP8 parts they take (PrepareQuantGemm), so that a graph
  // capture does neither; nothing for dense parts.
  absl::Status Prepare(const Projection& w);
  size_t workspace_bytes() const {
    return gemm_->workspace_bytes() + scratch_.bytes() + xq_.bytes() + split_buffer_.bytes() +
           (fp8_ ? fp8_->workspace_bytes() : 0);
  }

 private:
  WeightProducts(cudaStream_t stream, DType dtype, const Options& options,
                 std::unique_ptr<Gemm> gemm, std::unique_ptr<Fp8Gemm> fp8, DeviceBuffer scratch)
      : stream_(stream),
        dtype_(dtype),
        options_(options),
        gemm_(std::move(gemm)),
        fp8_(std::move(fp8)),
        scratch_(std::move(scratch)) {}

  // Which kernel multiplies a part at a step of num_tokens tokens.
  enum class Path {
    kDenseGemv,       // LaunchDenseGemv
    kCublas,          // Gemm (cuBLAS)
    kFp8Gemv,         // LaunchFp8Gemv
    kFp8Gemm,         // Fp8Gemm (cuBLASLt)
    kFp8TensorCores,  // LaunchQuantGemm
    kQuantGemvInt8,   // LaunchQuantizeQ8Blocks, then LaunchQuantGemvInt8
    kQuantGemv,       // LaunchQuantGemv
    kQuantGemm,       // LaunchQuantGemm (tensor cores)
    kDecodeCublas,    // slices decoded into the scratch, then cuBLAS
  };
  Path PathOf(const DeviceMatrix& part, int num_tokens) const;
  // x as 8-bit blocks for LaunchQuantGemvInt8: the values at the start of xq_, their (d, s)
  // pairs at XqScales().
  absl::Status QuantizeX(const void* x, int num_tokens, int cols);
  float2* XqScales() {
    return reinterpret_cast<float2*>(xq_.get<int8_t>() +
                                     size_t{kQuantGemvMaxTokens} *
                                         static_cast<size_t>(options_.gemv_int8_max_cols));
  }

  cudaStream_t stream_;
  DType dtype_;
  Options options_;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<Fp8Gemm> fp8_;  // null without FP8 parts
  DeviceBuffer scratch_;
  DeviceBuffer xq_;  // gemv_int8: [kQuantGemvMaxTokens][max cols] int8, then the (d, s) pairs
  DeviceBuffer split_buffer_;      // split-K: the partials, then the counters
  QuantGemmSplitWorkspace split_;  // in split_buffer_ (empty without num_sms)
};

}  // namespace pagoda::worker::cuda
