#include "common/model_config.h"

#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/random_model.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::common {
namespace {

using ::pagoda::modelgen::BuildRandomModel;
using ::pagoda::modelgen::GgufWriter;
using ::pagoda::modelgen::RandomModelOptions;

absl::StatusOr<ModelConfig> ConfigOf(const GgufWriter& w) {
  auto f = GgufFile::FromBytes(w.Serialize());
  if (!f.ok()) return f.status();
  return ReadModelConfig(**f);
}

GgufWriter MinimalLlama() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.context_length", 128);
  w.AddUint32("llama.embedding_length", 64);
  w.AddUint32("llama.block_count", 2);
  w.AddUint32("llama.feed_forward_length", 100);
  w.AddUint32("llama.attention.head_count", 8);
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  return w;
}

TEST(ModelConfig, ReadsTrainedModel) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "stories260K-f32.gguf");
  auto f = GgufFile::Open(*path);
  ASSERT_OK(f);
  auto c = ReadModelConfig(**f);
  ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->dim, 64);
  EXPECT_EQ(c->n_layers, 5);
  EXPECT_EQ(c->n_heads, 8);
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->ffn_dim, 172);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->context_length, 512);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_base, 10000.0f);
  EXPECT_NE(DescribeModelConfig(*c).find("5 layers"), std::string::npos);
}

TEST(ModelConfig, DefaultsAndVocabFromTokens) {
  auto c = ConfigOf(MinimalLlama());
  ASSERT_OK(c);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->vocab_size, 3);
  EXPECT_FLOAT_EQ(c->rope_base, 10000.0f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
}

void ExpectError(const GgufWriter& w, const std::string& needle) {
  auto c = ConfigOf(w);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos) << c.status();
}

TEST(ModelConfig, RejectsOtherArchitectures) {
  GgufWriter w = MinimalLlama();
  w.AddString("general.architecture", "gemma");
  ExpectError(w, "\"gemma\"; supported: \"llama\", \"qwen2\", \"qwen3\"");
  // qwen2's keys carry its own prefix: llama.* keys do not describe it.
  w = MinimalLlama();
  w.AddString("general.architecture", "qwen2");
  ExpectError(w, "lacks required key 'qwen2.context_length'");
}

TEST(ModelConfig, ReadsLlama31RopeScaling) {
  GgufWriter w = MinimalLlama();
  w.AddString("llama.rope.scaling.type", "llama3");
  w.AddFloat32("llama.rope.scaling.factor", 8.0f);
  w.AddUint32("llama.rope.scaling.original_context_length", 8192);
  auto file = GgufFile::FromBytes(w.Serialize());
  ASSERT_OK(file);
  auto c = ReadModelConfig(**file);
  ASSERT_OK(c);
  EXPECT_EQ(c->rope_scaling_factor, 8.0f);
  EXPECT_EQ(c->rope_low_freq_factor, 1.0f);
  EXPECT_EQ(c->rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_original_context, 8192);
  w.AddString("llama.rope.scaling.type", "yarn");
  ExpectError(w, "'llama.rope.scaling.type' must be \"llama3\" or \"none\"");
  w.AddString("llama.rope.scaling.type", "llama3");
  w.AddFloat32("llama.rope.scaling.low_freq_factor", 9.0f);
  ExpectError(w, "high_freq_factor' must exceed low_freq_factor");
  w.AddFloat32("llama.rope.scaling.low_freq_factor", 1.0f);
  w.AddFloat32("llama.rope.scaling.factor", -1.0f);
  ExpectError(w, "'llama.rope.scaling.factor' must be a positive finite float");
}

TEST(ModelConfig, RejectsBadShapes) {
  GgufWriter w = MinimalLlama();
  w.AddUint32("llama.attention.head_count", 7);
  ExpectError(w, "not divisible by head_count 7");
  w = MinimalLlama();
  w.AddUint32("llama.attention.head_count_kv", 3);
  ExpectError(w, "not divisible by head_count_kv 3");
  w = MinimalLlama();
  w.AddUint32("llama.block_count", 0);
  ExpectError(w, "llama.block_count' = 0");
  w = MinimalLlama();
  w.AddString("llama.context_length", "many");
  ExpectError(w, "must be an integer, found string");
  w = MinimalLlama();
  w.AddUint32("llama.embedding_length", 4096);
  w.AddUint32("llama.attention.head_count", 8);
  ExpectError(w, "head_dim 512 exceeds");
  w = MinimalLlama();
  w.AddUint32("llama.rope.dimension_count", 4);
  ExpectError(w, "partial rotary");
  for (double bad : {1e300, 1e-300, -1.0}) {
    w = MinimalLlama();
    w.AddFloat64("llama.rope.freq_base", bad);  // finite as f64, not as a positive float
    ExpectError(w, "'llama.rope.freq_base' must be a positive finite float");
  }
  GgufWriter empty;
  empty.AddString("general.architecture", "llama");
  ExpectError(empty, "lacks required key 'llama.context_length'");
}

TEST(ModelConfig, RandomModelRoundTrips) {
  RandomModelOptions o;
  o.n_layers = 1;
  o.dim = 32;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.ffn_dim = 40;
  o.vocab_size = 300;
  o.context_length = 64;
  auto w = BuildRandomModel(o);
  ASSERT_OK(w);
  auto c = ConfigOf(*w);
  ASSERT_OK(c);
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->n_kv_heads, 2);
  o.n_kv_heads = 3;
  EXPECT_FALSE(BuildRandomModel(o).ok());
}

}  // namespace
}  // namespace pagoda::common
