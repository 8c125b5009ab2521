// ReadGgufVocab on well-formed and hostile tokenizer metadata: every malformed array or id is an
// InvalidArgument error naming the key and the limit, found before any array is materialized.
#include "scheduler/text/gguf_vocab.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/synthetic_vocab.h"
#include "scheduler/text/bpe_encoder.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::text {
namespace {

using ::pagoda::common::GgufFile;
using ::pagoda::modelgen::BuildSyntheticVocab;
using ::pagoda::modelgen::GgufWriter;

// A llama tokenizer of the 300-piece synthetic vocabulary; `types` false leaves token_type out.
GgufWriter VocabWriter(bool types = true) {
  auto v = BuildSyntheticVocab(300, 1);
  EXPECT_OK(v);
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", v->tokens);
  w.AddFloat32Array("tokenizer.ggml.scores", v->scores);
  if (types) w.AddInt32Array("tokenizer.ggml.token_type", v->token_types);
  return w;
}

absl::StatusOr<Vocab> Read(const std::string& image) {
  auto file = GgufFile::FromBytes(image);
  if (!file.ok()) return file.status();
  return ReadGgufVocab(**file);
}

void ExpectInvalid(const GgufWriter& w, const std::string& needle) {
  absl::StatusOr<Vocab> v = Read(w.Serialize());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find(needle), std::string::npos) << v.status();
}

TEST(GgufVocab, ReadsWellFormedVocabularies) {
  absl::StatusOr<Vocab> v = Read(VocabWriter().Serialize());
  ASSERT_OK(v);
  EXPECT_EQ(v->pieces.size(), 300u);
  EXPECT_EQ(v->types[1], TokenType::kControl);
  EXPECT_EQ(v->types[3], TokenType::kByte);
  EXPECT_EQ(v->bos_id, 1);
  // Without token types, <0xHH> pieces are bytes and the rest normal.
  v = Read(VocabWriter(/*types=*/false).Serialize());
  ASSERT_OK(v);
  EXPECT_EQ(v->types[3], TokenType::kByte);
  EXPECT_EQ(v->types[1], TokenType::kNormal);
  GgufWriter w = VocabWriter();
  w.AddInt32("tokenizer.ggml.unknown_token_id", -1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 5);
  v = Read(w.Serialize());
  ASSERT_OK(v);
  EXPECT_EQ(v->unk_id, -1);
  EXPECT_EQ(v->eos_id, 5);
  EXPECT_OK(LoadGgufTokenizer(**GgufFile::FromBytes(VocabWriter().Serialize())));
}

TEST(GgufVocab, RejectsArraysThatDisagreeWithTheTokens) {
  // A short token_type array used to be padded with "normal" silently, and a scores array of
  // the wrong type replaced by zeros.
  GgufWriter w = VocabWriter();
  const int32_t types[] = {2, 3, 3};
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  ExpectInvalid(w,
                "tokenizer.ggml.token_type must be an array with one entry per token "
                "(300 tokens), found 3 entries");
  w = VocabWriter();
  w.AddUint8("tokenizer.ggml.scores", 1);
  ExpectInvalid(w, "tokenizer.ggml.scores must be an array with one entry per token");
  w = VocabWriter();
  w.AddStringArray("tokenizer.ggml.scores", std::vector<std::string>(300));
  ExpectInvalid(w, "tokenizer.ggml.scores must be an array of floats");
  w = VocabWriter();
  w.AddFloat32Array("tokenizer.ggml.tokens", std::vector<float>(300));
  ExpectInvalid(w, "tokenizer.ggml.tokens must be an array of strings");
}

TEST(GgufVocab, RejectsSpecialIdsOutsideInt32) {
  // 2^32 + 1 used to wrap silently to id 1; -1 means none (as llama.cpp writes), below is bad.
  GgufWriter w = VocabWriter();
  w.AddUint64("tokenizer.ggml.bos_token_id", (uint64_t{1} << 32) + 1);
  ExpectInvalid(w, "tokenizer.ggml.bos_token_id must be an integer in [0, 2147483647]");
  w = VocabWriter();
  w.AddInt32("tokenizer.ggml.eos_token_id", -2);
  ExpectInvalid(w, "tokenizer.ggml.eos_token_id must be an integer");
  w = VocabWriter();
  w.AddInt64("tokenizer.ggml.eot_token_id", int64_t{-1} << 40);
  ExpectInvalid(w, "tokenizer.ggml.eot_token_id must be an integer");
  w = VocabWriter();
  w.AddString("tokenizer.ggml.unknown_token_id", "0");
  ExpectInvalid(w, "or -1 for none");
}

TEST(GgufVocab, RejectsHugeVocabulariesBeforeMaterializingThem) {
  // A hostile file of 8-byte empty strings: 32 MiB on disk would have become 4M std::strings
  // (128 MiB) plus the tokenizer's tables, each a multiple of the file.
  const uint64_t n = kMaxGgufVocabSize + 1;
  std::string image = "GGUF";
  auto put = [&image](auto v) { image.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint32_t{3});
  put(uint64_t{0});  // tensors
  put(uint64_t{2});  // metadata
  const std::string model_key = "tokenizer.ggml.model", tokens_key = "tokenizer.ggml.tokens";
  put(uint64_t{model_key.size()});
  image += model_key;
  put(uint32_t{8});  // string
  put(uint64_t{5});
  image += "llama";
  put(uint64_t{tokens_key.size()});
  image += tokens_key;
  put(uint32_t{9});  // array
  put(uint32_t{8});  // of strings
  put(n);
  image.append(n * 8, '\0');  // n empty strings
  absl::StatusOr<Vocab> v = Read(image);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("tokenizer.ggml.tokens has 4194305 entries; the limit is "
                                      "4194304"),
            std::string::npos)
      << v.status();
}

// A byte-level BPE tokenizer: the 256 byte pieces, one merge "a b" -> "ab", and <|eot|>.
GgufWriter BpeWriter() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteLevelEncode(std::string(1, char(b))));
  tokens.push_back("ab");
  tokens.push_back("<|eot|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  w.AddUint32("tokenizer.ggml.eos_token_id", 257);
  w.AddUint32("tokenizer.ggml.eot_token_id", 257);
  w.AddInt32("tokenizer.ggml.eom_token_id", -1);
  w.AddUint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFF);  // llama.cpp's "none"
  w.AddString("tokenizer.chat_template", "{{ messages }}");
  return w;
}

TEST(GgufVocab, ReadsByteLevelBpe) {
  absl::StatusOr<Vocab> v = Read(BpeWriter().Serialize());
  ASSERT_OK(v);
  EXPECT_EQ(v->model, TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(v->pre, PreTokenizerKind::kLlama3);
  EXPECT_EQ(v->merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(v->bos_id, -1);  // no SentencePiece defaults
  EXPECT_EQ(v->unk_id, -1);
  EXPECT_EQ(v->eot_id, 257);
  EXPECT_EQ(v->eom_id, -1);
  EXPECT_EQ(v->pad_id, -1);
  EXPECT_FALSE(v->add_bos);
  EXPECT_EQ(v->chat_template, "{{ messages }}");
  auto tokenizer = LoadGgufTokenizer(**GgufFile::FromBytes(BpeWriter().Serialize()));
  ASSERT_OK(tokenizer);
  EXPECT_EQ(tokenizer->Encode("abc", true), (std::vector<int32_t>{256, 'c'}));
}

TEST(GgufVocab, RefusesHostileByteLevelMetadata) {
  GgufWriter w = BpeWriter();
  w.AddString("tokenizer.ggml.pre", "falcon");
  ExpectInvalid(w,
                "tokenizer.ggml.pre is \"falcon\", a pre-tokenizer Pagoda does not implement; "
                "supported: gpt2");
  w = BpeWriter();
  w.AddInt32Array("tokenizer.ggml.merges", std::vector<int32_t>{1, 2});
  ExpectInvalid(w, "tokenizer.ggml.merges must be an array of strings");
  w = BpeWriter();
  w.AddString("tokenizer.ggml.merges", "a b");
  ExpectInvalid(w, "needs the tokenizer.ggml.merges array");
  w = BpeWriter();
  w.AddString("tokenizer.ggml.add_bos_token", "yes");
  ExpectInvalid(w, "tokenizer.ggml.add_bos_token must be a bool");
  w = BpeWriter();
  w.AddInt64("tokenizer.ggml.eom_token_id", int64_t{1} << 33);
  ExpectInvalid(w, "tokenizer.ggml.eom_token_id must be an integer in [0, 2147483647]");
  w = BpeWriter();
  w.AddString("tokenizer.ggml.model", "rwkv");
  ExpectInvalid(w, "tokenizer.ggml.model is \"rwkv\"; supported: \"llama\"");
  // What only the tokenizer can check: merges naming unknown pieces, ids out of range.
  w = BpeWriter();
  w.AddStringArray("tokenizer.ggml.merges", {"a b", "ab q7"});
  auto file = GgufFile::FromBytes(w.Serialize());
  ASSERT_OK(file);
  EXPECT_NE(LoadGgufTokenizer(**file).status().message().find("tokenizer.ggml.merges[1]"),
            std::string::npos);
  w = BpeWriter();
  w.AddUint32("tokenizer.ggml.eot_token_id", 5000);
  file = GgufFile::FromBytes(w.Serialize());
  ASSERT_OK(file);
  EXPECT_NE(LoadGgufTokenizer(**file).status().message().find("EOT id 5000 is outside"),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda::scheduler::text
