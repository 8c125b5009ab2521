#include "worker/backend/cuda/gemm.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::worker::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status CublasStatus(const CublasLibrary& lib, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("cuBLAS error in %s: %s", what, lib.status_string(s)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(cudaStream_t stream, DType dtype) {
  ASSIGN_OR_RETURN(const CublasLibrary* lib, CublasLibrary::Get());
  ASSIGN_OR_RETURN(DeviceBuffer workspace,
                   DeviceBuffer::Allocate(kWorkspaceBytes, "the cuBLAS workspace"));
  cublasHandle_t handle;
  RETURN_IF_ERROR(CublasStatus(*lib, lib->create(&handle), "cublasCreate"));
  std::unique_ptr<Gemm> gemm(new Gemm(lib, handle, dtype, std::move(workspace)));
  RETURN_IF_ERROR(CublasStatus(*lib, lib->set_stream(handle, stream), "cublasSetStream"));
  RETURN_IF_ERROR(CublasStatus(
      *lib, lib->set_workspace(handle, gemm->workspace_.get(), gemm->workspace_.bytes()),
      "cublasSetWorkspace"));
  // Pointer mode host: alpha and beta are read at enqueue time (fixed per call site).
  RETURN_IF_ERROR(CublasStatus(*lib, lib->set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST),
                               "cublasSetPointerMode"));
  return gemm;
}

Gemm::~Gemm() { lib_->destroy(handle_); }

absl::Status Gemm::Run(const GemmParams& p) {
  if (p.num_tokens == 0) return absl::OkStatus();
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  const cudaDataType_t type = dtype_ == DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  // Column-major view: out^T [n_out x T] = W^T' [n_out x n_in] * x^T [n_in x T], where the
  // row-major W [n_out][n_in] is the column-major [n_in x n_out] matrix, transposed.
  return CublasStatus(
      *lib_,
      lib_->gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, p.n_out, p.num_tokens, p.n_in, &alpha, p.w,
                    type, p.n_in, p.x, type, p.n_in, &beta, p.out, CUDA_R_32F,
                    p.ld_out > 0 ? p.ld_out : p.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace pagoda::worker::cuda
