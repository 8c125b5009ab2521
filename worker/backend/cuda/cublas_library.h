// CublasLibrary and CublasLtLibrary: cuBLAS and cuBLASLt loaded at run time (dlopen), not linked.
//
// Why: a library linked into an executable puts its thread-local storage in the static TLS
// block every thread of the process carries, and libcublasLt's is ~92 KiB. Threads created with
// a small fixed stack then fail: civetweb (the worker's Prometheus endpoint) asks for 100 KiB
// stacks, so pthread_create returns EINVAL and --metrics-listen cannot start. A dlopen'ed
// library's TLS is allocated per thread on first use instead. It also lets pagoda-worker run
// with --backend cpu on a machine without the CUDA libraries.
//
// Contract: Get() loads libcublas.so.<major of the headers> (libcublasLt.so.<major>) once per
// process (the dynamic loader's search path, then the toolkit's lib directory known at build
// time) and resolves the entry points the backend uses; the library stays loaded until exit. Its
// error names the library, the places tried and dlerror(). Thread-safe.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace pagoda::worker::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;

  static absl::StatusOr<const CublasLibrary*> Get();
};

// cuBLASLt: the FP8 products (fp8_gemm.h).
struct CublasLtLibrary {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;

  static absl::StatusOr<const CublasLtLibrary*> Get();
};

}  // namespace pagoda::worker::cuda
