// End-to-end: the end-of-turn and end-of-message tokens of the GGUF metadata
// (tokenizer.ggml.eot_token_id, eom_token_id) end a generation with FINISH_REASON_EOS, as EOS
// does, through the real scheduler and worker; GetModelInfo lists them; ignore_eos covers them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "modelgen/random_model.h"
#include "modelgen/synthetic_vocab.h"
#include "tests/e2e/cluster.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

// A small random model; `extra_key` (e.g. tokenizer.ggml.eot_token_id) = `extra_id` when set.
std::string WriteModel(const std::string& path, const std::string& extra_key, int32_t extra_id) {
  modelgen::RandomModelOptions o;
  o.n_layers = 2;
  o.dim = 64;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.ffn_dim = 128;
  o.vocab_size = 600;
  o.context_length = 256;
  o.seed = 11;
  o.write_tokenizer = [&](modelgen::GgufWriter& w) {
    auto vocab = modelgen::BuildSyntheticVocab(o.vocab_size, o.seed);
    EXPECT_OK(vocab);
    modelgen::AddSyntheticTokenizer(w, *vocab);
    if (!extra_key.empty()) w.AddUint32(extra_key, static_cast<uint32_t>(extra_id));
  };
  absl::Status s = modelgen::WriteRandomModel(o, path);
  EXPECT_OK(s);
  return path;
}

v1::GenerateRequest Greedy(bool ignore_eos) {
  v1::GenerateRequest r;
  for (int32_t id : {1, 40, 77, 123, 300}) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(8);
  r.set_ignore_eos(ignore_eos);
  return r;
}

std::unique_ptr<Cluster> Start(const std::string& model) {
  ClusterOptions options;
  options.model = model;
  std::string error;
  auto cluster = Cluster::Start(options, &error);
  EXPECT_NE(cluster, nullptr) << error;
  return cluster;
}

TEST(EndOfGenerationTest, EotAndEomFinishWithEos) {
  const std::string dir = MakeTempDir("end_of_generation");
  std::vector<int32_t> reference;
  {
    auto cluster = Start(WriteModel(dir + "/plain.gguf", "", 0));
    ASSERT_NE(cluster, nullptr);
    Generation g = cluster->Generate(Greedy(true));
    ASSERT_OK(g.status);
    reference = g.tokens;
  }
  ASSERT_EQ(reference.size(), 8u);
  // The first greedy token not seen before it, past the first: generation must stop there.
  size_t k = 1;
  while (k < reference.size() && std::find(reference.begin(), reference.begin() + k,
                                           reference[k]) != reference.begin() + k) {
    ++k;
  }
  ASSERT_LT(k, reference.size()) << "the random model repeats one token";
  const int32_t end = reference[k];
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    SCOPED_TRACE(key);
    auto cluster = Start(WriteModel(dir + "/end.gguf", key, end));
    ASSERT_NE(cluster, nullptr);
    Generation g = cluster->Generate(Greedy(false));
    ASSERT_OK(g.status);
    EXPECT_EQ(g.tokens, std::vector<int32_t>(reference.begin(), reference.begin() + k));
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_EOS);
    g = cluster->Generate(Greedy(true));
    EXPECT_EQ(g.tokens, reference) << "ignore_eos covers EOT and EOM";
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_OK(cluster->stub().GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info));
    EXPECT_EQ(std::string(key).find("eot") != std::string::npos ? info.eot_token_id()
                                                                : info.eom_token_id(),
              end);
    EXPECT_EQ(std::vector<int32_t>(info.end_of_generation_token_ids().begin(),
                                   info.end_of_generation_token_ids().end()),
              (std::vector<int32_t>{modelgen::kSyntheticEosId, end}));
  }
}

}  // namespace
}  // namespace pagoda::testing
