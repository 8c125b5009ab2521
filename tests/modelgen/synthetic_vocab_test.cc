#include "modelgen/synthetic_vocab.h"

#include <set>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace pagoda::modelgen {
namespace {

void CheckWellFormed(const SyntheticVocab& v, int size) {
  ASSERT_EQ(v.tokens.size(), static_cast<size_t>(size));
  ASSERT_EQ(v.scores.size(), v.tokens.size());
  ASSERT_EQ(v.token_types.size(), v.tokens.size());
  EXPECT_EQ(v.tokens[kSyntheticUnkId], "<unk>");
  EXPECT_EQ(v.token_types[kSyntheticUnkId], kTokenTypeUnknown);
  EXPECT_EQ(v.tokens[kSyntheticBosId], "<s>");
  EXPECT_EQ(v.tokens[kSyntheticEosId], "</s>");
  EXPECT_EQ(v.token_types[kSyntheticBosId], kTokenTypeControl);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(v.tokens[kSyntheticFirstByteId + b], absl::StrFormat("<0x%02X>", b));
    EXPECT_EQ(v.token_types[kSyntheticFirstByteId + b], kTokenTypeByte);
  }
  std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(unique.size(), v.tokens.size()) << "duplicate pieces";
  for (size_t i = kSyntheticFirstByteId + 256; i < v.tokens.size(); ++i) {
    EXPECT_EQ(v.token_types[i], kTokenTypeNormal);
    EXPECT_FALSE(v.tokens[i].empty());
  }
  EXPECT_TRUE(unique.count("\xe2\x96\x81"));  // the space piece
  EXPECT_TRUE(unique.count("a"));
}

TEST(SyntheticVocab, WellFormedAtSeveralSizes) {
  for (int size : {300, 512, 2048, 8000}) {
    SCOPED_TRACE(size);
    auto v = BuildSyntheticVocab(size, 1);
    ASSERT_OK(v);
    CheckWellFormed(*v, size);
  }
}

TEST(SyntheticVocab, HasWordPiecesAndIsDeterministic) {
  auto a = BuildSyntheticVocab(2048, 5);
  auto b = BuildSyntheticVocab(2048, 5);
  auto c = BuildSyntheticVocab(2048, 6);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->scores, b->scores);
  EXPECT_NE(a->tokens, c->tokens);
  std::set<std::string> pieces(a->tokens.begin(), a->tokens.end());
  EXPECT_TRUE(pieces.count("\xe2\x96\x81the"));
  EXPECT_TRUE(pieces.count("\xe2\x96\x81th"));
}

TEST(SyntheticVocab, RejectsTinySizes) {
  auto v = BuildSyntheticVocab(299, 1);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("299"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::modelgen
