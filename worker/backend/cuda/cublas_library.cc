#include "worker/backend/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pagoda::worker::cuda {
namespace {

#ifndef PAGODA_CUDA_LIB_DIR
#define PAGODA_CUDA_LIB_DIR ""
#endif

absl::StatusOr<CublasLibrary> Load() {
#ifdef PAGODA_CUDA_EMULATION
  // The emulated build (tests/support/cuda_emulation) links host versions of these entry points.
  CublasLibrary fake;
  fake.create = &cublasCreate_v2;
  fake.destroy = &cublasDestroy_v2;
  fake.set_stream = &cublasSetStream_v2;
  fake.set_workspace = &cublasSetWorkspace_v2;
  fake.set_pointer_mode = &cublasSetPointerMode_v2;
  fake.status_string = &cublasGetStatusString;
  fake.gemm_ex = &cublasGemmEx;
  return fake;
#endif
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  std::vector<std::string> tried = {soname};
  if (std::string(PAGODA_CUDA_LIB_DIR) != "") {
    tried.push_back(absl::StrCat(PAGODA_CUDA_LIB_DIR, "/", soname));
  }
  void* handle = nullptr;
  std::string error;
  for (const std::string& path : tried) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* e = dlerror();
    error = e != nullptr ? e : "unknown error";
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--backend cuda needs cuBLAS %d: cannot load %s (tried %s; last error: %s); install "
        "the CUDA %d libraries or add their directory to LD_LIBRARY_PATH",
        CUBLAS_VER_MAJOR, soname, absl::StrJoin(tried, ", "), error, CUBLAS_VER_MAJOR));
  }
  CublasLibrary lib;
  std::string missing;
  auto resolve = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(handle, name));
    if (*fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  resolve(&lib.create, "cublasCreate_v2");
  resolve(&lib.destroy, "cublasDestroy_v2");
  resolve(&lib.set_stream, "cublasSetStream_v2");
  resolve(&lib.set_workspace, "cublasSetWorkspace_v2");
  resolve(&lib.set_pointer_mode, "cublasSetPointerMode_v2");
  resolve(&lib.status_string, "cublasGetStatusString");
  resolve(&lib.gemm_ex, "cublasGemmEx");
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s lacks the entry points %s", soname, missing));
  }
  return lib;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> CublasLibrary::Get() {
  // Loaded once; a failure is remembered too (the loader would only fail the same way again).
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Load());
  if (!library->ok()) return library->status();
  return &library->value();
}

}  // namespace pagoda::worker::cuda
