// Shared by the CUDA backend's tests (cuda_backend_gpu_test, cuda_weights_gpu_test): backends
// built for a test, and the comparison of their logits with the CPU backend's over ragged
// batches (chunked prefills mixed with decodes, shuffled pages). Each test file also builds as
// an emulated test (tests/CMakeLists.txt), where PAGODA_CUDA_EMULATION is defined.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/support/status_assertions.h"
#include "tests/worker/model_fixtures.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/device.h"

namespace pagoda::worker::cuda {

#define SKIP_WITHOUT_GPU() \
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CUDA backend test not run"

// Built as *_emulated_test, the backend runs on the host emulator
// (worker/backend/cuda/emulation), where a prefilled token costs about a thousand times more.
#ifdef PAGODA_CUDA_EMULATION
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

// A small random model with F16 weights and a context of `context` tokens
// (testing::SmallRandomOptions for the rest).
inline std::shared_ptr<const LlamaModel> RandomF16Model(int dim, int heads, int kv_heads,
                                                        int layers, uint64_t seed,
                                                        int context = 1024) {
  modelgen::RandomModelOptions o = testing::SmallRandomOptions(dim, heads, kv_heads, layers, seed);
  o.context_length = context;
  o.dtype = common::GgmlType::F16;
  return testing::RandomModel(o);
}

// A backend's options: num_pages pages of page_size tokens, dtype; the rest default.
inline CudaBackendOptions CudaOptions(int page_size, int num_pages, DType dtype) {
  CudaBackendOptions o;
  o.page_size = page_size;
  o.num_pages = num_pages;
  o.dtype = dtype;
  return o;
}

inline std::unique_ptr<CudaBackend> MakeCuda(std::shared_ptr<const LlamaModel> model,
                                             const CudaBackendOptions& o) {
  auto b = CudaBackend::Create(std::move(model), o);
  EXPECT_OK(b);
  return b.ok() ? *std::move(b) : nullptr;
}

inline std::unique_ptr<CudaBackend> MakeCuda(std::shared_ptr<const LlamaModel> model, int page_size,
                                             int num_pages, DType dtype, bool graphs = true,
                                             int max_batch_tokens = 2048) {
  CudaBackendOptions o = CudaOptions(page_size, num_pages, dtype);
  o.cuda_graphs = graphs;
  o.max_batch_tokens = max_batch_tokens;
  return MakeCuda(std::move(model), o);
}

// The CPU reference with float activations: the CUDA backend converts quantized weights to
// BF16/FP16 at load and multiplies float activations, so the CPU's 8-bit activation path
// (its default) is not its twin.
inline std::unique_ptr<CpuBackend> MakeCpu(std::shared_ptr<const LlamaModel> model, int page_size,
                                           int num_pages) {
  CpuBackendOptions options{page_size, num_pages, 0};
  options.quantize_activations = false;
  auto b = CpuBackend::Create(std::move(model), options);
  EXPECT_OK(b);
  return b.ok() ? *std::move(b) : nullptr;
}

inline double RelError(std::span<const float> got, std::span<const float> ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    err += double(got[i] - ref[i]) * (got[i] - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// A sequence driven through ragged steps: its prompt, generated tokens and pages.
struct Seq {
  std::vector<int32_t> tokens;  // prompt, then one random token per decode
  int done = 0;                 // positions already in the KV cache
  std::vector<int32_t> pages;
};

// Runs `steps` ragged iterations over `seqs` on both backends and compares every logits row;
// the largest row error goes to *max_error when given.
inline void CompareRagged(CpuBackend& cpu, CudaBackend& gpu, std::mt19937_64& rng, int num_seqs,
                          int max_prompt, int steps, double tolerance,
                          double* max_error = nullptr) {
  const common::ModelConfig& c = cpu.config();
  const int ps = cpu.page_size();
  std::vector<int32_t> free_pages(static_cast<size_t>(cpu.num_pages()));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  std::vector<Seq> seqs(static_cast<size_t>(num_seqs));
  for (Seq& s : seqs) {
    const int len = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_prompt));
    for (int i = 0; i < len; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
  }
  std::vector<float> ref, got;
  for (int step = 0; step < steps; ++step) {
    std::vector<SeqInput> batch;
    for (Seq& s : seqs) {
      if (s.done == static_cast<int>(s.tokens.size())) {  // decode: one more token
        s.tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
      }
      const int left = static_cast<int>(s.tokens.size()) - s.done;
      const int n = rng() % 3 == 0 ? left : 1 + static_cast<int>(rng() % left);  // chunked
      while (static_cast<int>(s.pages.size()) * ps < s.done + n) {
        ASSERT_FALSE(free_pages.empty());
        s.pages.push_back(free_pages.back());
        free_pages.pop_back();
      }
      SeqInput in;
      in.tokens = std::span<const int32_t>(s.tokens).subspan(s.done, n);
      in.start_pos = s.done;
      in.pages = s.pages;
      in.want_logits = s.done + n == static_cast<int>(s.tokens.size()) || rng() % 4 == 0;
      batch.push_back(in);
      s.done += n;
    }
    ASSERT_OK(cpu.Forward(batch, &ref));
    auto st = gpu.Forward(batch, &got);
    ASSERT_OK(st);
    ASSERT_EQ(got.size(), ref.size());
    const size_t vocab = static_cast<size_t>(c.vocab_size);
    for (size_t r = 0; r < ref.size() / vocab; ++r) {
      const double e = RelError({got.data() + r * vocab, vocab}, {ref.data() + r * vocab, vocab});
      EXPECT_LT(e, tolerance) << "step " << step << " row " << r;
      if (max_error != nullptr) *max_error = std::max(*max_error, e);
    }
  }
}

#ifdef PAGODA_CUDA_EMULATION
namespace emulation {
void SetComputeCapability(int major, int minor);  // tests/support/cuda_emulation/cuda_emulation.h
}  // namespace emulation

// On an emulated GPU of compute capability major.minor, a small random model (from `seed`) with
// options `o` is refused at Create with FailedPrecondition and a message naming each of `parts`.
inline void ExpectRefusedOn(int major, int minor, CudaBackendOptions o, uint64_t seed,
                            std::initializer_list<const char*> parts) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 4, 2, 2, seed));
  ASSERT_NE(model, nullptr);
  o.num_pages = 16;
  emulation::SetComputeCapability(major, minor);
  auto gpu = CudaBackend::Create(model, o);
  emulation::SetComputeCapability(9, 0);
  ASSERT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
  const std::string message(gpu.status().message());
  for (const char* part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}
#endif

}  // namespace pagoda::worker::cuda
