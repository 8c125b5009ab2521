// The quantized GGUF files in ../shared/models/quant (written by llama.cpp, not by Pagoda):
// dequantized values equal llama.cpp's own for every tensor, the model keeps the stored bytes,
// and the forward pass's log-probabilities agree with llama.cpp's server on every kernel path.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/llama_cpp_top5.h"
#include "tests/worker/param_printers.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/llama_model.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker {
namespace {

using testing::kMaxLogProbGap;
using testing::kMeanLogProbGap;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// |a - b| within float32 rounding of values of magnitude `scale`.
void ExpectFloatClose(double expected, double actual, double scale, const std::string& what) {
  EXPECT_NEAR(expected, actual, 4e-7 * std::max(1.0, scale)) << what;
}

TEST(QuantizedModel, DequantizationMatchesLlamaCpp) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(ref_path, "quant/dequant_reference.json");
  const nlohmann::json ref = ReadJson(*ref_path);
  int tensors = 0;
  for (const auto& [file_name, entries] : ref["files"].items()) {
    SCOPED_TRACE(file_name);
    auto path = testing::TestModelFile("quant/" + file_name);
    ASSERT_TRUE(path.has_value());
    auto file = common::GgufFile::Open(*path);
    ASSERT_OK(file);
    for (const auto& [name, r] : entries.items()) {
      SCOPED_TRACE(name);
      const common::GgufTensor* t = (*file)->FindTensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(common::GgmlTypeName(t->type), r["ggml_type"].get<std::string>());
      auto m = CopyWeightMatrix(*t);
      ASSERT_OK(m);
      const std::vector<float> v = m->ToFloat();
      ASSERT_EQ(v.size(), r["count"].get<size_t>());
      double sum = 0, sum_sq = 0, max_abs = 0;
      for (float x : v) {
        sum += x;
        sum_sq += static_cast<double>(x) * x;
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
      }
      EXPECT_NEAR(sum, r["sum"].get<double>(), 1e-6 * (1 + sum_sq));
      EXPECT_NEAR(sum_sq, r["sum_sq"].get<double>(), 1e-6 * (1 + sum_sq));
      const auto& first = r["first_32"];
      for (size_t i = 0; i < first.size(); ++i) {
        ExpectFloatClose(first[i].get<double>(), v[i], max_abs, "first_32[" + std::to_string(i));
      }
      for (const auto& [index, value] : r["strided_64"].items()) {
        ExpectFloatClose(value.get<double>(), v[std::stoul(index)], max_abs, "index " + index);
      }
      ++tensors;
    }
  }
  EXPECT_GT(tensors, 5 * 18);
}

TEST(QuantizedModel, KeepsStoredBytes) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "quant/tiny-Q4_K_M.gguf");
  auto file = common::GgufFile::Open(*path);
  ASSERT_OK(file);
  size_t file_bytes = 0;
  for (const common::GgufTensor& t : (*file)->tensors()) file_bytes += t.nbytes;
  auto model = LlamaModel::Load(**file);
  ASSERT_OK(model);
  EXPECT_EQ((*model)->weight_bytes(), file_bytes);
  EXPECT_EQ((*model)->layer(0).wq.type, common::GgmlType::Q4_K);
  EXPECT_EQ((*model)->output().type, common::GgmlType::Q6_K);
}

// The CPU backend on one kernel table, with 8-bit or float activations, over one llama.cpp run.
void CompareWithLlamaCpp(const std::shared_ptr<const LlamaModel>& model, cpu::CpuIsa isa,
                         bool quantize_activations, const nlohmann::json& run,
                         testing::Gaps* gaps) {
  CpuBackendOptions options;
  options.num_pages = 8;
  options.num_threads = 2;
  options.kernels = cpu::CpuIsaName(isa);
  options.quantize_activations = quantize_activations;
  auto backend = CpuBackend::Create(model, options);
  ASSERT_OK(backend);
  testing::CompareWithLlamaCpp(**backend, run, gaps);
}

// One instance per kernel table and activation type; a table the CPU lacks is skipped.
class KernelPathLogProbs : public ::testing::TestWithParam<std::tuple<cpu::CpuIsa, bool>> {};

TEST_P(KernelPathLogProbs, MatchLlamaCpp) {
  const auto [isa, quantize_activations] = GetParam();
  if (!cpu::IsaSupported(isa)) {
    GTEST_SKIP() << "this CPU lacks the " << cpu::CpuIsaName(isa) << " kernels";
  }
  PAGODA_SKIP_WITHOUT_TEST_MODELS(top5_path, "quant/llama_cpp_top5.json");
  const nlohmann::json top5 = ReadJson(*top5_path);
  const std::string path = cpu::CpuIsaName(isa) + (quantize_activations ? " 8-bit x" : " float x");
  for (const auto& [file_name, runs] : top5["files"].items()) {
    SCOPED_TRACE(file_name);
    auto model = LlamaModel::Load(*testing::TestModelFile("quant/" + file_name));
    ASSERT_OK(model);
    testing::Gaps gaps;
    for (const nlohmann::json& run : runs) {
      CompareWithLlamaCpp(*model, isa, quantize_activations, run, &gaps);
    }
    ASSERT_GT(gaps.count, 5 * 4 * 5);  // most steps of the four runs compared
    const double mean = gaps.sum / gaps.count;
    EXPECT_LT(gaps.max, kMaxLogProbGap);
    EXPECT_LT(mean, kMeanLogProbGap);
    std::printf("%-18s %-19s |log p - llama.cpp|: max %.4f, mean %.4f over %d values\n",
                file_name.c_str(), path.c_str(), gaps.max, mean, gaps.count);
  }
}

INSTANTIATE_TEST_SUITE_P(
    QuantizedModel, KernelPathLogProbs,
    ::testing::Combine(::testing::Values(cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2,
                                         cpu::CpuIsa::kAvx512, cpu::CpuIsa::kAvx512Vnni,
                                         cpu::CpuIsa::kAvx512Amx),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<KernelPathLogProbs::ParamType>& info) {
      return cpu::CpuIsaName(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_Int8Activations" : "_FloatActivations");
    });

}  // namespace
}  // namespace pagoda::worker
