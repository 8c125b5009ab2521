#include "scheduler/text/detokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "scheduler/text/tokenizer.h"
#include "tests/scheduler/text/test_vocabs.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::scheduler::text {
namespace {

using ::pagoda::common::IsValidUtf8;
using ::pagoda::common::kMaxUtf8IncompleteLength;
using ::pagoda::common::kUtf8Replacement;
using ::pagoda::common::SanitizeUtf8;

using ::pagoda::testing::kFirstSyntheticPiece;
using ::pagoda::testing::MakeSyntheticVocab;
using ::pagoda::testing::SyntheticByteId;

const std::string kFffd(kUtf8Replacement);

Tokenizer MakeTokenizer(const Vocab& vocab) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(vocab);
  EXPECT_OK(tokenizer);
  return *std::move(tokenizer);
}

Tokenizer SyntheticTokenizer() {
  return MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81", -1},
                                           {"a", -1},
                                           {"\xE2\x96\x81"
                                            "a",
                                            -0.5f}}));
}

std::vector<int32_t> Bytes(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(SyntheticByteId(static_cast<uint8_t>(c)));
  return ids;
}

// Streams `ids`, checking every chunk is well-formed, and returns the concatenation.
std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  StreamingDetokenizer detokenizer(tokenizer);
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = detokenizer.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "partial character streamed after token " << id;
    EXPECT_LE(detokenizer.held_bytes(), kMaxUtf8IncompleteLength);
    all += chunk;
  }
  const std::string tail = detokenizer.Flush();
  EXPECT_TRUE(IsValidUtf8(tail));
  EXPECT_EQ(detokenizer.held_bytes(), 0u);
  return all + tail;
}

TEST(StreamingDetokenizerTest, KeepsLeadingSpaceAndSkipsControlTokens) {
  const Tokenizer tokenizer = SyntheticTokenizer();
  const int32_t space_a = kFirstSyntheticPiece + 2;
  StreamingDetokenizer detokenizer(tokenizer);
  EXPECT_EQ(detokenizer.Push(1), "");
  EXPECT_EQ(detokenizer.Push(space_a), " a");
  EXPECT_EQ(detokenizer.Push(0), "");  // <unk>
  EXPECT_EQ(detokenizer.Push(space_a), " a");
  EXPECT_EQ(detokenizer.Push(2), "");
  EXPECT_EQ(detokenizer.Flush(), "");
}

TEST(StreamingDetokenizerTest, HoldsMultiByteCharacterUntilComplete) {
  const Tokenizer tokenizer = SyntheticTokenizer();
  StreamingDetokenizer detokenizer(tokenizer);
  const std::vector<int32_t> emoji = Bytes("\xF0\x9F\x98\x80");
  EXPECT_EQ(detokenizer.Push(emoji[0]), "");
  EXPECT_EQ(detokenizer.held_bytes(), 1u);
  EXPECT_EQ(detokenizer.Push(emoji[1]), "");
  EXPECT_EQ(detokenizer.Push(emoji[2]), "");
  EXPECT_EQ(detokenizer.held_bytes(), 3u);
  EXPECT_EQ(detokenizer.Push(emoji[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(detokenizer.held_bytes(), 0u);
  // A normal token completes nothing but is emitted right away.
  const std::vector<int32_t> euro = Bytes("\xE2\x82\xAC");
  EXPECT_EQ(detokenizer.Push(kFirstSyntheticPiece + 1), "a");
  EXPECT_EQ(detokenizer.Push(euro[0]), "");
  EXPECT_EQ(detokenizer.Push(euro[1]), "");
  EXPECT_EQ(detokenizer.Push(euro[2]), "\xE2\x82\xAC");
  EXPECT_EQ(detokenizer.Flush(), "");
}

TEST(StreamingDetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer tokenizer = SyntheticTokenizer();
  const int32_t a = kFirstSyntheticPiece + 1;
  StreamingDetokenizer detokenizer(tokenizer);
  EXPECT_EQ(detokenizer.Push(SyntheticByteId(0x80)), kFffd);  // known bad at once
  EXPECT_EQ(detokenizer.Push(SyntheticByteId(0xC3)), "");     // could still become é
  EXPECT_EQ(detokenizer.Push(a), kFffd + "a");                // ... but did not
  EXPECT_EQ(detokenizer.Push(SyntheticByteId(0xFF)), kFffd);
  EXPECT_EQ(detokenizer.Push(SyntheticByteId(0xE2)), "");
  EXPECT_EQ(detokenizer.Push(SyntheticByteId(0x82)), "");
  EXPECT_EQ(detokenizer.Flush(), kFffd);  // a truncated character at the end
  EXPECT_EQ(detokenizer.held_bytes(), 0u);
}

TEST(StreamingDetokenizerTest, ReassemblesEncodedTextExactly) {
  const Tokenizer tokenizer = SyntheticTokenizer();
  const std::string text =
      "a caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\x98\x80 a\n";
  std::vector<int32_t> ids = tokenizer.Encode(text, true);
  // Generated text keeps the prefix space that Decode() drops.
  EXPECT_EQ(Stream(tokenizer, ids), " " + text);
  EXPECT_EQ(tokenizer.Decode(ids), text);
}

TEST(StreamingDetokenizerTest, RandomTokensMatchSanitizedConcatenation) {
  const Tokenizer tokenizer = SyntheticTokenizer();
  std::mt19937 rng(99);
  // Mostly byte tokens from the interesting ranges, so characters split, complete and break.
  const std::vector<uint8_t> bytes = {0x41, 0x80, 0x9F, 0xA9, 0xBF, 0xC3, 0xE0,
                                      0xE2, 0xED, 0xF0, 0xF4, 0xFF, 0x82, 0x98};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    std::string raw;
    for (int n = rng() % 30; n > 0; --n) {
      const int32_t id = rng() % 5 == 0 ? static_cast<int32_t>(rng() % tokenizer.vocab_size())
                                        : SyntheticByteId(bytes[rng() % bytes.size()]);
      ids.push_back(id);
      raw += tokenizer.TokenBytes(id);
    }
    EXPECT_EQ(Stream(tokenizer, ids), SanitizeUtf8(raw)) << "trial " << trial;
  }
}

TEST(StreamingDetokenizerTest, GoldenGenerationsStreamToExpectedText) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "tok512.bin");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  absl::StatusOr<Vocab> vocab = ::pagoda::testing::LoadLlama2cTokenizer(*path, 512);
  ASSERT_OK(vocab);
  const Tokenizer tokenizer = MakeTokenizer(*vocab);
  std::ifstream in(*golden_path);
  const nlohmann::json golden = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(golden.is_discarded()) << "cannot parse " << *golden_path;
  ASSERT_FALSE(golden["cases"].empty());
  for (const nlohmann::json& c : golden["cases"]) {
    const auto generated = c["expected_token_ids"].get<std::vector<int32_t>>();
    const std::string expected_text = c["expected_text"].get<std::string>();
    EXPECT_EQ(Stream(tokenizer, generated), expected_text) << c["prompt"];
  }
}

}  // namespace
}  // namespace pagoda::scheduler::text
