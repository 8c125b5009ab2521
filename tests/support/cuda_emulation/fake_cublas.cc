// The cuBLAS entry points the CUDA backend loads (cublas_library.h), as host code for the
// emulated build: handles that remember their stream, and cublasGemmEx for the types the
// backend uses (bf16/fp16/fp32 inputs, fp32 output and accumulation) with cuBLAS's column-major
// semantics. Enqueued on the handle's stream like any other work, so a captured graph replays
// its GEMMs. Host pointer mode only (alpha and beta read at the call, as the backend sets).
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "common/fp16.h"
#include "tests/support/cuda_emulation/cuda_emulation.h"

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

Handle* AsHandle(cublasHandle_t h) { return reinterpret_cast<Handle*>(h); }

bool Supported(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_16F || t == CUDA_R_32F; }

float Element(const void* base, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_16BF:
      return pagoda::common::Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16F:
      return pagoda::common::F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// op(M) of a column-major matrix with leading dimension ld, as rows x cols, row-major floats.
std::vector<float> Op(const void* m, cudaDataType t, int ld, cublasOperation_t op, int rows,
                      int cols) {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t at =
          op == CUBLAS_OP_N ? r + static_cast<size_t>(c) * ld : c + static_cast<size_t>(r) * ld;
      out[static_cast<size_t>(r) * cols + c] = Element(m, t, at);
    }
  }
  return out;
}

// Eight independent partial sums: the compiler vectorizes them (a single running sum is a
// serial dependency it may not reorder), which makes the tests' GEMMs several times faster.
float Dot(const float* x, const float* y, int k) {
  float partial[8] = {};
  int l = 0;
  for (; l + 8 <= k; l += 8) {
    for (int u = 0; u < 8; ++u) partial[u] += x[l + u] * y[l + u];
  }
  float sum = 0.0f;
  for (; l < k; ++l) sum += x[l] * y[l];
  for (float p : partial) sum += p;
  return sum;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  delete AsHandle(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  AsHandle(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetPointerMode_v2(cublasHandle_t handle,
                                                    cublasPointerMode_t mode) {
  AsHandle(handle)->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS (emulation)";
  }
}

// C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C, column-major; C is not read when
// beta == 0 (so NaN there does not leak in), as in cuBLAS.
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* a, cudaDataType a_type,
                                         int lda, const void* b, cudaDataType b_type, int ldb,
                                         const void* beta, void* c, cudaDataType c_type, int ldc,
                                         cublasComputeType_t compute, cublasGemmAlgo_t) {
  Handle& h = *AsHandle(handle);
  // cuBLAS's own argument checks: each leading dimension covers the stored matrix's rows.
  const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) ||
      ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (h.pointer_mode != CUBLAS_POINTER_MODE_HOST || !Supported(a_type) || !Supported(b_type) ||
      c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F ||
      (transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) ||
      (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cudaError_t err = pagoda::worker::cuda::emulation::Enqueue(h.stream, [=] {
    const std::vector<float> op_a = Op(a, a_type, lda, transa, m, k);
    const std::vector<float> op_b_t =
        Op(b, b_type, ldb, transb == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N, n,
           k);  // op(B) transposed: n x k
    float* out = static_cast<float*>(c);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        const float sum = Dot(op_a.data() + static_cast<size_t>(i) * k,
                              op_b_t.data() + static_cast<size_t>(j) * k, k);
        float& o = out[i + static_cast<size_t>(j) * ldc];
        o = beta_value == 0.0f ? alpha_value * sum : alpha_value * sum + beta_value * o;
      }
    }
    return cudaSuccess;
  });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
