// cuBLAS and cuBLASLt are loaded at run time (worker/backend/cuda/cublas_library.h). Loading needs
// the CUDA libraries but no device, so this runs wherever the CUDA backend is built.
#include "worker/backend/cuda/cublas_library.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include "tests/support/status_assertions.h"

namespace pagoda::worker::cuda {
namespace {

TEST(CublasLibraryTest, LoadsOnceAndResolvesEveryEntryPoint) {
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  ASSERT_OK(lib);
  EXPECT_NE((*lib)->create, nullptr);
  EXPECT_NE((*lib)->destroy, nullptr);
  EXPECT_NE((*lib)->set_stream, nullptr);
  EXPECT_NE((*lib)->set_workspace, nullptr);
  EXPECT_NE((*lib)->set_pointer_mode, nullptr);
  EXPECT_NE((*lib)->gemm_ex, nullptr);
  ASSERT_NE((*lib)->status_string, nullptr);
  EXPECT_STRNE((*lib)->status_string(CUBLAS_STATUS_NOT_INITIALIZED), "");
  EXPECT_EQ(*CublasLibrary::Get(), *lib);
}

TEST(CublasLibraryTest, LtLoadsOnceAndResolvesEveryEntryPoint) {
  absl::StatusOr<const CublasLtLibrary*> lib = CublasLtLibrary::Get();
  ASSERT_OK(lib);
  for (const void* fn : {(const void*)(*lib)->create, (const void*)(*lib)->destroy,
                         (const void*)(*lib)->desc_create, (const void*)(*lib)->desc_destroy,
                         (const void*)(*lib)->desc_set, (const void*)(*lib)->layout_create,
                         (const void*)(*lib)->layout_destroy, (const void*)(*lib)->pref_create,
                         (const void*)(*lib)->pref_destroy, (const void*)(*lib)->pref_set,
                         (const void*)(*lib)->heuristic, (const void*)(*lib)->matmul}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_EQ(*CublasLtLibrary::Get(), *lib);
}

// The reason it is loaded, not linked: with cuBLAS loaded, a thread with a 100 KiB stack (what
// civetweb, behind the worker's /metrics, asks for) can still be created.
TEST(CublasLibraryTest, SmallStackThreadsStillStart) {
  ASSERT_OK(CublasLibrary::Get());
  ASSERT_OK(CublasLtLibrary::Get());
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 100 * 1024), 0);
  pthread_t thread;
  const int created = pthread_create(
      &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(created, 0) << "pthread_create with a 100 KiB stack failed";
  pthread_join(thread, nullptr);
}

}  // namespace
}  // namespace pagoda::worker::cuda
