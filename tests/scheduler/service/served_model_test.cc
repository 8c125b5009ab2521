// GetModelInfo's tokenizer fields: end-of-generation ids and special tokens of a byte-level BPE
// vocabulary with EOS, EOT and EOM.
#include "scheduler/service/served_model.h"

#include <gtest/gtest.h>

#include <string>

#include "scheduler/text/bpe_encoder.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

text::Tokenizer MakeTokenizer() {
  text::Vocab v;
  v.model = text::TokenizerModel::kByteLevelBpe;
  v.pre = text::PreTokenizerKind::kLlama3;
  auto add = [&v](const std::string& piece, text::TokenType type) {
    v.pieces.push_back(piece);
    v.scores.push_back(0);
    v.types.push_back(type);
  };
  for (int b = 0; b < 256; ++b) {
    add(text::ByteLevelEncode(std::string(1, static_cast<char>(b))), text::TokenType::kNormal);
  }
  add("<|begin_of_text|>", text::TokenType::kControl);  // 256
  add("<|end_of_text|>", text::TokenType::kControl);    // 257
  add("<|eot_id|>", text::TokenType::kControl);         // 258
  add("<|eom_id|>", text::TokenType::kControl);         // 259
  add("<think>", text::TokenType::kUserDefined);        // 260
  v.bos_id = 256;
  v.eos_id = 257;
  v.eot_id = 258;
  v.eom_id = 259;
  v.unk_id = -1;
  v.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  auto tokenizer = text::Tokenizer::Create(v);
  EXPECT_OK(tokenizer);
  return *std::move(tokenizer);
}

TEST(ServedModelTest, ModelInfoListsEndOfGenerationAndSpecialTokens) {
  v1::ModelInfo info;
  FillTokenizerInfo(MakeTokenizer(), &info);
  EXPECT_EQ(info.bos_token_id(), 256);
  EXPECT_EQ(info.eos_token_id(), 257);
  EXPECT_EQ(info.eot_token_id(), 258);
  EXPECT_EQ(info.eom_token_id(), 259);
  EXPECT_EQ(std::vector<int32_t>(info.end_of_generation_token_ids().begin(),
                                 info.end_of_generation_token_ids().end()),
            (std::vector<int32_t>{257, 258, 259}));
  ASSERT_EQ(info.special_tokens_size(), 5);
  EXPECT_EQ(info.special_tokens(2).id(), 258);
  EXPECT_EQ(info.special_tokens(2).piece(), "<|eot_id|>");
  EXPECT_TRUE(info.special_tokens(2).control());
  EXPECT_EQ(info.special_tokens(4).piece(), "<think>");
  EXPECT_FALSE(info.special_tokens(4).control());
  EXPECT_EQ(info.tokenizer(), "gpt2");
  EXPECT_EQ(info.pre_tokenizer(), "llama-bpe");
  EXPECT_EQ(info.chat_template(), "{% for m in messages %}{{ m.content }}{% endfor %}");
}

}  // namespace
}  // namespace pagoda::scheduler
