// Vocabulary, CompiledConstraint and TokenMatcher: masks equal a brute-force check of every
// token (copy the matcher, CanAdvance the token's bytes) on random and real vocabularies along
// random walks of the grammar; the end-token rules; excluded tokens; forks; the shared cache;
// threads; and hostile grammars.
#include "common/grammar/token_matcher.h"

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/gguf_reader.h"
#include "gtest/gtest.h"
#include "modelgen/synthetic_vocab.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::grammar {
namespace {

constexpr char kJsonGbnf[] = R"gbnf(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

constexpr char kArithGbnf[] = R"gbnf(
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)gbnf";

constexpr char kUnicodeGbnf[] = R"gbnf(
root ::= (word " ")* word "."
word ::= [a-zà-ÿ]+ | "€" | [\U0001F600-\U0001F64F]{1,3} | [^\x00-\x7F .]
)gbnf";

std::vector<std::string> Grammars() { return {kJsonGbnf, kArithGbnf, kUnicodeGbnf}; }

std::shared_ptr<const Grammar> MustCompile(const std::string& gbnf) {
  auto g = Grammar::FromGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

bool Bit(const std::vector<uint32_t>& mask, int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1; }

// The mask by definition, token by token.
std::vector<uint32_t> BruteForceMask(const TokenMatcher& tm, const Vocabulary& vocab) {
  std::vector<uint32_t> mask(vocab.mask_words(), 0);
  const auto& ends = tm.end_tokens();
  auto is_end = [&](int32_t t) { return std::find(ends.begin(), ends.end(), t) != ends.end(); };
  bool any = false;
  for (int32_t t = 0; t < vocab.size(); ++t) {
    if (is_end(t) || vocab.excluded(t)) continue;
    Matcher copy = tm.matcher();
    if (copy.CanAdvance(vocab.token_bytes(t))) {
      mask[t >> 5] |= 1u << (t & 31);
      any = true;
    }
  }
  if (tm.matcher().Accepting() || !any) {
    for (int32_t t : ends) mask[t >> 5] |= 1u << (t & 31);
  }
  return mask;
}

// Random byte strings biased towards the grammars' characters, with whole and partial UTF-8
// sequences, some duplicates, some empty and some excluded.
std::shared_ptr<const Vocabulary> RandomVocab(std::mt19937& rng, int size) {
  const std::vector<std::string> pieces = {
      "{",     "}",        "[",    "]",        "\"",    ":", ",",    " ",    "\n",  "\t", "a",
      "b",     "z",        "0",    "1",        "9",     "-", "+",    ".",    "e",   "E",  "true",
      "false", "null",     "\\",   "\\n",      "\\u00", "(", ")",    "*",    "/",   "é",  "€",
      "😀",     "\xF0\x9F", "\x98", "\xE2\x82", "à",     "ÿ", "word", "\x7F", "\x01"};
  std::vector<std::string> bytes(size);
  std::vector<bool> excluded(size, false);
  for (int t = 0; t < size; ++t) {
    const int kind = static_cast<int>(rng() % 20);
    if (kind == 0) continue;  // empty: excluded automatically
    if (kind == 1) excluded[t] = true;
    if (kind == 2 && t > 0) {
      bytes[t] = bytes[rng() % t];  // a duplicate of another token
      continue;
    }
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      if (rng() % 8 == 0) {
        bytes[t] += static_cast<char>(rng() % 256);
      } else {
        bytes[t] += pieces[rng() % pieces.size()];
      }
    }
  }
  return Vocabulary::Create(std::move(bytes), std::move(excluded));
}

// Follows a random walk of allowed tokens, checking every mask against the brute force.
// Returns the number of masks checked.
int CheckRandomWalk(const std::shared_ptr<const Grammar>& g,
                    const std::shared_ptr<const Vocabulary>& vocab, std::vector<int32_t> ends,
                    std::mt19937& rng, int steps) {
  TokenMatcher tm(g, vocab, std::move(ends));
  int checked = 0;
  for (int step = 0; step < steps && !tm.Finished(); ++step) {
    std::vector<uint32_t> mask(vocab->mask_words(), 0xFFFFFFFFu);  // FillMask overwrites
    tm.FillMask(mask);
    const std::vector<uint32_t> expected = BruteForceMask(tm, *vocab);
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (Bit(mask, t) != Bit(expected, t)) {
        ADD_FAILURE() << "token " << t << " '" << vocab->token_bytes(t) << "' mask " << Bit(mask, t)
                      << " brute force " << Bit(expected, t) << " at step " << step;
        return checked;
      }
    }
    ++checked;
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (Bit(mask, t)) allowed.push_back(t);
    }
    if (allowed.empty()) break;
    // Prefer text over ending, so walks go deep.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int tries = 0;
         tries < 3 && std::count(tm.end_tokens().begin(), tm.end_tokens().end(), pick) > 0;
         ++tries) {
      pick = allowed[rng() % allowed.size()];
    }
    EXPECT_TRUE(tm.Accept(pick)) << "token " << pick;
  }
  return checked;
}

uint32_t Seed() {
  if (const char* env = std::getenv("GRAMMAR_TEST_SEED")) return std::stoul(env);
  return std::random_device{}();
}

TEST(TokenMatcherTest, MasksEqualBruteForceOnRandomVocabularies) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  int checked = 0;
  for (const std::string& gbnf : Grammars()) {
    auto g = MustCompile(gbnf);
    ASSERT_NE(g, nullptr);
    for (int v = 0; v < 4; ++v) {
      auto vocab = RandomVocab(rng, 300 + static_cast<int>(rng() % 700));
      const int32_t eos = static_cast<int32_t>(rng() % vocab->size());
      checked += CheckRandomWalk(g, vocab, {eos}, rng, 40);
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(TokenMatcherTest, MasksEqualBruteForceOnSyntheticVocabulary) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  ASSERT_OK_AND_ASSIGN(auto sv, modelgen::BuildSyntheticVocab(2000, seed));
  std::vector<std::string> bytes;
  std::vector<bool> excluded;
  for (size_t t = 0; t < sv.tokens.size(); ++t) {
    std::string s = absl::StrReplaceAll(sv.tokens[t], {{"\xE2\x96\x81", " "}});
    bool ex = sv.token_types[t] != modelgen::kTokenTypeNormal &&
              sv.token_types[t] != modelgen::kTokenTypeByte;
    if (sv.token_types[t] == modelgen::kTokenTypeByte) {
      s = std::string(1, static_cast<char>(std::stoi(sv.tokens[t].substr(3, 2), nullptr, 16)));
    }
    bytes.push_back(ex ? "" : s);
    excluded.push_back(ex);
  }
  auto vocab = Vocabulary::Create(std::move(bytes), std::move(excluded));
  int checked = 0;
  for (const std::string& gbnf : Grammars()) {
    auto g = MustCompile(gbnf);
    ASSERT_NE(g, nullptr);
    for (int w = 0; w < 3; ++w) {
      checked += CheckRandomWalk(g, vocab, {modelgen::kSyntheticEosId}, rng, 30);
    }
  }
  EXPECT_GT(checked, 30);
}

// stories260K's SentencePiece vocabulary, as the worker sees it (▁ is a space, <0xXX> a byte,
// control and unknown tokens excluded).
std::shared_ptr<const Vocabulary> StoriesVocab(const std::string& path) {
  auto file = common::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto tokens = (*file)->GetStringArray("tokenizer.ggml.tokens");
  auto types = (*file)->GetInt32Array("tokenizer.ggml.token_type");
  EXPECT_TRUE(tokens && types);
  if (!tokens || !types) return nullptr;
  std::vector<std::string> bytes;
  std::vector<bool> excluded;
  for (size_t t = 0; t < tokens->size(); ++t) {
    const std::string& piece = (*tokens)[t];
    const int32_t type = (*types)[t];
    if (type == 6 && piece.size() == 6) {
      bytes.push_back(
          std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16))));
      excluded.push_back(false);
    } else if (type == 1) {
      bytes.push_back(absl::StrReplaceAll(piece, {{"\xE2\x96\x81", " "}}));
      excluded.push_back(false);
    } else {
      bytes.emplace_back();
      excluded.push_back(true);
    }
  }
  return Vocabulary::Create(std::move(bytes), std::move(excluded));
}

TEST(TokenMatcherTest, MasksEqualBruteForceOnStoriesVocabulary) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "stories260K-f32.gguf");
  auto vocab = StoriesVocab(*path);
  ASSERT_NE(vocab, nullptr);
  ASSERT_EQ(vocab->size(), 512);
  const uint32_t seed = Seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  int checked = 0;
  for (const std::string& gbnf : Grammars()) {
    auto g = MustCompile(gbnf);
    ASSERT_NE(g, nullptr);
    for (int w = 0; w < 3; ++w) checked += CheckRandomWalk(g, vocab, {2}, rng, 40);
  }
  auto story = MustCompile("root ::= [A-Z] [a-z ,]* \".\"");
  ASSERT_NE(story, nullptr);
  checked += CheckRandomWalk(story, vocab, {2}, rng, 60);
  EXPECT_GT(checked, 30);
}

TEST(TokenMatcherTest, StateWalksSharedBetweenGrammarsGiveExactMasks) {
  // The same string body in different contexts: its per-state walk is computed once per
  // vocabulary and shared; what follows the closing quote differs per grammar.
  const std::string str = "string ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\nt])* \"\\\"\"\n";
  const std::vector<std::string> grammars = {"root ::= \"{\\\"k\\\":\" string \"}\"\n" + str,
                                             "root ::= \"[\" string (\",\" string)* \"]\"\n" + str,
                                             "root ::= string \" \" [0-9]+\n" + str};
  std::mt19937 rng(Seed());
  auto vocab = RandomVocab(rng, 1500);
  int checked = 0;
  for (int round = 0; round < 2; ++round) {
    for (const std::string& gbnf : grammars) {
      auto g = MustCompile(gbnf);
      ASSERT_NE(g, nullptr);
      checked += CheckRandomWalk(g, vocab, {0}, rng, 30);
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(TokenMatcherTest, LargeRegionsGiveExactMasks) {
  // Thousands of keywords: the start state's plain region is too large to share.
  std::string gbnf = "root ::= (";
  for (int i = 0; i < 6000; ++i) gbnf += absl::StrCat(i ? " | " : "", "\"key", i * 7, ";\"");
  gbnf += ") (\",\" root)?\n";
  auto g = MustCompile(gbnf);
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(Seed());
  std::vector<std::string> bytes;
  for (int t = 0; t < 1200; ++t) {
    switch (rng() % 4) {
      case 0:
        bytes.push_back(absl::StrCat("key", rng() % 25000));
        break;
      case 1:
        bytes.push_back(absl::StrCat(rng() % 2000));
        break;
      case 2:
        bytes.push_back(absl::StrCat(rng() % 100, ",key"));
        break;
      default:
        bytes.push_back(std::string(1, "ke,y0123456789"[rng() % 14]));
        break;
    }
  }
  bytes.push_back("");  // 1200: the end token
  auto vocab = Vocabulary::Create(bytes, {});
  int checked = 0;
  for (int w = 0; w < 8; ++w) checked += CheckRandomWalk(g, vocab, {1200}, rng, 30);
  EXPECT_GT(checked, 12);
}

TEST(TokenMatcherTest, EndTokens) {
  auto g = MustCompile(R"(root ::= "ab" "c"?)");
  ASSERT_NE(g, nullptr);
  // 0 "a", 1 "b", 2 "c", 3 "ab", 4 "abc", 5 <eos> (excluded), 6 "x", 7 "c" (also a stop id).
  auto vocab = Vocabulary::Create({"a", "b", "c", "ab", "abc", "", "x", "c"},
                                  {false, false, false, false, false, true, false, false});
  TokenMatcher tm(g, vocab, {5, 7});
  auto mask_of = [&](const TokenMatcher& m) {
    std::vector<uint32_t> mask(1, 0);
    m.FillMask(mask);
    return mask[0];
  };
  EXPECT_EQ(mask_of(tm), (1u << 0) | (1u << 3) | (1u << 4));  // not accepting: no end tokens
  EXPECT_FALSE(tm.Accept(5));
  EXPECT_FALSE(tm.Accept(6));  // not allowed: no change
  EXPECT_FALSE(tm.Accept(99));
  EXPECT_FALSE(tm.Accept(-1));
  ASSERT_TRUE(tm.Accept(3));
  // Accepting: "c" as text (token 2) and the end tokens; 7 is an end token, never text.
  EXPECT_EQ(mask_of(tm), (1u << 2) | (1u << 5) | (1u << 7));
  TokenMatcher fork = tm;
  ASSERT_TRUE(fork.Accept(2));
  EXPECT_TRUE(fork.matcher().Complete());
  EXPECT_EQ(mask_of(fork), (1u << 5) | (1u << 7));
  ASSERT_TRUE(tm.Accept(7));
  EXPECT_TRUE(tm.Finished());
  EXPECT_FALSE(fork.Finished());
  EXPECT_EQ(mask_of(tm), (1u << 5) | (1u << 7));
  EXPECT_FALSE(tm.Accept(2));
  ASSERT_TRUE(fork.Accept(5));
  EXPECT_TRUE(fork.Finished());
}

TEST(TokenMatcherTest, EndTokensWhenTheVocabularyCannotSpell) {
  auto g = MustCompile(R"(root ::= "q" [0-9])");
  ASSERT_NE(g, nullptr);
  auto vocab = Vocabulary::Create({"a", "b", "", "q"}, {false, false, true, false});
  TokenMatcher tm(g, vocab, {2});
  std::vector<uint32_t> mask(1);
  tm.FillMask(mask);
  EXPECT_EQ(mask[0], 1u << 3);
  EXPECT_FALSE(tm.Accept(2));
  ASSERT_TRUE(tm.Accept(3));
  // No token spells a digit: the end token is allowed although the grammar is not accepting.
  tm.FillMask(mask);
  EXPECT_EQ(mask[0], 1u << 2);
  EXPECT_FALSE(tm.matcher().Accepting());
  EXPECT_TRUE(tm.Accept(2));
  EXPECT_TRUE(tm.Finished());
}

TEST(TokenMatcherTest, ExcludedAndEmptyTokensAreNeverAllowed) {
  auto g = MustCompile(R"(root ::= [a-z]*)");
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(Seed());
  const int n = 200 + static_cast<int>(rng() % 100);
  std::vector<std::string> bytes(n);
  std::vector<bool> excluded(n);
  for (int t = 0; t < n; ++t) {
    if (rng() % 5 != 0) bytes[t] = std::string(1 + rng() % 3, static_cast<char>('a' + rng() % 26));
    excluded[t] = rng() % 4 == 0;
  }
  auto vocab = Vocabulary::Create(bytes, excluded);
  TokenMatcher tm(g, vocab, {});
  std::vector<uint32_t> mask(vocab->mask_words());
  tm.FillMask(mask);
  int allowed = 0;
  for (int t = 0; t < n; ++t) {
    const bool expect = !excluded[t] && !bytes[t].empty();
    EXPECT_EQ(Bit(mask, t), expect) << t;
    allowed += expect;
    if (!expect) {
      EXPECT_FALSE(TokenMatcher(tm).Accept(t));
    }
  }
  EXPECT_GT(allowed, 50);
  // Bits past the vocabulary stay clear.
  for (int t = n; t < 32 * vocab->mask_words(); ++t) EXPECT_FALSE(Bit(mask, t));
}

TEST(TokenMatcherTest, CacheHitsGiveTheMasksOfMisses) {
  auto g = MustCompile(kJsonGbnf);
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(Seed());
  auto vocab = RandomVocab(rng, 800);
  auto shared = CompiledConstraint::Get(g, vocab);
  EXPECT_EQ(CompiledConstraint::Get(g, vocab), shared);  // one per pair
  // A tiny private cache, so entries are evicted and recomputed.
  auto tiny = std::make_shared<CompiledConstraint>(g, vocab, 2);
  TokenMatcher a(shared, {0});
  TokenMatcher b(tiny, {0});
  TokenMatcher c(g, vocab, {0});  // shares `shared`
  for (int step = 0; step < 60 && !a.Finished(); ++step) {
    std::vector<uint32_t> ma(vocab->mask_words()), mb(vocab->mask_words()), mc(vocab->mask_words());
    a.FillMask(ma);
    a.FillMask(ma);  // the second is a hit
    b.FillMask(mb);
    c.FillMask(mc);
    ASSERT_EQ(ma, mb) << step;
    ASSERT_EQ(ma, mc) << step;
    std::vector<int32_t> allowed;
    for (int32_t t = 1; t < vocab->size(); ++t) {
      if (Bit(ma, t)) allowed.push_back(t);
    }
    if (allowed.empty()) break;
    const int32_t pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(a.Accept(pick));
    ASSERT_TRUE(b.Accept(pick));
    ASSERT_TRUE(c.Accept(pick));
  }
  const auto stats = shared->stats();
  EXPECT_GT(stats.hits, stats.misses);  // every state was asked for at least three times
  EXPECT_GT(stats.misses, 0);
  EXPECT_LE(tiny->stats().entries, 2);
}

TEST(TokenMatcherTest, ThreadsShareTheCache) {
  auto g = MustCompile(kArithGbnf);
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(Seed());
  auto vocab = RandomVocab(rng, 1000);
  // Token sequences chosen single-threaded, with their masks.
  std::vector<std::vector<int32_t>> walks(4);
  std::vector<std::vector<std::vector<uint32_t>>> expected(4);
  for (int w = 0; w < 4; ++w) {
    TokenMatcher tm(std::make_shared<CompiledConstraint>(g, vocab, 1), {0});
    for (int step = 0; step < 30; ++step) {
      std::vector<uint32_t> mask(vocab->mask_words());
      tm.FillMask(mask);
      expected[w].push_back(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 1; t < vocab->size(); ++t) {
        if (Bit(mask, t)) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      walks[w].push_back(allowed[rng() % allowed.size()]);
      ASSERT_TRUE(tm.Accept(walks[w].back()));
    }
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 5; ++rep) {
        TokenMatcher tm(g, vocab, {0});
        for (size_t step = 0; step < expected[w].size(); ++step) {
          std::vector<uint32_t> mask(vocab->mask_words());
          tm.FillMask(mask);
          if (mask != expected[w][step]) ++mismatches[w];
          if (step < walks[w].size() && !tm.Accept(walks[w][step])) ++mismatches[w];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << w;
}

TEST(TokenMatcherTest, HostileGrammarsStayBounded) {
  std::mt19937 rng(Seed());
  auto vocab = RandomVocab(rng, 3000);
  std::vector<std::string> bytes;
  for (int i = 1; i <= 64; ++i) bytes.push_back(std::string(i, 'a'));
  for (int i = 1; i <= 64; ++i) bytes.push_back(std::string(i, '['));
  auto runs = Vocabulary::Create(bytes, std::vector<bool>(bytes.size(), false));
  const auto start = std::chrono::steady_clock::now();
  for (const char* gbnf :
       {"root ::= (\"a\" | \"a\")*", "root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\"+",
        "root ::= x\nx ::= \"a\" x y | \"\"\ny ::= \"b\" | \"\"",
        "root ::= x\nx ::= \"[\" x \"]\" | \"a\"*"}) {
    auto g = MustCompile(gbnf);
    ASSERT_NE(g, nullptr);
    for (const auto& v : {vocab, runs}) {
      TokenMatcher tm(g, v, {});
      for (int step = 0; step < 20; ++step) {
        std::vector<uint32_t> mask(v->mask_words());
        tm.FillMask(mask);
        int32_t longest = -1;
        for (int32_t t = 0; t < v->size(); ++t) {
          if (Bit(mask, t) &&
              (longest < 0 || v->token_bytes(t).size() > v->token_bytes(longest).size())) {
            longest = t;
          }
        }
        if (longest < 0 || !tm.Accept(longest)) break;
      }
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace pagoda::grammar
