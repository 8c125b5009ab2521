#include "worker/backend/cuda/fp8_gemm.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/quant/fp8_kernels.h"

namespace pagoda::worker::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("cuBLASLt error %d in %s", static_cast<int>(s), what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(cudaStream_t stream, DType dtype,
                                                         int max_n_in, int max_n_out) {
  ASSIGN_OR_RETURN(const CublasLtLibrary* lib, CublasLtLibrary::Get());
  std::unique_ptr<Fp8Gemm> g(new Fp8Gemm(lib, stream, dtype, max_n_in, max_n_out));
  RETURN_IF_ERROR(LtStatus(lib->create(&g->handle_), "cublasLtCreate"));
  ASSIGN_OR_RETURN(g->workspace_,
                   DeviceBuffer::Allocate(kWorkspaceBytes, "the cuBLASLt workspace"));
  ASSIGN_OR_RETURN(g->x8_,
                   DeviceBuffer::Allocate(size_t(kFp8SliceTokens) * max_n_in, "FP8 activations"));
  ASSIGN_OR_RETURN(g->x_scales_,
                   DeviceBuffer::Allocate(size_t(kFp8SliceTokens) * 4, "FP8 activation scales"));
  ASSIGN_OR_RETURN(g->products_,
                   DeviceBuffer::Allocate(size_t(kFp8SliceTokens) * max_n_out * 4, "FP8 products"));
  return g;
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, plan] : plans_) Destroy(plan);
  if (handle_ != nullptr) lib_->destroy(handle_);
}

absl::StatusOr<const Fp8Gemm::Plan*> Fp8Gemm::PlanFor(int n_out, int tokens, int n_in) {
  const auto key = std::make_tuple(n_out, tokens, n_in);
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  // Column-major view, as in gemm.h: D [n_out x tokens] = op_T(A) * B, where A is the row-major
  // [n_out][n_in] weight read as the column-major [n_in x n_out] matrix, and B the row-major
  // [tokens][n_in] activations as the column-major [n_in x tokens] one.
  Plan p;
  auto make = [&]() -> absl::Status {
    RETURN_IF_ERROR(LtStatus(lib_->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate"));
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    RETURN_IF_ERROR(LtStatus(
        lib_->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)), "TRANSA"));
    RETURN_IF_ERROR(LtStatus(
        lib_->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)), "TRANSB"));
    RETURN_IF_ERROR(LtStatus(lib_->layout_create(&p.a, CUDA_R_8F_E4M3, n_in, n_out, n_in), "A"));
    RETURN_IF_ERROR(LtStatus(lib_->layout_create(&p.b, CUDA_R_8F_E4M3, n_in, tokens, n_in), "B"));
    RETURN_IF_ERROR(LtStatus(lib_->layout_create(&p.d, CUDA_R_32F, n_out, tokens, n_out), "D"));
    cublasLtMatmulPreference_t pref = nullptr;
    RETURN_IF_ERROR(LtStatus(lib_->pref_create(&pref), "cublasLtMatmulPreferenceCreate"));
    const size_t workspace = workspace_.bytes();
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t s = lib_->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                      sizeof(workspace));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = lib_->heuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    }
    lib_->pref_destroy(pref);
    RETURN_IF_ERROR(LtStatus(s, "cublasLtMatmulAlgoGetHeuristic"));
    if (found == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "cuBLASLt has no FP8 (E4M3) kernel for a %d x %d x %d product on this GPU", n_out, tokens,
          n_in));
    }
    p.algo = result.algo;
    return absl::OkStatus();
  };
  if (absl::Status s = make(); !s.ok()) {
    Destroy(p);
    return s;
  }
  return &(plans_[key] = p);
}

void Fp8Gemm::Destroy(const Plan& p) const {
  if (p.a != nullptr) lib_->layout_destroy(p.a);
  if (p.b != nullptr) lib_->layout_destroy(p.b);
  if (p.d != nullptr) lib_->layout_destroy(p.d);
  if (p.desc != nullptr) lib_->desc_destroy(p.desc);
}

absl::Status Fp8Gemm::Prepare(const DeviceMatrix& w) {
  for (int padded = 16; padded <= kFp8SliceTokens; padded += 16) {
    RETURN_IF_ERROR(PlanFor(w.rows, padded, w.cols).status());
  }
  return absl::OkStatus();
}

absl::Status Fp8Gemm::Run(const void* x, const DeviceMatrix& w, float* out, int ld_out,
                          int num_tokens, bool accumulate) {
  if (w.format != WeightFormat::kFp8 || w.row_scales == nullptr || w.cols % 16 != 0 ||
      w.rows % 16 != 0 || w.cols > max_n_in_ || w.rows > max_n_out_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Fp8Gemm: a %s matrix of %d x %d (FP8 with row scales, multiples of 16, at most %d x %d)",
        WeightFormatName(w.format), w.rows, w.cols, max_n_out_, max_n_in_));
  }
  const float one = 1.0f, zero = 0.0f;
  for (int t0 = 0; t0 < num_tokens; t0 += kFp8SliceTokens) {
    const int tokens = std::min(kFp8SliceTokens, num_tokens - t0);
    const int padded = (tokens + 15) / 16 * 16;
    const size_t x_offset = size_t(t0) * w.cols * DTypeSize(dtype_);
    RETURN_IF_ERROR(LaunchQuantizeFp8({static_cast<const char*>(x) + x_offset, x8_.get<uint8_t>(),
                                       x_scales_.get<float>(), tokens, padded, w.cols, dtype_},
                                      stream_));
    ASSIGN_OR_RETURN(const Plan* plan, PlanFor(w.rows, padded, w.cols));
    RETURN_IF_ERROR(
        LtStatus(lib_->matmul(handle_, plan->desc, &one, w.data, plan->a, x8_.get(), plan->b, &zero,
                              products_.get(), plan->d, products_.get(), plan->d, &plan->algo,
                              workspace_.get(), workspace_.bytes(), stream_),
                 "cublasLtMatmul"));
    RETURN_IF_ERROR(
        LaunchFp8Epilogue({products_.get<float>(), w.row_scales, x_scales_.get<float>(),
                           out + size_t(t0) * ld_out, ld_out, tokens, w.rows, accumulate},
                          stream_));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker::cuda
