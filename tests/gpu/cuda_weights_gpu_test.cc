// The CUDA backend's weight formats against the CPU backend and llama.cpp: llama.cpp's quantized
// files converted to the dtype or kept in their blocks (each product path), random quantized
// weights made on the device, FP8 E4M3 weights, and the small-batch GEMVs (forced, and chosen
// by timing at start). Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <random>
#include <set>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/gpu/cuda_backend_test_support.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/llama_cpp_top5.h"
#include "tests/worker/model_fixtures.h"

namespace pagoda::worker::cuda {
namespace {

// llama.cpp's quantized files, every type it writes, give the CPU backend's logits (which
// computes with the stored blocks): with every matrix converted to the dtype at upload
// (--dtype bf16|fp16), and with the quantized ones kept in their blocks (--dtype auto), multiplied
// by the fused kernel up to 8 (or 2) tokens and on tensor cores beyond, or, decoded ahead of
// cuBLAS in slices of 100-200 rows (a 100 KB scratch) for every product, or from a step size
// (set, or timed at start as the worker does).
struct QuantMode {
  const char* name;
  DType dtype;
  bool keep_quantized;
  int gemv_max_tokens;
  bool decode_then_cublas = false;
  size_t decode_scratch_bytes = kMaxDecodeScratchBytes;
  bool gemv_int8 = false;
  int cublas_min_tokens = 0;  // quant_cublas_min_tokens
  int forced_k_splits = 0;    // split-K in this many splits wherever a tensor-core step allows
};
void PrintTo(const QuantMode& m, std::ostream* os) { *os << m.name; }

class QuantizedFiles : public ::testing::TestWithParam<QuantMode> {};

TEST_P(QuantizedFiles, MatchCpu) {
  SKIP_WITHOUT_GPU();
  const QuantMode mode = GetParam();
  std::mt19937_64 rng(5);
  for (const char* file : {"quant/tiny-Q4_K_M.gguf", "quant/tiny-Q8_0.gguf", "quant/tiny-Q4_0.gguf",
                           "quant/tiny-Q5_K_M.gguf", "quant/tiny-Q6_K.gguf"}) {
    PAGODA_SKIP_WITHOUT_TEST_MODELS(path, file);
    auto model = LlamaModel::Load(*path);
    ASSERT_OK(model);
    SCOPED_TRACE(file);
    auto cpu = MakeCpu(*model, 16, 16);
    CudaBackendOptions o;
    o.page_size = 16;
    o.num_pages = 16;
    o.dtype = mode.dtype;
    o.keep_quantized = mode.keep_quantized;
    o.quant_gemv_max_tokens = mode.gemv_max_tokens;
    o.quant_decode_then_cublas = mode.decode_then_cublas;
    o.quant_gemv_int8 = mode.gemv_int8;
    o.max_decode_scratch_bytes = mode.decode_scratch_bytes;
    o.quant_cublas_min_tokens = mode.cublas_min_tokens;
    if (mode.forced_k_splits > 0) {
      o.split_k_max_tokens = 4096;
      o.forced_k_splits = mode.forced_k_splits;
    }
    // Timed: a budget of 128 tokens keeps the timing to 16 and 64 (the emulator's 1024-token
    // products take seconds).
    if (mode.cublas_min_tokens == kGemvAuto) o.max_batch_tokens = 128;
    auto gpu = CudaBackend::Create(*model, o);
    ASSERT_OK(gpu);
    if (mode.cublas_min_tokens == kGemvAuto) {  // a size the start-up timing tried, or never
      const std::set<int> sizes = {0, 16, 64};
      EXPECT_TRUE(sizes.contains((*gpu)->quant_cublas_min_tokens()))
          << (*gpu)->quant_cublas_min_tokens();
    } else {  // as set; decode_then_cublas is every size from 1; nothing kept, nothing
      const int expected = !mode.keep_quantized      ? 0
                           : mode.decode_then_cublas ? 1
                                                     : mode.cublas_min_tokens;
      EXPECT_EQ((*gpu)->quant_cublas_min_tokens(), expected);
    }
    // A step reads each kept matrix's file bytes, and two bytes per element of the others.
    size_t step_bytes = 0;
    auto add = [&](const WeightMatrix& m) {
      const bool kept = mode.keep_quantized && QuantizedFormatOf(m.type).has_value();
      step_bytes += kept ? m.num_bytes() : size_t{2} * m.rows * m.cols;
    };
    add((*model)->tied_output() ? (*model)->token_embedding() : (*model)->output());
    for (int l = 0; l < (*model)->config().n_layers; ++l) {
      const LlamaLayerWeights& w = (*model)->layer(l);
      for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
        add(*m);
      }
    }
    EXPECT_EQ((*gpu)->weight_bytes_per_step(), step_bytes);
    CompareRagged(*cpu, **gpu, rng, 2, kEmulated ? 6 : 40, kEmulated ? 3 : 6,
                  mode.dtype == DType::kBf16 ? 3e-2 : 6e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    CudaBackendGpuTest, QuantizedFiles,
    ::testing::Values(QuantMode{"Fp16", DType::kFp16, false, 8},
                      QuantMode{"Bf16", DType::kBf16, false, 8},
                      QuantMode{"KeptFused8", DType::kBf16, true, 8},
                      QuantMode{"KeptFused2Fp16", DType::kFp16, true, 2},
                      QuantMode{"KeptTensorCores", DType::kBf16, true, 0},
                      // The same in two splits of the columns (split-K), wgmma only.
                      QuantMode{"KeptTensorCoresSplit", DType::kBf16, true, 0, false,
                                kMaxDecodeScratchBytes, false, 0, 2},
                      QuantMode{"KeptFused8Int8", DType::kBf16, true, 8, false,
                                kMaxDecodeScratchBytes, true},
                      QuantMode{"KeptDecodedInSlices", DType::kBf16, true, 0, true, 100 * 512 * 2},
                      // Tensor cores below 3 tokens, decoded ahead of cuBLAS from there.
                      QuantMode{"KeptCublasFrom3", DType::kBf16, true, 0, false,
                                kMaxDecodeScratchBytes, false, 3},
                      // The worker's default: the choice timed at start.
                      QuantMode{"KeptTimedProducts", DType::kBf16, true, 8, false,
                                kMaxDecodeScratchBytes, false, kGemvAuto}),
    [](const ::testing::TestParamInfo<QuantMode>& info) { return std::string(info.param.name); });

// With the quantized matrices kept in their blocks (--dtype auto), log-probabilities of every
// quantized file follow llama.cpp's server within the tolerance the CPU backend meets
// (tests/worker/llama_cpp_top5.h), through the fused product (decode steps and 4-token prompts)
// and, on a GPU, through the tensor-core product and the fused one with 8-bit activations too.
TEST(CudaBackendGpuTest, KeptQuantizedFilesMatchLlamaCppLogProbs) {
  SKIP_WITHOUT_GPU();
  PAGODA_SKIP_WITHOUT_TEST_MODELS(top5_path, "quant/llama_cpp_top5.json");
  std::ifstream in(*top5_path);
  const nlohmann::json top5 = nlohmann::json::parse(in);
  // Paths: the fused product in FP32 (8), on tensor cores (0), fused with 8-bit activations (-8).
  for (int path : kEmulated ? std::vector<int>{8} : std::vector<int>{8, 0, -8}) {
    const int gemv_max_tokens = std::abs(path);
    const char* name = path > 0 ? "fused" : path == 0 ? "tensor cores" : "fused int8";
    for (const auto& [file_name, runs] : top5["files"].items()) {
      SCOPED_TRACE(file_name + " " + name);
      auto model = LlamaModel::Load(*testing::TestModelFile("quant/" + file_name));
      ASSERT_OK(model);
      testing::Gaps gaps;
      for (const nlohmann::json& run : runs) {
        CudaBackendOptions o;
        o.page_size = 16;
        o.num_pages = 8;
        o.keep_quantized = true;
        o.quant_gemv_max_tokens = gemv_max_tokens;
        o.quant_gemv_int8 = path < 0;
        o.max_batch_tokens = 64;
        auto gpu = CudaBackend::Create(*model, o);
        ASSERT_OK(gpu);
        testing::CompareWithLlamaCpp(**gpu, run, &gaps);
      }
      ASSERT_GT(gaps.count, 5 * 4 * 5);
      const double mean = gaps.sum / gaps.count;
      EXPECT_LT(gaps.max, testing::kMaxLogProbGap);
      EXPECT_LT(mean, testing::kMeanLogProbGap);
      std::printf("%-18s %-12s |log p - llama.cpp|: max %.4f, mean %.4f over %d values\n",
                  file_name.c_str(), name, gaps.max, mean, gaps.count);
    }
  }
}

// Benchmark models: random weights made on the device in quantized formats (a llama.cpp-style
// mix: Q4_K, Q6_K for V, down and the classifier) give finite logits, and a step reads the
// formats' bytes.
common::ModelConfig SmallLlamaConfig() {
  common::ModelConfig c;
  c.architecture = "llama";
  c.n_layers = 2;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.ffn_dim = 512;
  c.vocab_size = 512;
  c.context_length = 256;
  return c;
}

TEST(CudaBackendGpuTest, RandomQuantizedWeightsRun) {
  SKIP_WITHOUT_GPU();
  const common::ModelConfig c = SmallLlamaConfig();
  using F = WeightFormat;
  WeightFormats formats;
  formats.embedding = F::kQ4_K;
  formats.output = F::kQ6_K;
  formats.layers.assign(2, {F::kQ4_K, F::kQ4_K, F::kQ6_K, F::kQ4_K, F::kQ4_K, F::kQ4_K, F::kQ6_K});
  CudaBackendOptions o;
  o.page_size = 16;
  o.num_pages = 16;
  o.max_batch_tokens = 64;
  auto gpu = CudaBackend::CreateRandom(c, 3, o, formats);
  ASSERT_OK(gpu);
  auto bytes = [](F f, int rows, int cols) { return FormatRowBytes(f, cols) * rows; };
  const size_t layer = bytes(F::kQ4_K, 256 + 128, 256) + bytes(F::kQ6_K, 128, 256) +
                       bytes(F::kQ4_K, 256, 256) + bytes(F::kQ4_K, 1024, 256) +
                       bytes(F::kQ6_K, 256, 512);
  EXPECT_EQ((*gpu)->weight_bytes_per_step(), bytes(F::kQ6_K, 512, 256) + 2 * layer);
  std::vector<int32_t> tokens = {5, 77, 300, 12, 9, 401, 2, 88, 100, 31};
  std::vector<int32_t> pages = {3, 7};
  SeqInput in{tokens, 0, pages, true};
  std::vector<float> logits;
  ASSERT_OK((*gpu)->Forward({&in, 1}, &logits));
  ASSERT_EQ(logits.size(), 512u);
  for (float l : logits) ASSERT_TRUE(std::isfinite(l));
}

// Gate and up in differing formats make a two-part projection, which RunGlu declines: with
// SiLU·up fused where it can be, the second layer runs the gate/up product and SiLU·mul apart
// and the first fuses them; the logits of a prompt and a decode step (both through the fused
// product) equal those of a backend that fuses nothing, bit for bit.
TEST(CudaBackendGpuTest, TwoPartGateUpRunsUnfused) {
  SKIP_WITHOUT_GPU();
  using F = WeightFormat;
  WeightFormats formats;
  formats.layers = {{F::kQ4_K, F::kQ4_K, F::kQ6_K, F::kQ4_K, F::kQ4_K, F::kQ4_K, F::kQ6_K},
                    {F::kQ4_K, F::kQ4_K, F::kQ6_K, F::kQ4_K, F::kQ4_K, F::kQ5_K, F::kQ6_K}};
  std::vector<std::vector<float>> logits;
  for (const bool fuse : {true, false}) {
    CudaBackendOptions o;
    o.page_size = 16;
    o.num_pages = 16;
    o.max_batch_tokens = 64;
    o.fuse_glu = fuse;
    auto gpu = CudaBackend::CreateRandom(SmallLlamaConfig(), 3, o, formats);
    ASSERT_OK(gpu);
    const std::vector<int32_t> tokens = {5, 77, 300, 12, 9, 401};
    const std::vector<int32_t> pages = {3};
    const SeqInput prompt{std::span<const int32_t>(tokens).first(5), 0, pages, true};
    const SeqInput step{std::span<const int32_t>(tokens).subspan(5), 5, pages, true};
    for (const SeqInput& in : {prompt, step}) {
      std::vector<float> out;
      ASSERT_OK((*gpu)->Forward({&in, 1}, &out));
      logits.push_back(out);
    }
  }
  ASSERT_EQ(logits.size(), 4u);
  EXPECT_EQ(logits[0], logits[2]);
  EXPECT_EQ(logits[1], logits[3]);
}

// A small random F16 model (dim 256, 2 layers) whose matrices FP8 takes: every size a multiple
// of 16.
std::shared_ptr<const LlamaModel> Fp8ReadyModel(uint64_t seed) {
  modelgen::RandomModelOptions mo = testing::SmallRandomOptions(256, 4, 2, 2, seed);
  mo.dtype = common::GgmlType::F16;
  mo.ffn_dim = 512;
  return testing::RandomModel(mo);
}

// --dtype fp8: the layers' matrices in FP8 E4M3 with a scale per row, through our GEMV for steps
// of up to 8 tokens and cuBLASLt (with FP8 activations) beyond, through cuBLASLt alone, and
// through our GEMV and our tensor-core product (activations in BF16 at every step). Their
// logits against the CPU backend's float32 ones, beside BF16's on the same ragged steps: the
// largest row's relative error, measured in emulation, is 0.059 for FP8 (0.069 through
// cuBLASLt alone, 0.052 through ours alone, the same in two splits of the columns) against
// 0.0063 for BF16; asserted under 0.15 (and printed).
TEST(CudaBackendGpuTest, Fp8WeightsFollowTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(17);
  auto model = Fp8ReadyModel(rng());
  ASSERT_NE(model, nullptr);
  auto cpu = MakeCpu(model, 16, 64);
  CudaBackendOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.max_batch_tokens = 512;
  o.keep_quantized = true;
  o.fp8_weights = true;
  auto gpu = CudaBackend::Create(model, o);
  ASSERT_OK(gpu);
  o.fp8_cublaslt_min_tokens = 0;
  auto ours = CudaBackend::Create(model, o);
  ASSERT_OK(ours);
  o.split_k_max_tokens = 4096;  // ours in two splits of the columns, where wgmma runs it
  o.forced_k_splits = 2;
  auto ours_split = CudaBackend::Create(model, o);
  ASSERT_OK(ours_split);
  o.split_k_max_tokens = o.forced_k_splits = 0;
  o.fp8_cublaslt_min_tokens = 1;
  o.fp8_gemv_max_tokens = 0;
  auto cublaslt = CudaBackend::Create(model, o);
  ASSERT_OK(cublaslt);
  o.fp8_weights = false;
  auto bf16 = CudaBackend::Create(model, o);
  ASSERT_OK(bf16);
  // A layer reads its matrices in one byte per weight (the row scales aside): half BF16's.
  const common::ModelConfig& c = model->config();
  const size_t layer = size_t(c.dim) * (c.q_dim() + 2 * c.kv_dim()) + size_t(c.q_dim()) * c.dim +
                       3 * size_t(c.ffn_dim) * c.dim;
  EXPECT_EQ((*gpu)->weight_bytes_per_step(), 2 * size_t(c.vocab_size) * c.dim + c.n_layers * layer);
  double fp8_error = 0, ours_error = 0, split_error = 0, cublaslt_error = 0, bf16_error = 0;
  const std::mt19937_64 start = rng;
  CompareRagged(*cpu, **gpu, rng, 3, kEmulated ? 20 : 90, 3, 0.15, &fp8_error);
  std::mt19937_64 same = start;
  CompareRagged(*MakeCpu(model, 16, 64), **ours, same, 3, kEmulated ? 20 : 90, 3, 0.15,
                &ours_error);
  same = start;
  CompareRagged(*MakeCpu(model, 16, 64), **ours_split, same, 3, kEmulated ? 20 : 90, 3, 0.15,
                &split_error);
  same = start;
  CompareRagged(*MakeCpu(model, 16, 64), **cublaslt, same, 3, kEmulated ? 20 : 90, 3, 0.15,
                &cublaslt_error);
  same = start;
  CompareRagged(*MakeCpu(model, 16, 64), **bf16, same, 3, kEmulated ? 20 : 90, 3, 3e-2,
                &bf16_error);
  // Steps past the GEMV took different products in `gpu` (cuBLASLt) and `ours`.
  EXPECT_NE(ours_error, fp8_error);
  std::printf(
      "logits against the CPU's, largest row relative error: FP8 %.4f (ours alone %.4f, "
      "split %.4f, cuBLASLt alone %.4f), BF16 %.4f\n",
      fp8_error, ours_error, split_error, cublaslt_error, bf16_error);
}

#ifdef PAGODA_CUDA_EMULATION
// A GPU without FP8 tensor cores refuses --dtype fp8 at start, naming itself and what it lacks.
TEST(CudaBackendGpuTest, Fp8IsRefusedBeforeAda) {
  CudaBackendOptions o;
  o.fp8_weights = true;
  ExpectRefusedOn(8, 0, o, std::mt19937_64(19)(), {"FP8", "8.0", "CUDA host emulation"});
}
#endif

TEST(CudaBackendGpuTest, DenseGemvDecodeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  // Steps of up to 8 tokens (6 decodes) through our GEMV instead of cuBLAS; prompts through
  // cuBLAS.
  std::mt19937_64 rng(17);
  auto model = RandomF16Model(512, 8, 2, 2, 4);
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    auto cpu = MakeCpu(model, 16, 400);
    CudaBackendOptions options = CudaOptions(16, 400, dtype);
    options.dense_gemv_max_tokens = 8;
    auto gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    CompareRagged(*cpu, *gpu, rng, 6, 40, 6, dtype == DType::kBf16 ? 3e-2 : 6e-3);
  }
}

// kGemvAuto (the worker's default): each format's threshold is a size the start-up timing
// picked (0, 1, 2, 4 or 8), per format present; the products then follow the CPU at every step
// size. Out-of-range thresholds (and a quant_cublas_min_tokens below kGemvAuto) are refused at
// Create.
TEST(CudaBackendGpuTest, AutoGemvTokensAreMeasuredAndFollowTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(23);
  auto model = Fp8ReadyModel(rng());
  ASSERT_NE(model, nullptr);
  const std::set<int> sizes = {0, 1, 2, 4, 8};
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    CudaBackendOptions o = CudaOptions(16, 64, DType::kBf16);
    o.max_batch_tokens = 512;
    o.keep_quantized = true;
    o.fp8_weights = fp8;
    o.dense_gemv_max_tokens = kGemvAuto;
    o.fp8_gemv_max_tokens = kGemvAuto;
    o.fp8_cublaslt_min_tokens = kGemvAuto;
    o.split_k_max_tokens = kGemvAuto;
    auto gpu = MakeCuda(model, o);
    ASSERT_NE(gpu, nullptr);
    // The classifier stays dense with FP8 layers, so both formats are timed there. FP8 past the
    // GEMV: cuBLASLt from 16, 64 or 256 tokens (the budget is 512), or never (0).
    EXPECT_TRUE(sizes.contains(gpu->dense_gemv_max_tokens())) << gpu->dense_gemv_max_tokens();
    if (fp8) {
      EXPECT_TRUE(sizes.contains(gpu->fp8_gemv_max_tokens())) << gpu->fp8_gemv_max_tokens();
      EXPECT_TRUE(std::set<int>({0, 16, 64, 256}).contains(gpu->fp8_cublaslt_min_tokens()))
          << gpu->fp8_cublaslt_min_tokens();
      // Split-K on our tensor cores: up to 16, 64 or 256 tokens, or never; none without wgmma.
      EXPECT_TRUE(std::set<int>({0, 16, 64, 256}).contains(gpu->split_k_max_tokens()))
          << gpu->split_k_max_tokens();
      if (!WgmmaAvailable()) {
        EXPECT_EQ(gpu->split_k_max_tokens(), 0);
      }
    } else {
      EXPECT_EQ(gpu->fp8_gemv_max_tokens(), 0) << "no FP8 matrix: nothing to time";
      EXPECT_EQ(gpu->fp8_cublaslt_min_tokens(), 0) << "no FP8 matrix: nothing to time";
      EXPECT_EQ(gpu->split_k_max_tokens(), 0) << "no part on tensor cores: nothing to split";
    }
    std::printf("auto GEMV tokens: dense %d, FP8 %d; FP8 cuBLASLt from %d; split-K up to %d\n",
                gpu->dense_gemv_max_tokens(), gpu->fp8_gemv_max_tokens(),
                gpu->fp8_cublaslt_min_tokens(), gpu->split_k_max_tokens());
    auto cpu = MakeCpu(model, 16, 64);
    CompareRagged(*cpu, *gpu, rng, 4, kEmulated ? 20 : 60, 9, fp8 ? 0.15 : 3e-2);
  }
  for (const int bad : {-2, 9}) {  // kQuantGemvMaxTokens is 8
    CudaBackendOptions o = CudaOptions(16, 64, DType::kBf16);
    o.dense_gemv_max_tokens = bad;
    auto refused = CudaBackend::Create(model, o);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("dense GEMV"), std::string::npos) << refused.status();
    o.dense_gemv_max_tokens = 0;
    o.fp8_gemv_max_tokens = bad;
    refused = CudaBackend::Create(model, o);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("FP8 GEMV"), std::string::npos) << refused.status();
  }
  // A model with no kept blocks: the block products' choice has nothing to time or decode.
  for (const bool forced : {false, true}) {
    CudaBackendOptions o = CudaOptions(16, 64, DType::kBf16);
    o.quant_decode_then_cublas = forced;
    o.quant_cublas_min_tokens = forced ? 0 : kGemvAuto;
    auto gpu = MakeCuda(model, o);
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(gpu->quant_cublas_min_tokens(), 0);
  }
  CudaBackendOptions o = CudaOptions(16, 64, DType::kBf16);
  o.quant_cublas_min_tokens = -2;
  auto refused = CudaBackend::Create(model, o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("quant_cublas_min_tokens"), std::string::npos)
      << refused.status();
  for (const auto& [max_tokens, splits] : {std::pair{-2, 0}, std::pair{16, kMaxKSplits + 1}}) {
    o = CudaOptions(16, 64, DType::kBf16);
    o.split_k_max_tokens = max_tokens;
    o.forced_k_splits = splits;
    refused = CudaBackend::Create(model, o);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("split_k_max_tokens"), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace pagoda::worker::cuda
