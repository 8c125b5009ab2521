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
#include "common/grammar/json_schema.h"
#include "gtest/gtest.h"
#include "modelgen/synthetic_vocab.h"
#include "tests/common/grammar/cpu_stopwatch.h"
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

// Tokens of up to 40 bytes over a few characters (letters, digits, a space, JSON punctuation, a
// backslash, 2- and 3-byte UTF-8), among them runs of one character: the trie is deeper than
// the depth to which state walks are shared, and the repetitions below are longer still.
std::shared_ptr<const Vocabulary> LongTokenVocab(std::mt19937& rng, int size) {
  const std::vector<std::string> pieces = {"a",  "e", "x", "m",  " ", "\"", ",", "}", "]", ":",
                                           "\\", "n", "é", "日", "0", "7",  "-", ".", "@", "{",
                                           "[",  "i", "l", "k",  "o", "r",  "t", "z"};
  std::vector<std::string> bytes(pieces.begin(), pieces.end());
  bytes.push_back("");  // pieces.size(), 28: the end token
  while (static_cast<int>(bytes.size()) < size) {
    std::string s;
    switch (rng() % 4) {
      case 0:  // a run
        for (size_t n = 10 + rng() % 31, i = 0; i < n; ++i) s += "ax \"é"[rng() % 5 == 0 ? 3 : 0];
        if (rng() % 2) s = std::string(10 + rng() % 31, "ab x"[rng() % 4]);
        break;
      case 1:  // text, maybe with a quote and what follows one
        for (size_t n = 4 + rng() % 12, i = 0; i < n; ++i) s += pieces[rng() % 10];
        break;
      default:
        for (size_t n = 1 + rng() % 4, i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
        break;
    }
    if (s.size() > 40) s.resize(40);
    bytes.push_back(s);
  }
  return Vocabulary::Create(std::move(bytes), {});
}

// Follows a walk that takes the shortest allowed text token (so it stops at every position of
// a repetition) or the longest, checking every mask against the brute force, and that Accept
// refuses a token the mask does not allow. Returns the number of masks checked.
int CheckExtremeWalk(const std::shared_ptr<const Grammar>& g,
                     const std::shared_ptr<const Vocabulary>& vocab, int32_t end, bool shortest,
                     int steps) {
  TokenMatcher tm(g, vocab, {end});
  int checked = 0;
  for (int step = 0; step < steps && !tm.Finished(); ++step) {
    std::vector<uint32_t> mask(vocab->mask_words());
    tm.FillMask(mask);
    if (mask != BruteForceMask(tm, *vocab)) {
      ADD_FAILURE() << "mask differs from the brute force at step " << step;
      return checked;
    }
    ++checked;
    int32_t pick = -1, refused = -1;
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (!Bit(mask, t)) {
        if (refused < 0 && !vocab->excluded(t)) refused = t;
        continue;
      }
      if (t == end) continue;
      const size_t len = vocab->token_bytes(t).size();
      if (pick < 0 || (shortest ? len < vocab->token_bytes(pick).size()
                                : len > vocab->token_bytes(pick).size())) {
        pick = t;
      }
    }
    if (refused >= 0) {
      EXPECT_FALSE(tm.Accept(refused)) << "token " << refused << " at step " << step;
      std::vector<uint32_t> again(vocab->mask_words());
      tm.FillMask(again);
      EXPECT_EQ(again, mask) << "a refused token changed the state at step " << step;
    }
    if (pick < 0) pick = end;
    EXPECT_TRUE(tm.Accept(pick)) << "token " << pick << " at step " << step;
  }
  return checked;
}

TEST(TokenMatcherTest, BoundedRepetitionsLongerThanTheSharedWalksGiveExactMasks) {
  // Positions of a bounded repetition far from its end share one walk to a fixed depth, each
  // grammar walking on below it; those near the end (or before a minimum) have walks of their
  // own; what follows a closing quote is cut from the shared walk; a called rule that may end
  // inside a repetition returns from the walk (and makes two-stack configurations). The same
  // vocabulary throughout, so later grammars reuse earlier grammars' walks.
  const uint32_t seed = Seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  auto vocab = LongTokenVocab(rng, 700);
  const int32_t end = 28;
  ASSERT_EQ(vocab->token_bytes(end), "");
  std::vector<std::string> grammars = {
      R"(root ::= "{\"k\":\"" [^"\\]{0,60} "\"}")",
      R"(root ::= "{\"other\":\"" [^"\\]{0,75} "\"," "\"n\":" [0-9]{1,3} "}")",
      R"(root ::= "[" "\"" [a-z é]{20,45} "\"" ( "," "\"" [a-z é]{20,45} "\"" )* "]")",
      "root ::= \"(\" item \")\"\nitem ::= [a-z]{1,50} (\".\" [a-z]{1,30})? (\",\" item)?",
  };
  for (const char* schema :
       {R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 70},
            "email": {"type": "string", "format": "email"}}, "required": ["name", "email"]})",
        R"({"type": "array", "items": {"type": "string", "minLength": 20, "maxLength": 50}})"}) {
    auto gbnf = JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema));
    ASSERT_TRUE(gbnf.ok()) << gbnf.status();
    grammars.push_back(*gbnf);
  }
  int checked = 0;
  for (int round = 0; round < 2; ++round) {
    for (const std::string& gbnf : grammars) {
      SCOPED_TRACE(gbnf);
      auto g = MustCompile(gbnf);
      ASSERT_NE(g, nullptr);
      checked += CheckExtremeWalk(g, vocab, end, /*shortest=*/true, 120);
      checked += CheckExtremeWalk(g, vocab, end, /*shortest=*/false, 40);
      for (int w = 0; w < 3; ++w) checked += CheckRandomWalk(g, vocab, {end}, rng, 60);
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(TokenMatcherTest, SmallStackLimitsGiveExactMasks) {
  // With few stacks allowed, a mask combined from walks apart (a configuration's stacks, a
  // rule's returns) could allow a token whose whole step exceeds the limit; such masks are
  // walked whole instead.
  const uint32_t seed = Seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  auto vocab = LongTokenVocab(rng, 500);
  std::vector<std::string> runs;
  for (int i = 1; i <= 24; ++i) runs.push_back(std::string(i, 'a'));
  for (int i = 1; i <= 24; ++i) runs.push_back(std::string(i, 'b'));
  runs.push_back("");
  auto run_vocab = Vocabulary::Create(runs, {});
  Limits limits;
  limits.max_stacks = 3;
  int checked = 0;
  for (const char* gbnf : {"root ::= \"(\" item \")\"\nitem ::= [a-z]{1,50} (\",\" item)?",
                           "root ::= x\nx ::= \"a\" x y | \"\"\ny ::= \"b\" | \"\"",
                           "root ::= x x\nx ::= [ab]* | \"a\" x"}) {
    SCOPED_TRACE(gbnf);
    auto g = Grammar::FromGbnf(gbnf, limits);
    ASSERT_TRUE(g.ok()) << g.status();
    checked += CheckExtremeWalk(*g, vocab, 28, /*shortest=*/true, 40);
    checked += CheckExtremeWalk(*g, run_vocab, 48, /*shortest=*/true, 40);
    checked += CheckExtremeWalk(*g, run_vocab, 48, /*shortest=*/false, 20);
    for (int w = 0; w < 4; ++w) checked += CheckRandomWalk(*g, run_vocab, {48}, rng, 30);
  }
  EXPECT_GT(checked, 50);
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
  // Thousands of words spelled with classes (no narrow states to cut the region at): more
  // than 4096 states within the shared walks' depth.
  std::string classes = "root ::= (";
  for (int i = 0; i < 5000; ++i) {
    classes += i ? " | " : "";
    for (int b = 0; b < 13; ++b) classes += (i >> b) & 1 ? "[a-b] " : "[c-d] ";
    classes += "\";\"";
  }
  classes += ") root?\n";
  auto wide = MustCompile(classes);
  ASSERT_NE(wide, nullptr);
  std::vector<std::string> words;
  for (int t = 0; t < 600; ++t) {
    std::string w;
    for (size_t n = 1 + rng() % 16, i = 0; i < n; ++i) w += "abcd;"[rng() % 5];
    if (t % 3 == 0) w += ';';
    words.push_back(w);
  }
  for (int t = 0; t < 100; ++t) {  // whole words and what follows: past the region's boundary
    std::string w;
    for (int i = static_cast<int>(rng() % 5000), b = 0; b < 13; ++b)
      w += "ac"[(i >> b) & 1 ? 0 : 1];
    words[t] = w + ";" + std::string(t % 3, 'b');
  }
  words.push_back("");  // 600: the end token
  auto word_vocab = Vocabulary::Create(words, {});
  checked += CheckExtremeWalk(wide, word_vocab, 600, /*shortest=*/false, 20);
  for (int w = 0; w < 8; ++w) checked += CheckRandomWalk(wide, word_vocab, {600}, rng, 30);
  EXPECT_GT(checked, 30);
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
  const ::pagoda::grammar::testing::CpuStopwatch cpu;
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
  EXPECT_LT(cpu.Elapsed(), std::chrono::seconds(30));
}

}  // namespace
}  // namespace pagoda::grammar
