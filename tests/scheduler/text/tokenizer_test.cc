#include "scheduler/text/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "tests/scheduler/text/test_vocabs.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::scheduler::text {
namespace {

using ::pagoda::common::ScanUtf8Char;
using ::pagoda::common::Utf8Char;
using ::pagoda::common::Utf8CharKind;

using ::pagoda::testing::kFirstSyntheticPiece;
using ::pagoda::testing::MakeSyntheticVocab;
using ::pagoda::testing::SyntheticByteId;

using Ids = std::vector<int32_t>;

// Expects `status` to fail with InvalidArgument and a message containing `part`.
void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(std::string(status.message()).find(part) != std::string::npos)
      << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

Tokenizer MakeTokenizer(const Vocab& vocab) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(vocab);
  EXPECT_OK(tokenizer);
  return *std::move(tokenizer);
}

// The spec written as the obvious quadratic algorithm: merge the best adjacent pair until none
// is left. Used to check the heap-based implementation on random inputs.
std::vector<int32_t> ReferenceEncode(const Vocab& vocab, const std::string& normalized) {
  auto find = [&vocab](const std::string& piece) -> int32_t {
    for (size_t id = 0; id < vocab.pieces.size(); ++id) {
      if (vocab.types[id] == TokenType::kNormal && vocab.pieces[id] == piece) return id;
    }
    return -1;
  };
  std::vector<std::string> symbols;
  for (size_t i = 0; i < normalized.size();) {
    const Utf8Char c = ScanUtf8Char(std::string_view(normalized).substr(i));
    const size_t length = c.kind == Utf8CharKind::kValid ? c.length : 1;
    symbols.push_back(normalized.substr(i, length));
    i += length;
  }
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const int32_t id = find(symbols[i] + symbols[i + 1]);
      if (id >= 0 && (best < 0 || vocab.scores[id] > best_score)) {
        best = static_cast<int>(i);
        best_score = vocab.scores[id];
      }
    }
    if (best < 0) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& symbol : symbols) {
    const int32_t id = find(symbol);
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (char byte : symbol) ids.push_back(SyntheticByteId(static_cast<uint8_t>(byte)));
    }
  }
  return ids;
}

// ---- Create() validation ----

TEST(TokenizerCreateTest, AcceptsWellFormedVocab) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(MakeSyntheticVocab({{"a", -1}}));
  ASSERT_OK(tokenizer);
  EXPECT_EQ(tokenizer->vocab_size(), kFirstSyntheticPiece + 1);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->IsControl(1));
  EXPECT_TRUE(tokenizer->IsControl(2));
  EXPECT_FALSE(tokenizer->IsControl(0));
  EXPECT_FALSE(tokenizer->IsControl(kFirstSyntheticPiece));
  EXPECT_FALSE(tokenizer->IsControl(-1));
  EXPECT_FALSE(tokenizer->IsControl(100000));
}

TEST(TokenizerCreateTest, RejectsEmptyVocab) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(Vocab{});
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectInvalid(tokenizer.status(), "empty");
}

TEST(TokenizerCreateTest, RejectsMismatchedSizes) {
  Vocab vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.scores.pop_back();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(vocab);
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectInvalid(tokenizer.status(), "260 pieces, 259 scores");

  vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.types.push_back(TokenType::kNormal);
  ExpectInvalid(Tokenizer::Create(vocab).status(), "261 token types");
}

TEST(TokenizerCreateTest, RejectsSpecialIdsOutOfRange) {
  Vocab vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.bos_id = 260;
  ExpectInvalid(Tokenizer::Create(vocab).status(), "BOS id 260 is outside the vocabulary [0, 260)");
  vocab.bos_id = 1;
  vocab.eos_id = -3;
  ExpectInvalid(Tokenizer::Create(vocab).status(), "EOS id -3");
  vocab.eos_id = 2;
  vocab.unk_id = -2;
  ExpectInvalid(Tokenizer::Create(vocab).status(), "unknown-token id -2");
  vocab.unk_id = -1;  // "no unknown token" is allowed
  EXPECT_OK(Tokenizer::Create(vocab));
}

TEST(TokenizerCreateTest, RejectsMissingByteToken) {
  Vocab vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.pieces[SyntheticByteId(0xE9)] = "x";
  vocab.types[SyntheticByteId(0xE9)] = TokenType::kNormal;
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(vocab);
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectInvalid(tokenizer.status(), "lacks the byte token <0xE9>");
}

TEST(TokenizerCreateTest, RejectsByteTokenWithMalformedPiece) {
  Vocab vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.pieces[SyntheticByteId(0x41)] = "<0xZZ>";
  ExpectInvalid(Tokenizer::Create(vocab).status(),
                "byte token 68 has piece \"<0xZZ>\"; expected <0xHH>");
}

TEST(TokenizerCreateTest, RejectsUnknownTokenType) {
  Vocab vocab = MakeSyntheticVocab({{"a", -1}});
  vocab.types.back() = static_cast<TokenType>(9);
  ExpectInvalid(Tokenizer::Create(vocab).status(), "token 259 has type 9; valid types are 0..6");
}

// ---- Encode() on synthetic vocabularies ----

TEST(TokenizerEncodeTest, EmptyTextIsJustBos) {
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81", -1}}));
  EXPECT_EQ(tokenizer.Encode("", true), (Ids{1}));
  EXPECT_TRUE(tokenizer.Encode("", false).empty());
}

TEST(TokenizerEncodeTest, HigherScoreMergesFirst) {
  // "abc": "bc" outscores "ab", so "a" stays alone.
  Tokenizer tokenizer = MakeTokenizer(
      MakeSyntheticVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -5}, {"bc", -1}}, false));
  const int32_t a = kFirstSyntheticPiece, c = a + 2, ab = a + 3, bc = a + 4;
  EXPECT_EQ(tokenizer.Encode("abc", false), (Ids{a, bc}));
  tokenizer = MakeTokenizer(
      MakeSyntheticVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -5}}, false));
  EXPECT_EQ(tokenizer.Encode("abc", false), (Ids{ab, c}));
}

TEST(TokenizerEncodeTest, EqualScoresMergeLeftmostFirst) {
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab({{"a", -10}, {"aa", -1}}, false));
  const int32_t a = kFirstSyntheticPiece, aa = a + 1;
  EXPECT_EQ(tokenizer.Encode("aaa", false), (Ids{aa, a}));
  EXPECT_EQ(tokenizer.Encode("aaaaa", false), (Ids{aa, aa, a}));
}

TEST(TokenizerEncodeTest, MergesChainIntoLongerPieces) {
  // Merging needs every intermediate piece: "abcd" is reachable only through "ab" + "cd".
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab(
      {{"a", -9}, {"b", -9}, {"c", -9}, {"d", -9}, {"ab", -3}, {"cd", -2}, {"abcd", -4}}, false));
  const int32_t abcd = kFirstSyntheticPiece + 6;
  EXPECT_EQ(tokenizer.Encode("abcd", false), (Ids{abcd}));
  EXPECT_EQ(tokenizer.Encode("abcdabcd", false), (Ids{abcd, abcd}));
}

TEST(TokenizerEncodeTest, SpacePrefixAndSpaceMarker) {
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81", -10},
                                                                {"a", -10},
                                                                {"b", -10},
                                                                {"\xE2\x96\x81"
                                                                 "a",
                                                                 -1}}));
  const int32_t space = kFirstSyntheticPiece, b = space + 2, space_a = space + 3;
  EXPECT_EQ(tokenizer.Encode("a b", true), (Ids{1, space_a, space, b}));
  EXPECT_EQ(tokenizer.Encode(" a", false), (Ids{space, space_a}));
  EXPECT_EQ(tokenizer.Decode(tokenizer.Encode("a b", true)), "a b");
  EXPECT_EQ(tokenizer.Decode(tokenizer.Encode(" a", true)), " a");
}

TEST(TokenizerEncodeTest, ByteFallbackForCharactersNotInVocab) {
  const Tokenizer tokenizer =
      MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81", -1}, {"x", -1}}, false));
  const int32_t x = kFirstSyntheticPiece + 1;
  // "é" = C3 A9, "中" = E4 B8 AD, "😀" = F0 9F 98 80.
  EXPECT_EQ(tokenizer.Encode("x\xC3\xA9x", false),
            (Ids{x, SyntheticByteId(0xC3), SyntheticByteId(0xA9), x}));
  EXPECT_EQ(tokenizer.Encode("\xE4\xB8\xAD", false),
            (Ids{SyntheticByteId(0xE4), SyntheticByteId(0xB8), SyntheticByteId(0xAD)}));
  EXPECT_EQ(tokenizer.Encode("\xF0\x9F\x98\x80", false),
            (Ids{SyntheticByteId(0xF0), SyntheticByteId(0x9F), SyntheticByteId(0x98),
                 SyntheticByteId(0x80)}));
  EXPECT_EQ(tokenizer.Decode(tokenizer.Encode("x\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", true)),
            "x\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
}

TEST(TokenizerEncodeTest, MultiByteCharacterInVocabIsOneSymbol) {
  const Tokenizer tokenizer =
      MakeTokenizer(MakeSyntheticVocab({{"\xC3\xA9", -1}, {"t", -1}, {"\xC3\xA9t", -0.5f}}, false));
  const int32_t e_acute = kFirstSyntheticPiece, e_acute_t = e_acute + 2;
  EXPECT_EQ(tokenizer.Encode("\xC3\xA9", false), (Ids{e_acute}));
  EXPECT_EQ(tokenizer.Encode("\xC3\xA9t\xC3\xA9", false), (Ids{e_acute_t, e_acute}));
}

TEST(TokenizerEncodeTest, InvalidUtf8BecomesByteTokens) {
  const Tokenizer tokenizer =
      MakeTokenizer(MakeSyntheticVocab({{"a", -1}, {"b", -1}, {"ab", -0.5f}}, false));
  const int32_t ab = kFirstSyntheticPiece + 2;
  // A truncated "é" lead byte before "ab", a stray continuation byte, an 0xFF.
  EXPECT_EQ(tokenizer.Encode("\xC3"
                             "ab\x80\xFF",
                             false),
            (Ids{SyntheticByteId(0xC3), ab, SyntheticByteId(0x80), SyntheticByteId(0xFF)}));
  EXPECT_EQ(tokenizer.Decode(tokenizer.Encode("\xC3"
                                              "ab\x80\xFF",
                                              false)),
            "\xC3"
            "ab\x80\xFF");
}

TEST(TokenizerEncodeTest, SpecialPiecesInTextAreNotSpecial) {
  const Tokenizer tokenizer =
      MakeTokenizer(MakeSyntheticVocab({{"<", -1}, {"s", -1}, {">", -1}, {"<s", -1}}, false));
  const int32_t less_s = kFirstSyntheticPiece + 3, greater = kFirstSyntheticPiece + 2;
  // "<s>" is the BOS piece, but only normal pieces are produced from text.
  EXPECT_EQ(tokenizer.Encode("<s>", false), (Ids{less_s, greater}));
}

TEST(TokenizerEncodeTest, MatchesQuadraticReferenceOnRandomInputs) {
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "b", "c", "\xE2\x96\x81", "\xC3\xA9"};
  for (int trial = 0; trial < 40; ++trial) {
    // A random vocabulary of short pieces with random (often equal) scores.
    std::vector<std::pair<std::string, float>> pieces;
    for (const std::string& ch : alphabet) {
      if (rng() % 4 != 0) pieces.push_back({ch, -100});
    }
    for (int i = 0; i < 30; ++i) {
      std::string piece;
      for (int len = 2 + rng() % 3; len > 0; --len) piece += alphabet[rng() % alphabet.size()];
      pieces.push_back({piece, -static_cast<float>(rng() % 8)});
    }
    const Vocab vocab = MakeSyntheticVocab(pieces, false);
    const Tokenizer tokenizer = MakeTokenizer(vocab);
    std::string text;
    for (int len = rng() % 40; len > 0; --len) text += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tokenizer.Encode(text, false), ReferenceEncode(vocab, text)) << "trial " << trial;
  }
}

TEST(TokenizerEncodeTest, LongInputIsFastAndRoundTrips) {
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81", -1},
                                                                {"t", -5},
                                                                {"h", -5},
                                                                {"e", -5},
                                                                {"th", -2},
                                                                {"the", -1},
                                                                {"\xE2\x96\x81the", -0.5f},
                                                                {"a", -5},
                                                                {"aa", -3}}));
  std::mt19937 rng(7);
  const std::vector<std::string> words = {
      "the", " ", "a", "aaaa", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\n", "th", "e"};
  std::string text;
  while (text.size() < 100000) text += words[rng() % words.size()];
  std::string same(100000, 'a');  // one long run: many equal-score candidates at once
  for (const std::string* input : {&text, &same}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tokenizer.Encode(*input, true);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 1.0);
    EXPECT_EQ(tokenizer.Decode(ids), *input);
  }
}

// ---- Decode() / TokenBytes() / Piece() ----

TEST(TokenizerDecodeTest, TokenBytesAndPieces) {
  const Tokenizer tokenizer =
      MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81"
                                         "a\xE2\x96\x81"
                                         "b",
                                         -1}}));
  const int32_t piece = kFirstSyntheticPiece;
  EXPECT_EQ(tokenizer.Piece(piece),
            "\xE2\x96\x81"
            "a\xE2\x96\x81"
            "b");
  EXPECT_EQ(tokenizer.TokenBytes(piece), " a b");
  EXPECT_EQ(tokenizer.Piece(1), "<s>");
  EXPECT_EQ(tokenizer.TokenBytes(1), "");
  EXPECT_EQ(tokenizer.TokenBytes(0), "");
  EXPECT_EQ(tokenizer.Piece(SyntheticByteId(0x0A)), "<0x0A>");
  EXPECT_EQ(tokenizer.TokenBytes(SyntheticByteId(0x0A)), "\n");
  EXPECT_EQ(tokenizer.TokenBytes(SyntheticByteId(0x00)), std::string(1, '\0'));
  EXPECT_EQ(tokenizer.Piece(-1), "");
  EXPECT_EQ(tokenizer.TokenBytes(tokenizer.vocab_size()), "");
}

TEST(TokenizerDecodeTest, DropsOnlyTheSpacePrefix) {
  const Tokenizer tokenizer = MakeTokenizer(MakeSyntheticVocab({{"\xE2\x96\x81"
                                                                 "a",
                                                                 -1},
                                                                {"\xE2\x96\x81", -1}}));
  const int32_t space_a = kFirstSyntheticPiece, space = space_a + 1;
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{1, space_a, space_a, 2}), "a a");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{space_a, space_a}), "a a");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{1, space, space_a}), " a");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{1, 2}), "");

  Vocab no_prefix = MakeSyntheticVocab({{"\xE2\x96\x81"
                                         "a",
                                         -1}},
                                       false);
  EXPECT_EQ(MakeTokenizer(no_prefix).Decode(std::vector<int32_t>{1, space_a}), " a");
}

// ---- The trained test model's vocabulary (tok512.bin) ----

class TokenizerTok512Test : public ::testing::Test {
 protected:
  static std::optional<Tokenizer> Load(const std::string& path) {
    absl::StatusOr<Vocab> vocab = ::pagoda::testing::LoadLlama2cTokenizer(path, 512);
    EXPECT_OK(vocab);
    if (!vocab.ok()) return std::nullopt;
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*std::move(vocab));
    EXPECT_OK(tokenizer);
    if (!tokenizer.ok()) return std::nullopt;
    return *std::move(tokenizer);
  }
};

TEST_F(TokenizerTok512Test, OnceUponATime) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "tok512.bin");
  const std::optional<Tokenizer> tokenizer = Load(*path);
  ASSERT_TRUE(tokenizer.has_value());
  EXPECT_EQ(tokenizer->Encode("Once upon a time", true), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tokenizer->Piece(403), "\xE2\x96\x81Once");
  EXPECT_EQ(tokenizer->Decode(std::vector<int32_t>{1, 403, 407, 261, 378}), "Once upon a time");
}

TEST_F(TokenizerTok512Test, GoldenPromptsEncodeAndDecode) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "tok512.bin");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  const std::optional<Tokenizer> tokenizer = Load(*path);
  ASSERT_TRUE(tokenizer.has_value());
  std::ifstream in(*golden_path);
  const nlohmann::json golden = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(golden.is_discarded()) << "cannot parse " << *golden_path;
  ASSERT_FALSE(golden["cases"].empty());
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    const auto prompt_ids = c["prompt_token_ids"].get<std::vector<int32_t>>();
    const auto generated = c["expected_token_ids"].get<std::vector<int32_t>>();
    const std::string expected_text = c["expected_text"].get<std::string>();
    EXPECT_EQ(tokenizer->Encode(prompt, true), prompt_ids) << prompt;
    EXPECT_EQ(tokenizer->Decode(prompt_ids), prompt);
    std::vector<int32_t> all = prompt_ids;
    all.insert(all.end(), generated.begin(), generated.end());
    EXPECT_EQ(tokenizer->Decode(all), prompt + expected_text) << prompt;
  }
}

TEST_F(TokenizerTok512Test, RoundTripsArbitraryText) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "tok512.bin");
  const std::optional<Tokenizer> tokenizer = Load(*path);
  ASSERT_TRUE(tokenizer.has_value());
  for (const std::string text :
       {"Hello, World!\n\tTabs  and  double spaces ",
        "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!", " leading space", "x"}) {
    const std::vector<int32_t> ids = tokenizer->Encode(text, true);
    EXPECT_EQ(tokenizer->Decode(ids), text);
    for (int32_t id : ids) EXPECT_NE(id, 0) << "no <unk> with byte fallback";
  }
}

}  // namespace
}  // namespace pagoda::scheduler::text
