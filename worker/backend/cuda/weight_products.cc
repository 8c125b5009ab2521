#include "worker/backend/cuda/weight_products.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/quant/quant_kernels.h"

namespace pagoda::worker::cuda {
namespace {

// Whether LaunchDenseGemv takes this dense part: 16-byte loads of every row.
bool DenseGemvFits(const DeviceMatrix& m) {
  return m.cols % 8 == 0 && reinterpret_cast<uintptr_t>(m.data) % 16 == 0 &&
         m.row_bytes == static_cast<size_t>(m.cols) * 2;
}

// The bounds of a small-batch threshold: OK when `tokens` is within them.
absl::Status CheckGemvTokens(const char* what, int tokens) {
  if (tokens >= 0 && tokens <= kQuantGemvMaxTokens) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("the %s takes 0 to %d tokens, not %d", what, kQuantGemvMaxTokens, tokens));
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightProducts>> WeightProducts::Create(cudaStream_t stream,
                                                                       DType dtype,
                                                                       const Options& options) {
  RETURN_IF_ERROR(CheckGemvTokens("fused quantized product", options.gemv_max_tokens));
  RETURN_IF_ERROR(CheckGemvTokens("FP8 GEMV", options.fp8_gemv_max_tokens));
  RETURN_IF_ERROR(CheckGemvTokens("dense GEMV", options.dense_gemv_max_tokens));
  if (options.fp8_cublaslt_min_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("fp8_cublaslt_min_tokens %d must be >= 0",
                                                      options.fp8_cublaslt_min_tokens));
  }
  if (options.forced_k_splits < 0 || options.forced_k_splits > kMaxKSplits) {
    return absl::InvalidArgumentError(absl::StrFormat("forced_k_splits %d must be in [0, %d]",
                                                      options.forced_k_splits, kMaxKSplits));
  }
  if (options.split_k_max_tokens < 0 || (options.split_k_max_tokens > 0 && options.num_sms <= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "split_k_max_tokens %d needs num_sms (and >= 0)", options.split_k_max_tokens));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Gemm> gemm, Gemm::Create(stream, dtype));
  std::unique_ptr<Fp8Gemm> fp8;
  if (options.fp8_max_n_out > 0) {
    ASSIGN_OR_RETURN(fp8,
                     Fp8Gemm::Create(stream, dtype, options.fp8_max_n_in, options.fp8_max_n_out));
  }
  if (options.cublas_min_tokens < 0 ||
      (options.cublas_min_tokens > 0 && options.scratch_bytes == 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cublas_min_tokens %d needs a decode scratch (and >= 0)", options.cublas_min_tokens));
  }
  ASSIGN_OR_RETURN(DeviceBuffer scratch,
                   DeviceBuffer::Allocate(options.scratch_bytes, "the weight decode scratch"));
  auto products = std::unique_ptr<WeightProducts>(new WeightProducts(
      stream, dtype, options, std::move(gemm), std::move(fp8), std::move(scratch)));
  if (options.num_sms > 0) {
    // Splits apply to launches of fewer tiles than SMs: QuantGemmAutoSplits' make at most two
    // blocks an SM, forced ones forced_k_splits a tile.
    const int sms = options.num_sms;
    const size_t floats = QuantGemmSplitCapacity(sms * std::max(2, options.forced_k_splits));
    ASSIGN_OR_RETURN(products->split_buffer_,
                     DeviceBuffer::Allocate(floats * 4 + size_t(sms) * 4, "split-K partials"));
    products->split_ = {products->split_buffer_.get<float>(), floats,
                        reinterpret_cast<uint32_t*>(products->split_buffer_.get<float>() + floats),
                        sms};
    // Every launch leaves the counters at zero; they start there.
    RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(products->split_.counters, 0, size_t(sms) * 4, stream), "split-K init"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "split-K init"));
  }
  if (options.gemv_int8) {
    const size_t cols = static_cast<size_t>(options.gemv_int8_max_cols);
    ASSIGN_OR_RETURN(products->xq_,
                     DeviceBuffer::Allocate(kQuantGemvMaxTokens * (cols + cols / kQuantUnit * 8),
                                            "8-bit activations"));
  }
  return products;
}

absl::Status WeightProducts::SetGemvTokens(int dense, int fp8) {
  RETURN_IF_ERROR(CheckGemvTokens("dense GEMV", dense));
  RETURN_IF_ERROR(CheckGemvTokens("FP8 GEMV", fp8));
  options_.dense_gemv_max_tokens = dense;
  options_.fp8_gemv_max_tokens = fp8;
  return absl::OkStatus();
}

absl::Status WeightProducts::SetCublasMinTokens(int tokens) {
  if (tokens < 0 || (tokens > 0 && scratch_.bytes() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cublas_min_tokens %d needs a decode scratch (and >= 0)", tokens));
  }
  options_.cublas_min_tokens = tokens;
  return absl::OkStatus();
}

absl::Status WeightProducts::SetFp8CublasltMinTokens(int tokens) {
  if (tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fp8_cublaslt_min_tokens %d must be >= 0", tokens));
  }
  options_.fp8_cublaslt_min_tokens = tokens;
  return absl::OkStatus();
}

absl::Status WeightProducts::SetSplitKMaxTokens(int tokens) {
  if (tokens < 0 || (tokens > 0 && split_.counters == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("split_k_max_tokens %d needs num_sms (and >= 0)", tokens));
  }
  options_.split_k_max_tokens = tokens;
  return absl::OkStatus();
}

absl::Status WeightProducts::Prepare(const Projection& w) {
  for (int i = 0; i < w.num_parts; ++i) {
    const DeviceMatrix& part = w.parts[static_cast<size_t>(i)];
    if (IsBlockFormat(part.format) || Fp8TensorCoresFit(part)) {
      RETURN_IF_ERROR(PrepareQuantGemm(part.format, dtype_, options_.gemm_kernel));
    }
    if (part.format != WeightFormat::kFp8) continue;
    if (fp8_ == nullptr) return absl::FailedPreconditionError("FP8 weights without Fp8Gemm");
    RETURN_IF_ERROR(fp8_->Prepare(part));
  }
  return absl::OkStatus();
}

WeightProducts::Path WeightProducts::PathOf(const DeviceMatrix& part, int num_tokens) const {
  switch (part.format) {
    case WeightFormat::kDense:
      return num_tokens <= options_.dense_gemv_max_tokens && DenseGemvFits(part) ? Path::kDenseGemv
                                                                                 : Path::kCublas;
    case WeightFormat::kFp8: {
      if (num_tokens <= options_.fp8_gemv_max_tokens) return Path::kFp8Gemv;
      const int from = options_.fp8_cublaslt_min_tokens;
      return (from == 0 || num_tokens < from) && Fp8TensorCoresFit(part) ? Path::kFp8TensorCores
                                                                         : Path::kFp8Gemm;
    }
    default:
      if (num_tokens <= options_.gemv_max_tokens) {
        return options_.gemv_int8 ? Path::kQuantGemvInt8 : Path::kQuantGemv;
      }
      return options_.cublas_min_tokens == 0 || num_tokens < options_.cublas_min_tokens
                 ? Path::kQuantGemm
                 : Path::kDecodeCublas;
  }
}

absl::Status WeightProducts::QuantizeX(const void* x, int num_tokens, int cols) {
  if (cols > options_.gemv_int8_max_cols) {
    return absl::InvalidArgumentError("a block part wider than gemv_int8_max_cols");
  }
  return LaunchQuantizeQ8Blocks({x, xq_.get<int8_t>(), XqScales(), num_tokens, cols, dtype_},
                                stream_);
}

absl::Status WeightProducts::Run(const void* x, const Projection& w, float* out, int num_tokens,
                                 bool accumulate) {
  if (num_tokens == 0) return absl::OkStatus();
  int first_out = 0;
  bool x_quantized = false;  // into xq_, once for the parts that read it
  for (int i = 0; i < w.num_parts; ++i) {
    const DeviceMatrix& part = w.parts[static_cast<size_t>(i)];
    float* part_out = out + first_out;
    const QuantGemvParams gemv{x, part, part_out, w.n_out, num_tokens, accumulate, dtype_};
    switch (PathOf(part, num_tokens)) {
      case Path::kDenseGemv:
        RETURN_IF_ERROR(LaunchDenseGemv(gemv, stream_));
        break;
      case Path::kCublas:
        RETURN_IF_ERROR(gemm_->Run(
            {x, part.data, part_out, num_tokens, w.n_in, part.rows, accumulate, w.n_out}));
        break;
      case Path::kFp8Gemv:
        RETURN_IF_ERROR(LaunchFp8Gemv(gemv, stream_));
        break;
      case Path::kFp8Gemm:
        if (fp8_ == nullptr) return absl::FailedPreconditionError("FP8 weights without Fp8Gemm");
        RETURN_IF_ERROR(fp8_->Run(x, part, part_out, w.n_out, num_tokens, accumulate));
        break;
      case Path::kQuantGemvInt8: {
        if (!x_quantized) {
          RETURN_IF_ERROR(QuantizeX(x, num_tokens, w.n_in));
          x_quantized = true;
        }
        QuantGemvInt8Params q{xq_.get<int8_t>(), XqScales(), part,      part_out,
                              w.n_out,           num_tokens, accumulate};
        q.dtype = dtype_;
        RETURN_IF_ERROR(LaunchQuantGemvInt8(q, stream_));
        break;
      }
      case Path::kQuantGemv:
        RETURN_IF_ERROR(LaunchQuantGemv(gemv, stream_));
        break;
      case Path::kFp8TensorCores:
      case Path::kQuantGemm: {
        QuantGemvParams p = gemv;
        p.gemm_kernel = options_.gemm_kernel;
        if (num_tokens <= options_.split_k_max_tokens &&
            QuantGemmTiles(part.rows, num_tokens) < options_.num_sms) {
          p.k_splits =
              options_.forced_k_splits > 0
                  ? options_.forced_k_splits
                  : QuantGemmAutoSplits(part.rows, part.cols, num_tokens, options_.num_sms);
          p.split = split_;
        }
        RETURN_IF_ERROR(LaunchQuantGemm(p, stream_));
        break;
      }
      case Path::kDecodeCublas: {
        // Slices of rows, decoded into the scratch and multiplied there.
        const size_t dense_row = static_cast<size_t>(w.n_in) * DTypeSize(dtype_);
        const int slice = static_cast<int>(
            std::min<size_t>(scratch_.bytes() / dense_row, static_cast<size_t>(part.rows)));
        if (slice == 0) {
          return absl::FailedPreconditionError(
              absl::StrFormat("the weight decode scratch (%d bytes) holds no row of %d columns",
                              static_cast<int64_t>(scratch_.bytes()), w.n_in));
        }
        for (int r = 0; r < part.rows; r += slice) {
          const int rows = std::min(slice, part.rows - r);
          DequantizeRowsParams d;
          d.w = part;
          d.first_row = r;
          d.num_rows = rows;
          d.out = scratch_.get();
          d.dtype = dtype_;
          RETURN_IF_ERROR(LaunchDequantizeRows(d, stream_));
          RETURN_IF_ERROR(gemm_->Run(
              {x, scratch_.get(), part_out + r, num_tokens, w.n_in, rows, accumulate, w.n_out}));
        }
        break;
      }
    }
    first_out += part.rows;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> WeightProducts::RunGlu(const void* x, const Projection& w, void* h,
                                            int num_tokens) {
  if (!options_.fuse_glu || num_tokens == 0 || w.num_parts != 1) return false;
  const DeviceMatrix& part = w.parts[0];
  QuantGemvParams gemv{x, part, nullptr, 0, num_tokens, false, dtype_};
  gemv.glu_out = h;
  switch (PathOf(part, num_tokens)) {
    case Path::kDenseGemv:
      RETURN_IF_ERROR(LaunchDenseGemv(gemv, stream_));
      return true;
    case Path::kFp8Gemv:
      RETURN_IF_ERROR(LaunchFp8Gemv(gemv, stream_));
      return true;
    case Path::kQuantGemv:
      RETURN_IF_ERROR(LaunchQuantGemv(gemv, stream_));
      return true;
    case Path::kQuantGemvInt8: {
      RETURN_IF_ERROR(QuantizeX(x, num_tokens, w.n_in));
      QuantGemvInt8Params q{xq_.get<int8_t>(), XqScales(), part, nullptr, 0, num_tokens, false};
      q.glu_out = h;
      q.dtype = dtype_;
      RETURN_IF_ERROR(LaunchQuantGemvInt8(q, stream_));
      return true;
    }
    default:
      return false;
  }
}

}  // namespace pagoda::worker::cuda
