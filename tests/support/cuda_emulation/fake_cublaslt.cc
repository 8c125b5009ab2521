// The cuBLASLt entry points the CUDA backend loads (cublas_library.h), as host code for the
// emulated build: exactly what the FP8 products (fp8_gemm.h) use, held to the rules of
// cuBLASLt's FP8 path on Hopper, so that a call the GPU would refuse fails here too. A and B are
// CUDA_R_8F_E4M3 in the "TN" layout (A transposed, B not), every dimension and leading
// dimension a multiple of 16, D float32 with compute and scale type float32, no scale pointers;
// alpha and beta on the host. The product runs on the descriptor's stream like any other work,
// so a captured graph replays it; E4M3 values decode through cuda_fp8.h (exactly).
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <cstring>
#include <vector>

#include "tests/support/cuda_emulation/cuda_emulation.h"

namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

float E4M3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(b, __NV_E4M3);
  return __half2float(__half(h));
}

bool Aligned16(uint64_t v) { return v % 16 == 0; }

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new char(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<Desc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t size) {
  Desc& d = *reinterpret_cast<Desc*>(desc);
  if (buf == nullptr || size != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) {
    std::memcpy(&d.transa, buf, size);
  } else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) {
    std::memcpy(&d.transb, buf, size);
  } else {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // nothing else is emulated
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  if (ld < static_cast<int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new char(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<char*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || buf == nullptr ||
      size != sizeof(uint64_t)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// The FP8 rules above; D (and C, the same layout) [m x n] = op_T(A) [m x k] * B [k x n].
bool Fp8Supported(const Desc& d, const Layout& a, const Layout& b, const Layout& c) {
  return d.compute == CUBLAS_COMPUTE_32F && d.scale == CUDA_R_32F && d.transa == CUBLAS_OP_T &&
         d.transb == CUBLAS_OP_N && a.type == CUDA_R_8F_E4M3 && b.type == CUDA_R_8F_E4M3 &&
         c.type == CUDA_R_32F && a.rows == b.rows && a.cols == c.rows && b.cols == c.cols &&
         Aligned16(a.rows) && Aligned16(a.cols) && Aligned16(b.cols) && Aligned16(a.ld) &&
         Aligned16(b.ld) && Aligned16(c.ld);
}

}  // namespace

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* count) {
  *count = 0;
  if (requested < 1 || c != d) return CUBLAS_STATUS_INVALID_VALUE;
  if (!Fp8Supported(*reinterpret_cast<Desc*>(desc), *reinterpret_cast<Layout*>(a),
                    *reinterpret_cast<Layout*>(b), *reinterpret_cast<Layout*>(c))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* a_ptr,
                                           cublasLtMatrixLayout_t a_layout, const void* b_ptr,
                                           cublasLtMatrixLayout_t b_layout, const void* beta,
                                           const void* c_ptr, cublasLtMatrixLayout_t c_layout,
                                           void* d_ptr, cublasLtMatrixLayout_t d_layout,
                                           const cublasLtMatmulAlgo_t*, void*, size_t,
                                           cudaStream_t stream) {
  const Layout a = *reinterpret_cast<Layout*>(a_layout), b = *reinterpret_cast<Layout*>(b_layout);
  const Layout c = *reinterpret_cast<Layout*>(c_layout);
  if (c_layout != d_layout || c_ptr != d_ptr ||
      !Fp8Supported(*reinterpret_cast<Desc*>(desc), a, b, c)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cudaError_t err = pagoda::worker::cuda::emulation::Enqueue(stream, [=] {
    const auto* av = static_cast<const uint8_t*>(a_ptr);
    const auto* bv = static_cast<const uint8_t*>(b_ptr);
    auto* out = static_cast<float*>(d_ptr);
    const size_t m = a.cols, n = b.cols, k = a.rows;
    std::vector<float> column(k);
    for (size_t j = 0; j < n; ++j) {
      for (size_t l = 0; l < k; ++l) column[l] = E4M3(bv[j * b.ld + l]);
      for (size_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (size_t l = 0; l < k; ++l) sum += E4M3(av[i * a.ld + l]) * column[l];
        float& o = out[j * c.ld + i];
        o = beta_value == 0.0f ? alpha_value * sum : alpha_value * sum + beta_value * o;
      }
    }
    return cudaSuccess;
  });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
