#include "worker/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/random_model.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/model_fixtures.h"
#include "worker/backend/cpu/cpu_backend.h"

namespace pagoda::worker {
namespace {

TEST(LlamaModel, LoadsTrainedModel) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "stories260K-f32.gguf");
  auto model = LlamaModel::Load(*path);
  ASSERT_OK(model);
  const common::ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.ffn_dim, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.context_length, 512);
  EXPECT_FALSE((*model)->tied_output());
  EXPECT_EQ((*model)->fingerprint().size(), 16u);
  EXPECT_EQ((*model)->layer(4).wq.ToFloat().size(), 64u * 64u);
  EXPECT_EQ((*model)->layer(4).wk.rows, 32);
  EXPECT_EQ((*model)->layer(4).wk.cols, 64);
  EXPECT_EQ((*model)->layer(0).w_down.ToFloat().size(), 172u * 64u);
  EXPECT_GT((*model)->weight_bytes(), 900000u);
}

modelgen::RandomModelOptions Tiny() { return testing::SmallRandomOptions(32, 4, 2, 1, 9); }

absl::StatusOr<std::shared_ptr<const LlamaModel>> LoadWriter(const modelgen::GgufWriter& w) {
  auto f = common::GgufFile::FromBytes(w.Serialize());
  if (!f.ok()) return f.status();
  return LlamaModel::Load(**f);
}

void ExpectLoadError(const modelgen::GgufWriter& w, const std::string& needle) {
  auto m = LoadWriter(w);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find(needle), std::string::npos) << m.status();
}

TEST(LlamaModel, TiedOutputWhenAbsent) {
  modelgen::RandomModelOptions o = Tiny();
  o.tie_output = true;
  auto w = modelgen::BuildRandomModel(o);
  ASSERT_OK(w);
  auto m = LoadWriter(*w);
  ASSERT_OK(m);
  EXPECT_TRUE((*m)->tied_output());
  EXPECT_EQ(&(*m)->output(), &(*m)->token_embedding());
}

TEST(LlamaModel, RejectsUnsupportedTensorTypes) {
  auto w = modelgen::BuildRandomModel(Tiny());
  ASSERT_OK(w);
  // Replace a layer tensor with an IQ4_NL one (a real ggml type the backend does not compute).
  modelgen::GgufWriter q = modelgen::GgufWriter();
  auto base = common::GgufFile::FromBytes(w->Serialize());
  ASSERT_OK(base);
  q.AddString("general.architecture", "llama");
  for (const char* key : {"llama.context_length", "llama.embedding_length", "llama.block_count",
                          "llama.feed_forward_length", "llama.attention.head_count",
                          "llama.attention.head_count_kv"}) {
    q.AddUint32(key, static_cast<uint32_t>(*(*base)->GetUint(key)));
  }
  for (const common::GgufTensor& t : (*base)->tensors()) {
    if (t.name == "blk.0.attn_q.weight") {
      const size_t blocks = static_cast<size_t>(t.num_elements() / 32);
      std::vector<std::byte> bytes(blocks * 18);
      ASSERT_OK(q.AddTensor(t.name, t.dims, common::GgmlType::IQ4_NL, bytes));
    } else {
      ASSERT_OK(q.AddTensor(t.name, t.dims, t.type, {t.data, t.nbytes}));
    }
  }
  ExpectLoadError(q,
                  "tensor 'blk.0.attn_q.weight' has type IQ4_NL; supported: F32, F16, BF16, "
                  "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K");
}

TEST(LlamaModel, RejectsMissingAndMisshapenTensors) {
  auto w = modelgen::BuildRandomModel(Tiny());
  ASSERT_OK(w);
  auto base = common::GgufFile::FromBytes(w->Serialize());
  ASSERT_OK(base);
  auto rebuild = [&](const std::string& skip, bool misshape) {
    modelgen::GgufWriter q;
    for (const std::string& key : (*base)->Keys()) {
      if (auto u = (*base)->GetUint(key);
          u && (*base)->GetType(key) == common::GgufValueType::kUint32) {
        q.AddUint32(key, static_cast<uint32_t>(*u));
      }
    }
    q.AddString("general.architecture", "llama");
    for (const common::GgufTensor& t : (*base)->tensors()) {
      if (t.name != skip) {
        EXPECT_OK(q.AddTensor(t.name, t.dims, t.type, {t.data, t.nbytes}));
      } else if (misshape) {
        std::vector<int64_t> dims = {t.dims[1], t.dims[0]};
        EXPECT_OK(q.AddTensor(t.name, dims, t.type, {t.data, t.nbytes}));
      }
    }
    return q;
  };
  ExpectLoadError(rebuild("blk.0.ffn_up.weight", false), "missing tensor 'blk.0.ffn_up.weight'");
  ExpectLoadError(rebuild("blk.0.attn_k.weight", true),
                  "tensor 'blk.0.attn_k.weight' has dims [16, 32], expected [32, 16]");
}

TEST(LlamaModel, RejectsNonLlamaArchitecture) {
  auto w = modelgen::BuildRandomModel(Tiny());
  ASSERT_OK(w);
  w->AddString("general.architecture", "gemma");
  ExpectLoadError(*w, "\"gemma\"; supported: \"llama\", \"qwen2\", \"qwen3\"");
}

// F16 and BF16 copies of the same random weights give near-identical logits.
TEST(LlamaModel, HalfPrecisionModelsMatchF32) {
  modelgen::RandomModelOptions o = testing::SmallRandomOptions(64, 4, 2, 2, 21);
  std::vector<std::vector<float>> logits;
  for (common::GgmlType t :
       {common::GgmlType::F32, common::GgmlType::F16, common::GgmlType::BF16}) {
    o.dtype = t;
    auto model = testing::RandomModel(o);
    ASSERT_NE(model, nullptr);
    auto backend = CpuBackend::Create(model, {16, 4, 1});
    ASSERT_OK(backend);
    std::vector<int32_t> tokens = {1, 50, 60, 70, 80, 90, 100}, pages = {0};
    SeqInput in{tokens, 0, pages, true};
    logits.emplace_back();
    ASSERT_OK((*backend)->Forward({&in, 1}, &logits.back()));
  }
  float max_abs = 0;
  for (float v : logits[0]) max_abs = std::max(max_abs, std::abs(v));
  for (int k : {1, 2}) {
    float max_diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      max_diff = std::max(max_diff, std::abs(logits[k][i] - logits[0][i]));
    }
    EXPECT_LE(max_diff, (k == 1 ? 0.01f : 0.05f) * max_abs) << (k == 1 ? "F16" : "BF16");
    EXPECT_GT(max_diff, 0.0f);
  }
}

}  // namespace
}  // namespace pagoda::worker
