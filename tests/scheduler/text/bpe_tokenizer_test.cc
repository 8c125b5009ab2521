// Byte-level BPE on small hand-made vocabularies: merge-rank order (checked against the obvious
// quadratic algorithm on random inputs), the pre-tokenizers' splits, special tokens, BOS/EOS,
// and the refusal of hostile vocabularies. The real Llama 3 / Qwen 3 tokenizers are checked
// against transformers.js in hf/hf_tokenizer_check.cc.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/text/bpe_encoder.h"
#include "scheduler/text/pre_tokenizer.h"
#include "scheduler/text/tokenizer.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::text {
namespace {

using Ids = std::vector<int32_t>;

void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find(part), std::string::npos)
      << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Ids 0..255 are the byte pieces in byte order; merges append their results in rank order;
// then "<|end|>" (control) and "<tool>" (user-defined).
struct TestVocab {
  Vocab vocab;
  int32_t end_id = -1;
  int32_t tool_id = -1;
};

int32_t AddPiece(Vocab& v, const std::string& piece, TokenType type) {
  v.pieces.push_back(piece);
  v.scores.push_back(0);
  v.types.push_back(type);
  return static_cast<int32_t>(v.pieces.size() - 1);
}

TestVocab MakeVocab(const std::vector<std::pair<std::string, std::string>>& merges,
                    PreTokenizerKind pre = PreTokenizerKind::kGpt2) {
  TestVocab t;
  t.vocab.model = TokenizerModel::kByteLevelBpe;
  t.vocab.pre = pre;
  for (int b = 0; b < 256; ++b) {
    AddPiece(t.vocab, ByteLevelEncode(std::string(1, static_cast<char>(b))), TokenType::kNormal);
  }
  for (const auto& [left, right] : merges) {
    const std::string l = ByteLevelEncode(left), r = ByteLevelEncode(right);
    t.vocab.merges.push_back(l + " " + r);
    bool known = false;
    for (const std::string& p : t.vocab.pieces) known = known || p == l + r;
    if (!known) AddPiece(t.vocab, l + r, TokenType::kNormal);
  }
  t.end_id = AddPiece(t.vocab, "<|end|>", TokenType::kControl);
  t.tool_id = AddPiece(t.vocab, "<tool>", TokenType::kUserDefined);
  t.vocab.bos_id = -1;
  t.vocab.eos_id = t.end_id;
  t.vocab.unk_id = -1;
  t.vocab.add_bos = false;
  t.vocab.add_space_prefix = false;
  return t;
}

Tokenizer Make(const Vocab& vocab) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(vocab);
  EXPECT_OK(tokenizer);
  return *std::move(tokenizer);
}

int32_t IdOf(const Vocab& v, const std::string& text) {
  const std::string piece = ByteLevelEncode(text);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.pieces[i] == piece) return static_cast<int32_t>(i);
  }
  return -1;
}

// The definition: while some adjacent pair has a merge, merge the lowest-ranked one (leftmost).
Ids ReferenceWord(const Vocab& v, const std::string& word) {
  std::vector<std::string> symbols;
  for (char c : word) symbols.push_back(ByteLevelEncode(std::string(1, c)));
  while (true) {
    size_t best = symbols.size();
    size_t best_rank = v.merges.size();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      for (size_t r = 0; r < best_rank; ++r) {
        if (v.merges[r] == symbols[i] + " " + symbols[i + 1]) {
          best = i;
          best_rank = r;
          break;
        }
      }
    }
    if (best == symbols.size()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  Ids ids;
  for (const std::string& s : symbols) {
    for (size_t i = 0; i < v.pieces.size(); ++i) {
      if (v.pieces[i] == s) {
        ids.push_back(static_cast<int32_t>(i));
        break;
      }
    }
  }
  return ids;
}

TEST(BpeTokenizerTest, MergesByRankNotByLength) {
  // "e l" outranks "h e": "hel" is h + el, although "he" would also merge.
  TestVocab t = MakeVocab({{"e", "l"}, {"h", "e"}, {"he", "l"}, {"el", "lo"}, {"l", "o"}});
  const Tokenizer tok = Make(t.vocab);
  EXPECT_EQ(tok.Encode("hel", false), (Ids{'h', IdOf(t.vocab, "el")}));
  // h el l o -> h el lo (rank 4) -> h ello (rank 3).
  EXPECT_EQ(tok.Encode("hello", false), (Ids{'h', IdOf(t.vocab, "ello")}));
  EXPECT_EQ(tok.Decode(tok.Encode("hello", false)), "hello");
}

TEST(BpeTokenizerTest, HeapMergingEqualsTheDefinitionOnRandomWords) {
  std::mt19937 rng(5);
  const std::string alphabet = "abcab";
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> pieces = {"a", "b", "c"};
  for (int i = 0; i < 40; ++i) {  // random merges over the pieces made so far
    const std::string l = pieces[rng() % pieces.size()], r = pieces[rng() % pieces.size()];
    if (l.size() + r.size() > 6) continue;
    merges.push_back({l, r});
    pieces.push_back(l + r);
  }
  TestVocab t = MakeVocab(merges);
  const Tokenizer tok = Make(t.vocab);
  for (int trial = 0; trial < 500; ++trial) {
    std::string word(1 + rng() % 14, 'a');
    for (char& c : word) c = alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tok.Encode(word, false), ReferenceWord(t.vocab, word)) << word;
  }
}

std::vector<std::string> Split(PreTokenizerKind kind, const std::string& text) {
  auto pre = PreTokenizer::Create(kind);
  EXPECT_OK(pre);
  std::vector<std::string_view> views;
  pre->Split(text, views);
  return std::vector<std::string>(views.begin(), views.end());
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, SplitsAsTheModelsRegexes) {
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, "I'm 12345 ok!!  x"),
            (Pieces{"I", "'m", " 12345", " ok", "!!", " ", " x"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "I'M 12345 ok!!\n\n  x"),
            (Pieces{"I", "'M", " ", "123", "45", " ok", "!!\n\n", " ", " x"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "ab 123 été"),
            (Pieces{"ab", " ", "1", "2", "3", " été"}));
  // Ill-formed UTF-8 matches nothing; it stays, as its own piece, between the matches.
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "a\xFF\xFE b"), (Pieces{"a", "\xFF\xFE", " b"}));
}

TEST(PreTokenizerTest, Qwen2NormalizesToNfc) {
  auto qwen = PreTokenizer::Create(PreTokenizerKind::kQwen2);
  auto llama = PreTokenizer::Create(PreTokenizerKind::kLlama3);
  ASSERT_OK(qwen);
  ASSERT_OK(llama);
  EXPECT_EQ(qwen->Normalize("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ(llama->Normalize("e\xCC\x81"), "e\xCC\x81");
  EXPECT_EQ(qwen->Normalize("a\xFF"), "a\xFF");  // ill-formed: unchanged
}

TEST(PreTokenizerTest, UnknownNamesAreRefusedNamingTheSupportedOnes) {
  EXPECT_EQ(*ParsePreTokenizerName("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*ParsePreTokenizerName("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(*ParsePreTokenizerName("default"), PreTokenizerKind::kGpt2);
  ExpectInvalid(ParsePreTokenizerName("deepseek-llm").status(),
                "tokenizer.ggml.pre is \"deepseek-llm\", a pre-tokenizer Pagoda does not "
                "implement; supported: gpt2, gpt-2, default, llama-bpe, llama3, llama-v3, qwen2");
}

TEST(BpeTokenizerTest, SpecialTokensOnlyWhenParsingIsOn) {
  TestVocab t = MakeVocab({{"a", "b"}});
  const Tokenizer tok = Make(t.vocab);
  const std::string text = "ab<|end|><tool>";
  const Ids parsed = tok.Encode(text, false, /*parse_special=*/true);
  EXPECT_EQ(parsed, (Ids{IdOf(t.vocab, "ab"), t.end_id, t.tool_id}));
  EXPECT_EQ(tok.Decode(parsed, /*render_special=*/true), text);
  EXPECT_EQ(tok.Decode(parsed), "ab<tool>");  // control tokens are not text
  const Ids plain = tok.Encode(text, false);
  for (int32_t id : plain) EXPECT_EQ(tok.Type(id), TokenType::kNormal);
  EXPECT_EQ(tok.Decode(plain), text);
  EXPECT_EQ(tok.special_ids(), (Ids{t.end_id, t.tool_id}));
}

TEST(BpeTokenizerTest, AddsBosAndEosAsTheFlagsSay) {
  TestVocab t = MakeVocab({});
  t.vocab.bos_id = t.tool_id;
  t.vocab.add_bos = true;
  t.vocab.add_eos = true;
  EXPECT_EQ(Make(t.vocab).Encode("a", true), (Ids{t.tool_id, 'a', t.end_id}));
  EXPECT_EQ(Make(t.vocab).Encode("a", false), (Ids{'a'}));
  t.vocab.bos_id = -1;
  ExpectInvalid(Tokenizer::Create(t.vocab).status(), "add BOS but has no BOS id");
}

TEST(BpeTokenizerTest, EndOfGenerationIdsAreEosEotAndEom) {
  TestVocab t = MakeVocab({});
  t.vocab.eot_id = t.tool_id;
  t.vocab.eom_id = t.end_id;  // repeats are listed once
  EXPECT_EQ(Make(t.vocab).EndOfGenerationIds(), (Ids{t.end_id, t.tool_id}));
}

TEST(BpeTokenizerTest, RefusesHostileVocabularies) {
  TestVocab t = MakeVocab({{"a", "b"}});
  Vocab v = t.vocab;
  v.merges.push_back(ByteLevelEncode("ab") + " zz");
  ExpectInvalid(Tokenizer::Create(v).status(),
                "tokenizer.ggml.merges[1] (\"ab zz\") names \"zz\", which is not a normal token");
  v = t.vocab;
  v.merges.push_back("a b c");
  ExpectInvalid(Tokenizer::Create(v).status(), "expected two pieces separated by one space");
  v = t.vocab;
  v.merges.push_back("b a");  // "ba" is not in the vocabulary
  ExpectInvalid(Tokenizer::Create(v).status(), "names a result \"ba\"");
  v = t.vocab;
  v.pieces['a'] = "\xC3";  // invalid UTF-8
  ExpectInvalid(Tokenizer::Create(v).status(),
                "token 97 has piece \"\\303\", which is not well-formed UTF-8");
  v = t.vocab;
  v.pieces['a'] = "\xE2\x96\x81";  // "▁": not a byte-level character; byte 'a' lost
  ExpectInvalid(Tokenizer::Create(v).status(), "normal token 97 has piece");
  v = t.vocab;
  v.types['a'] = TokenType::kUnused;
  ExpectInvalid(Tokenizer::Create(v).status(), "lacks a normal token for byte 0x61");
  v = t.vocab;
  v.eot_id = 1 << 30;
  ExpectInvalid(Tokenizer::Create(v).status(), "EOT id 1073741824 is outside the vocabulary");
  v = t.vocab;
  v.types.pop_back();
  ExpectInvalid(Tokenizer::Create(v).status(), "sizes disagree");
}

}  // namespace
}  // namespace pagoda::scheduler::text
