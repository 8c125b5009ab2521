#include "worker/backend/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pagoda::worker::cuda {
namespace {

#ifndef PAGODA_CUDA_LIB_DIR
#define PAGODA_CUDA_LIB_DIR ""
#endif

// Opens `stem`.so.<CUBLAS_VER_MAJOR> where the loader looks, then in the toolkit's directory;
// `name` is the library's name in the error.
absl::StatusOr<void*> Open(const char* stem, const char* name) {
  const std::string soname = absl::StrCat(stem, ".so.", CUBLAS_VER_MAJOR);
  std::vector<std::string> tried = {soname};
  if (std::string(PAGODA_CUDA_LIB_DIR) != "") {
    tried.push_back(absl::StrCat(PAGODA_CUDA_LIB_DIR, "/", soname));
  }
  std::string error;
  for (const std::string& path : tried) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL); handle != nullptr) {
      return handle;
    }
    const char* e = dlerror();
    error = e != nullptr ? e : "unknown error";
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "--backend cuda needs %s %d: cannot load %s (tried %s; last error: %s); install the CUDA "
      "%d libraries or add their directory to LD_LIBRARY_PATH",
      name, CUBLAS_VER_MAJOR, soname, absl::StrJoin(tried, ", "), error, CUBLAS_VER_MAJOR));
}

// Resolves entry points by name, collecting the missing ones.
class Resolver {
 public:
  Resolver(void* handle, const char* stem) : handle_(handle), stem_(stem) {}
  template <typename Fn>
  void operator()(Fn* fn, const char* name) {
    *fn = reinterpret_cast<Fn>(dlsym(handle_, name));
    if (*fn == nullptr) absl::StrAppend(&missing_, missing_.empty() ? "" : ", ", name);
  }
  absl::Status status() const {
    if (missing_.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrFormat("%s.so.%d lacks the entry points %s", stem_, CUBLAS_VER_MAJOR, missing_));
  }

 private:
  void* handle_;
  const char* stem_;
  std::string missing_;
};

// Each library's entry points: X(member, symbol).
#define PAGODA_CUBLAS_ENTRY_POINTS(X)          \
  X(create, cublasCreate_v2)                   \
  X(destroy, cublasDestroy_v2)                 \
  X(set_stream, cublasSetStream_v2)            \
  X(set_workspace, cublasSetWorkspace_v2)      \
  X(set_pointer_mode, cublasSetPointerMode_v2) \
  X(status_string, cublasGetStatusString)      \
  X(gemm_ex, cublasGemmEx)
#define PAGODA_CUBLASLT_ENTRY_POINTS(X)             \
  X(create, cublasLtCreate)                         \
  X(destroy, cublasLtDestroy)                       \
  X(desc_create, cublasLtMatmulDescCreate)          \
  X(desc_destroy, cublasLtMatmulDescDestroy)        \
  X(desc_set, cublasLtMatmulDescSetAttribute)       \
  X(layout_create, cublasLtMatrixLayoutCreate)      \
  X(layout_destroy, cublasLtMatrixLayoutDestroy)    \
  X(pref_create, cublasLtMatmulPreferenceCreate)    \
  X(pref_destroy, cublasLtMatmulPreferenceDestroy)  \
  X(pref_set, cublasLtMatmulPreferenceSetAttribute) \
  X(heuristic, cublasLtMatmulAlgoGetHeuristic)      \
  X(matmul, cublasLtMatmul)

// The emulated build (tests/support/cuda_emulation) links host versions of the entry points;
// elsewhere they are looked up in the loaded library.
#ifdef PAGODA_CUDA_EMULATION
#define PAGODA_TAKE_ENTRY_POINT(member, symbol) lib.member = &symbol;
#else
#define PAGODA_TAKE_ENTRY_POINT(member, symbol) resolve(&lib.member, #symbol);
#endif

absl::StatusOr<CublasLibrary> Load() {
  CublasLibrary lib;
#ifndef PAGODA_CUDA_EMULATION
  ASSIGN_OR_RETURN(void* handle, Open("libcublas", "cuBLAS"));
  Resolver resolve(handle, "libcublas");
#endif
  PAGODA_CUBLAS_ENTRY_POINTS(PAGODA_TAKE_ENTRY_POINT)
#ifndef PAGODA_CUDA_EMULATION
  RETURN_IF_ERROR(resolve.status());
#endif
  return lib;
}

absl::StatusOr<CublasLtLibrary> LoadLt() {
  CublasLtLibrary lib;
#ifndef PAGODA_CUDA_EMULATION
  ASSIGN_OR_RETURN(void* handle, Open("libcublasLt", "cuBLASLt"));
  Resolver resolve(handle, "libcublasLt");
#endif
  PAGODA_CUBLASLT_ENTRY_POINTS(PAGODA_TAKE_ENTRY_POINT)
#ifndef PAGODA_CUDA_EMULATION
  RETURN_IF_ERROR(resolve.status());
#endif
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

absl::StatusOr<const CublasLtLibrary*> CublasLtLibrary::Get() {
  static const absl::StatusOr<CublasLtLibrary>* const library =
      new absl::StatusOr<CublasLtLibrary>(LoadLt());
  if (!library->ok()) return library->status();
  return &library->value();
}

}  // namespace pagoda::worker::cuda
