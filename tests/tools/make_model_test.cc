// pagoda-make-model end to end: the binary writes a model that loads and runs.
#include <cstdlib>
#include <filesystem>

#include "common/gguf_reader.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {
namespace {

std::string Tool() { return pagoda::testing::BinDir() + "/pagoda-make-model"; }

int RunTool(const std::string& args) {
  const std::string cmd = Tool() + " " + args + " > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(MakeModel, WritesALoadableModel) {
  if (!std::filesystem::exists(Tool())) GTEST_SKIP() << Tool() << " not built";
  const std::string path = ::testing::TempDir() + "/pagoda_make_model_test.gguf";
  ASSERT_EQ(RunTool("--output " + path +
                    " --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --vocab 400 "
                    "--context 128 --seed 3 --dtype f16 --name tiny"),
            0);
  auto file = common::GgufFile::Open(path);
  ASSERT_OK(file);
  EXPECT_EQ((*file)->GetString("general.name"), "tiny");
  EXPECT_EQ((*file)->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ((*file)->GetStringArray("tokenizer.ggml.tokens")->size(), 400u);
  EXPECT_EQ((*file)->GetBool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight")->type, common::GgmlType::F16);
  auto model = LlamaModel::Load(path);
  ASSERT_OK(model);
  EXPECT_EQ((*model)->config().head_dim, 16);
  auto backend = CpuBackend::Create(*model, {16, 8, 0});
  ASSERT_OK(backend);
  std::vector<int32_t> tokens = {1, 300, 301, 302}, pages = {5};
  std::vector<float> logits;
  SeqInput in{tokens, 0, pages, true};
  ASSERT_OK((*backend)->Forward({&in, 1}, &logits));
  ASSERT_EQ(logits.size(), 400u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // Same flags, same bytes (fingerprint).
  const std::string again = ::testing::TempDir() + "/pagoda_make_model_test2.gguf";
  ASSERT_EQ(RunTool("--output " + again +
                    " --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --vocab 400 "
                    "--context 128 --seed 3 --dtype f16 --name tiny"),
            0);
  EXPECT_EQ(common::GgufFile::Open(again).value()->Fingerprint(), (*file)->Fingerprint());
  std::filesystem::remove(path);
  std::filesystem::remove(again);
}

// Quantized mixes, of an architecture with its own tensors (qwen3's Q/K norms stay F32).
TEST(MakeModel, WritesQuantizedMixes) {
  if (!std::filesystem::exists(Tool())) GTEST_SKIP() << Tool() << " not built";
  const std::string path = ::testing::TempDir() + "/pagoda_make_model_q4km.gguf";
  ASSERT_EQ(RunTool("--output " + path +
                    " --layers 8 --dim 256 --heads 4 --kv-heads 2 --ffn-dim 512 --vocab 320 "
                    "--context 128 --dtype q4_k_m --arch qwen3"),
            0);
  auto model = LlamaModel::Load(path);
  ASSERT_OK(model);
  EXPECT_EQ((*model)->config().architecture, "qwen3");
  EXPECT_EQ((*model)->layer(5).arch.q_norm.size(), 64u);
  EXPECT_EQ((*model)->layer(5).arch.k_norm.size(), 64u);
  using common::GgmlType;
  EXPECT_EQ((*model)->token_embedding().type, GgmlType::Q4_K);
  EXPECT_EQ((*model)->output().type, GgmlType::Q6_K);
  EXPECT_EQ((*model)->layer(0).wq.type, GgmlType::Q4_K);
  EXPECT_EQ((*model)->layer(0).wv.type, GgmlType::Q6_K);  // first eighth
  EXPECT_EQ((*model)->layer(1).wv.type, GgmlType::Q4_K);
  EXPECT_EQ((*model)->layer(3).w_down.type, GgmlType::Q6_K);  // every third between
  EXPECT_EQ((*model)->layer(7).w_down.type, GgmlType::Q6_K);  // last eighth
  EXPECT_EQ((*model)->layer(7).w_up.type, GgmlType::Q4_K);
  auto backend = CpuBackend::Create(*model, {16, 8, 0});
  ASSERT_OK(backend);
  std::vector<int32_t> tokens = {1, 200, 201, 202}, pages = {3};
  std::vector<float> logits;
  SeqInput in{tokens, 0, pages, true};
  ASSERT_OK((*backend)->Forward({&in, 1}, &logits));
  ASSERT_EQ(logits.size(), 320u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  std::filesystem::remove(path);
}

TEST(MakeModel, RejectsBadFlags) {
  if (!std::filesystem::exists(Tool())) GTEST_SKIP() << Tool() << " not built";
  const std::string out = " --output " + ::testing::TempDir() + "/pagoda_bad.gguf";
  EXPECT_NE(RunTool("--dim 64"), 0);  // no --output
  EXPECT_NE(RunTool(out + " --dim 60 --heads 8"), 0);
  EXPECT_NE(RunTool(out + " --heads 8 --kv-heads 3"), 0);
  EXPECT_NE(RunTool(out + " --vocab 100"), 0);
  EXPECT_NE(RunTool(out + " --dtype q3_k"), 0);                  // not a type it writes
  EXPECT_NE(RunTool(out + " --dtype q4_k --ffn-dim 688"), 0);    // rows not whole K blocks
  EXPECT_NE(RunTool(out + " --dtype q8_0_m --ffn-dim 512"), 0);  // no such mix
  EXPECT_NE(RunTool(out + " --layers 0"), 0);
}

}  // namespace
}  // namespace pagoda::worker
