// Grammar (GBNF parsing and compilation) and Matcher: every construct of the dialect, escapes
// and UTF-8, errors with their positions, left recursion, limits, matching semantics, and a
// randomized comparison with an independent backtracking recognizer.
#include "common/grammar/grammar.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/common/grammar/cpu_stopwatch.h"
#include "tests/support/status_assertions.h"

namespace pagoda::grammar {
namespace {

std::shared_ptr<const Grammar> MustCompile(const std::string& gbnf, const Limits& limits = {}) {
  auto g = Grammar::FromGbnf(gbnf, limits);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

// Whether the whole text is a sentence of the grammar.
bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.Advance(text) && m.Accepting();
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string ErrorOf(const std::string& gbnf, const Limits& limits = {}) {
  auto g = Grammar::FromGbnf(gbnf, limits);
  if (g.ok()) return "<compiled>";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

TEST(GrammarTest, LiteralsSequencesAndAlternatives) {
  auto g = MustCompile(R"(root ::= "ab" "c" | "x" ("y" | "z") "w")");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"abc", "xyw", "xzw"}) EXPECT_TRUE(Matches(g, ok)) << ok;
  for (const char* bad : {"", "ab", "abcd", "xw", "xyzw", "ac"})
    EXPECT_FALSE(Matches(g, bad)) << bad;
}

TEST(GrammarTest, CharacterClassesAndAny) {
  auto g = MustCompile(R"(root ::= [a-cx] [^a-z] .)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "a1z"));
  EXPECT_TRUE(Matches(g, "xA\xE2\x82\xAC"));  // any: a 3-byte character
  EXPECT_TRUE(Matches(g,
                      "c\xC3\xA9"
                      "b"));  // negated class: é is not in a-z
  EXPECT_FALSE(Matches(g, "d1z"));
  EXPECT_FALSE(Matches(g, "aqz"));
  EXPECT_FALSE(Matches(g, "a1"));
  EXPECT_FALSE(Matches(g, "a1zz"));
  // Classes of one member, a literal '-' at the end, escaped brackets.
  auto h = MustCompile(R"(root ::= [-] [a-] [\]\[] [\-x])");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(Matches(h, "--]-"));
  EXPECT_TRUE(Matches(h, "-a[x"));
  EXPECT_FALSE(Matches(h, "-b[x"));
}

TEST(GrammarTest, Repetitions) {
  auto g = MustCompile(
      "root ::= a b c d e f g\n"
      "a ::= \"a\"*\nb ::= \"b\"+\nc ::= \"c\"?\nd ::= \"d\"{2}\ne ::= \"e\"{2,}\n"
      "f ::= \"f\"{1,3}\ng ::= \"g\"{0}\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "bddeef"));
  EXPECT_TRUE(Matches(g, "aaabbbcddeeeeefff"));
  EXPECT_FALSE(Matches(g, "ddeef"));      // b+ needs one
  EXPECT_FALSE(Matches(g, "bccddeef"));   // c? at most one
  EXPECT_FALSE(Matches(g, "bdddeef"));    // d{2} exactly
  EXPECT_FALSE(Matches(g, "bddef"));      // e{2,} at least two
  EXPECT_FALSE(Matches(g, "bddeeffff"));  // f{1,3}
  EXPECT_FALSE(Matches(g, "bddeefg"));    // g{0} is empty
  // Spaces inside braces, stacked operators, repetition of groups and rule references.
  auto h = MustCompile("root ::= (\"x\" y){ 1 , 2 } \"z\"*?\ny ::= [0-9]");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(Matches(h, "x1"));
  EXPECT_TRUE(Matches(h, "x1x2zzz"));
  EXPECT_FALSE(Matches(h, "x1x2x3"));
}

TEST(GrammarTest, CommentsNewlinesAndNames) {
  auto g = MustCompile(
      "# leading comment\n"
      "root ::= first-rule | # after a bar, a new line may follow\n"
      "  second_rule2 # trailing comment\n"
      "\n"
      "first-rule ::= (\n"
      "  \"a\"   # inside a group newlines are fine\n"
      "  \"b\"\n"
      ")\r\n"
      "second_rule2 ::=\n"
      "  \"c\"\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "ab"));
  EXPECT_TRUE(Matches(g, "c"));
  EXPECT_FALSE(Matches(g, "abc"));
  // An empty alternative and an empty body.
  auto h = MustCompile("root ::= | \"x\" e\ne ::=\n");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(Matches(h, ""));
  EXPECT_TRUE(Matches(h, "x"));
}

TEST(GrammarTest, Escapes) {
  auto g = MustCompile(
      R"(root ::= "\n\r\t\\\"\[\]\-" "\x41\u00e9\U0001F600" [\x30-\x39] [\u0100-\u0101])");
  ASSERT_NE(g, nullptr);
  const std::string text =
      std::string("\n\r\t\\\"[]-") + "A" + Utf8(0xE9) + Utf8(0x1F600) + "7" + Utf8(0x101);
  EXPECT_TRUE(Matches(g, text));
  EXPECT_FALSE(Matches(g, text.substr(0, text.size() - 1)));
  // Raw UTF-8 in literals and classes is the code point itself.
  auto h = MustCompile("root ::= \"日本\" [α-ω]");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(Matches(h, "日本β"));
  EXPECT_FALSE(Matches(h, "日本a"));
}

TEST(GrammarTest, Utf8RangeBoundaries) {
  // A class across every encoded-length boundary matches exactly its code points.
  auto g = MustCompile(R"(root ::= [\x7e-\u0801\uFFFE-\U00010001\U0010FFFE-\U0010FFFF])");
  ASSERT_NE(g, nullptr);
  for (uint32_t cp : {0x7Eu, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0x801u, 0xFFFEu, 0xFFFFu, 0x10000u,
                      0x10001u, 0x10FFFEu, 0x10FFFFu}) {
    EXPECT_TRUE(Matches(g, Utf8(cp))) << std::hex << cp;
  }
  for (uint32_t cp : {0x7Du, 0x802u, 0xFFFDu, 0x10002u, 0x10FFFDu, 0x1234u}) {
    EXPECT_FALSE(Matches(g, Utf8(cp))) << std::hex << cp;
  }
  // `.` is any scalar value in well-formed UTF-8: never surrogates, overlong forms or bytes that
  // start no character.
  auto any = MustCompile("root ::= .");
  ASSERT_NE(any, nullptr);
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 300; ++i) {
    uint32_t cp = std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;
    EXPECT_TRUE(Matches(any, Utf8(cp))) << std::hex << cp;
  }
  for (const char* bad :
       {"\xED\xA0\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xF0\x80\x80\x80",
        "\xF4\x90\x80\x80", "\xFF", "\x80", "\xF5\x80\x80\x80"}) {
    EXPECT_FALSE(Matches(any, bad)) << absl::CHexEscape(bad);
  }
  // A negated class of 4-byte characters.
  auto neg = MustCompile(R"(root ::= [^\U00010000-\U0010FFFF])");
  ASSERT_NE(neg, nullptr);
  EXPECT_TRUE(Matches(neg, Utf8(0xFFFF)));
  EXPECT_FALSE(Matches(neg, Utf8(0x10000)));
  EXPECT_FALSE(Matches(neg, Utf8(0x1F600)));
}

TEST(GrammarTest, RecursionAndNullableRules) {
  auto g = MustCompile(
      "root ::= ws value ws\n"
      "value ::= \"[\" ws (value (ws \",\" ws value)*)? ws \"]\" | [0-9]+\n"
      "ws ::= [ ]*\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "[1, [2,[ ]], 33 ]"));
  EXPECT_TRUE(Matches(g, " 7 "));
  EXPECT_FALSE(Matches(g, "[1,]"));
  EXPECT_FALSE(Matches(g, "[[1]"));
  // Deep nesting keeps working (no recursion in the matcher).
  std::string deep(3000, '[');
  deep += "5";
  deep += std::string(3000, ']');
  EXPECT_TRUE(Matches(g, deep));
  EXPECT_FALSE(Matches(g, deep + "]"));
}

TEST(GrammarTest, AcceptingAndComplete) {
  auto g = MustCompile("root ::= \"a\" \"b\"? | \"c\"+");
  ASSERT_NE(g, nullptr);
  Matcher m(g);
  EXPECT_FALSE(m.Accepting());
  EXPECT_FALSE(m.Complete());
  ASSERT_TRUE(m.Advance("a"));
  EXPECT_TRUE(m.Accepting());
  EXPECT_FALSE(m.Complete());  // "b" may follow
  ASSERT_TRUE(m.Advance("b"));
  EXPECT_TRUE(m.Accepting());
  EXPECT_TRUE(m.Complete());
  EXPECT_FALSE(m.CanAdvance("b"));
  Matcher c(g);
  ASSERT_TRUE(c.Advance("ccc"));
  EXPECT_TRUE(c.Accepting());
  EXPECT_FALSE(c.Complete());
  // The empty grammar is complete at once.
  auto e = MustCompile("root ::= \"\"");
  ASSERT_NE(e, nullptr);
  Matcher em(e);
  EXPECT_TRUE(em.Complete());
}

TEST(GrammarTest, RejectionLeavesStateAndCopiesAreIndependent) {
  auto g = MustCompile("root ::= \"ab\" [0-9]* \"!\"");
  ASSERT_NE(g, nullptr);
  Matcher m(g);
  ASSERT_TRUE(m.Advance("ab1"));
  EXPECT_FALSE(m.Advance("2x"));  // "2" alone would pass: all-or-nothing
  EXPECT_TRUE(m.CanAdvance("2!"));
  Matcher fork = m;
  EXPECT_TRUE(fork.Advance("!"));
  EXPECT_TRUE(fork.Complete());
  EXPECT_FALSE(m.Accepting());
  EXPECT_TRUE(m.Advance("99!"));
  EXPECT_TRUE(m.Complete());
  EXPECT_TRUE(m.Advance(""));
}

TEST(GrammarTest, ByteAtATimeEqualsWholeString) {
  auto g = MustCompile(
      "root ::= item (\",\" item)*\n"
      "item ::= [a-zé€😀]+ | \"\\\"\" [^\"]* \"\\\"\"\n");
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::string> pieces = {"a",  "z",   "é",    "€",    "😀",    ",",
                                           "\"", "x y", "\xE2", "\x82", "\xAC", "\xF0\x9F"};
  for (int iter = 0; iter < 500; ++iter) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 8)(rng);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    Matcher whole(g);
    const bool whole_ok = whole.Advance(text);
    Matcher bytes(g);
    bool bytes_ok = true;
    for (char c : text) {
      if (!bytes.Advance(std::string(1, c))) {
        bytes_ok = false;
        break;
      }
    }
    ASSERT_EQ(whole_ok, bytes_ok) << absl::CHexEscape(text);
    Matcher probe(g);
    ASSERT_EQ(probe.CanAdvance(text), whole_ok);
    if (whole_ok) {
      EXPECT_EQ(whole.Accepting(), bytes.Accepting());
      EXPECT_EQ(whole.Complete(), bytes.Complete());
    }
  }
}

TEST(GrammarTest, SyntaxErrorsHavePositions) {
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nfoo ::= [a-"),
            "GBNF syntax error at 2:9: unterminated character class");
  EXPECT_EQ(ErrorOf("root ::= \"abc"), "GBNF syntax error at 1:10: unterminated literal");
  EXPECT_EQ(ErrorOf("root := \"a\""), "GBNF syntax error at 1:6: expecting ::=");
  EXPECT_EQ(ErrorOf("root ::= (\"a\""), "GBNF syntax error at 1:14: expecting ')'");
  EXPECT_EQ(ErrorOf("root ::= \"a\" )"),
            "GBNF syntax error at 1:14: expecting newline or end of rule");
  EXPECT_EQ(ErrorOf("root ::= * \"a\""), "GBNF syntax error at 1:10: expecting an item before '*'");
  EXPECT_EQ(ErrorOf("root ::= \"\\q\""), "GBNF syntax error at 1:11: unknown escape '\\q'");
  EXPECT_EQ(ErrorOf("root ::= \"\\x4\""), "GBNF syntax error at 1:14: expecting 2 hex digits");
  EXPECT_EQ(ErrorOf("root ::= \"\\uD800\""),
            "GBNF syntax error at 1:11: escape is not a Unicode scalar value");
  EXPECT_EQ(ErrorOf("root ::= \"\\U00110000\""),
            "GBNF syntax error at 1:11: escape is not a Unicode scalar value");
  EXPECT_EQ(ErrorOf("root ::= [z-a]"), "GBNF syntax error at 1:13: character range out of order");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{3,1}"),
            "GBNF syntax error at 1:13: repetition {m,n} with n < m");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{,1}"), "GBNF syntax error at 1:14: expecting an integer");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{1"), "GBNF syntax error at 1:15: expecting '}'");
  EXPECT_EQ(ErrorOf("root ::= \"\xC3\""), "GBNF syntax error at 1:11: invalid UTF-8");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\n  ::= \"b\""),
            "GBNF syntax error at 2:3: expecting a rule name");
  EXPECT_EQ(ErrorOf("root ::= <[1]>"),
            "GBNF syntax error at 1:10: expecting newline or end of rule");
}

TEST(GrammarTest, SemanticErrors) {
  EXPECT_EQ(ErrorOf("root ::= a b\na ::= \"x\""), "undefined rule 'b' (used at 1:12)");
  EXPECT_EQ(ErrorOf("start ::= \"x\""), "grammar has no 'root' rule");
  EXPECT_EQ(ErrorOf(""), "grammar has no 'root' rule");
  EXPECT_EQ(ErrorOf("root ::= \"x\"\nroot ::= \"y\""), "rule 'root' defined twice (at 2:1)");
}

TEST(GrammarTest, LeftRecursionIsRefused) {
  EXPECT_EQ(ErrorOf("root ::= root \"a\" | \"b\""),
            "left recursion: rule 'root' can reach itself without consuming input (root -> root)");
  EXPECT_EQ(ErrorOf("root ::= a\na ::= b \"x\"\nb ::= a | \"y\""),
            "left recursion: rule 'a' can reach itself without consuming input (a -> b -> a)");
  // Through a nullable prefix: an optional item, a nullable rule, a star.
  for (const char* g :
       {"root ::= \"x\"? root \"a\" | \"b\"", "root ::= n root \"a\" | \"b\"\nn ::= \"\" | \"x\"",
        "root ::= [a]* (root) \"a\" | \"b\"", "root ::= n n root | \"b\"\nn ::= \"x\"*"}) {
    EXPECT_NE(ErrorOf(g).find("left recursion"), std::string::npos) << g;
  }
  // Right recursion and recursion after a consumed byte are fine.
  EXPECT_EQ(ErrorOf("root ::= \"a\" root | \"b\""), "<compiled>");
  EXPECT_EQ(ErrorOf("root ::= n \"a\" root | \"b\"\nn ::= \"x\"?"), "<compiled>");
}

TEST(GrammarTest, Limits) {
  Limits small;
  small.max_source_bytes = 20;
  EXPECT_NE(ErrorOf("root ::= \"aaaaaaaaaaaaaaaaaaaaa\"", small).find("max_source_bytes"),
            std::string::npos);
  Limits rules;
  rules.max_rules = 3;
  EXPECT_NE(
      ErrorOf("root ::= a b c\na ::= \"1\"\nb ::= \"2\"\nc ::= \"3\"", rules).find("max_rules"),
      std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{10001}").find("max_repetition"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{1,99999999999999999999}").find("max_repetition"),
            std::string::npos);
  Limits states;
  states.max_states = 1000;
  EXPECT_NE(ErrorOf("root ::= [a-z]{0,2000}", states).find("max_states"), std::string::npos);
  // Nested repetitions multiply: refused by max_states, quickly.
  const ::pagoda::grammar::testing::CpuStopwatch cpu;
  EXPECT_NE(ErrorOf("root ::= ((((\"abc\"{10000}){10000}){10000}){10000})").find("max_states"),
            std::string::npos);
  EXPECT_LT(cpu.Elapsed(), std::chrono::seconds(10));
  // Deep nesting of groups is a syntax error, not a stack overflow.
  std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(ErrorOf(deep).find("nested deeper"), std::string::npos);
  std::string ops = "root ::= \"a\"" + std::string(100000, '*');
  EXPECT_NE(ErrorOf(ops).find("nested deeper"), std::string::npos);
  // A bounded repetition within the limits compiles and counts correctly.
  auto g = MustCompile("root ::= [a-z]{0,3000} \"!\"");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, std::string(3000, 'q') + "!"));
  EXPECT_FALSE(Matches(g, std::string(3001, 'q') + "!"));
}

TEST(GrammarTest, StackCapRejectsBytes) {
  // Every 'a' opens a frame whose continuation (an optional "b") stays live: the number of
  // stacks grows by one per byte.
  Limits limits;
  limits.max_stacks = 8;
  auto g = MustCompile("root ::= x\nx ::= \"a\" x y | \"\"\ny ::= \"b\" | \"\"", limits);
  ASSERT_NE(g, nullptr);
  Matcher m(g);
  int accepted = 0;
  while (accepted < 100 && m.Advance("a")) ++accepted;
  EXPECT_GE(accepted, 4);
  EXPECT_LT(accepted, 10);
  EXPECT_TRUE(m.Accepting());  // the state before the refused byte is kept
  EXPECT_TRUE(m.Advance("b"));
}

TEST(GrammarTest, HostileGrammarsStayBounded) {
  const ::pagoda::grammar::testing::CpuStopwatch cpu;
  // Exponential ambiguity.
  for (const char* gbnf :
       {"root ::= (\"a\" | \"a\")*", "root ::= x*\nx ::= \"a\" | \"a\" \"a\" | y\ny ::= \"a\"+",
        "root ::= (x | x x)*\nx ::= \"a\"*\n",
        "root ::= x\nx ::= (\"a\" | \"\") x? (\"a\" | \"\") | \"a\""}) {
    auto g = Grammar::FromGbnf(gbnf);
    if (!g.ok()) {
      EXPECT_NE(g.status().message().find("left recursion"), std::string::npos) << g.status();
      continue;
    }
    Matcher m(*g);
    for (int i = 0; i < 2000; ++i) {
      if (!m.Advance("a")) break;
    }
  }
  // A huge alternation.
  std::string alt = "root ::= ";
  for (int i = 0; i < 5000; ++i) alt += absl::StrFormat("%s\"k%d\"", i ? " | " : "", i);
  auto g = MustCompile(alt);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "k4321"));
  EXPECT_FALSE(Matches(g, "k5000"));
  // Many rules in a chain.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) chain += absl::StrFormat("r%d ::= \"x\" r%d | \"y\"\n", i, i + 1);
  chain += "r5000 ::= \"z\"\n";
  auto c = MustCompile(chain);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Matches(c, std::string(5000, 'x') + "z"));
  EXPECT_TRUE(Matches(c, std::string(17, 'x') + "y"));
  EXPECT_LT(cpu.Elapsed(), std::chrono::seconds(20));
}

TEST(GrammarTest, MutatedSourcesCompileOrFailCleanly) {
  const std::vector<std::string> seeds = {
      "root ::= ws value ws\nvalue ::= \"[\" ws (value (\",\" ws value)*)? \"]\" | [0-9]+\n"
      "ws ::= [ \\t\\n]*\n",
      "root ::= (\"a\"{2,5} | [^x-z\\u00e9]+ .)* # c\nr-1 ::= root? \"\\U0001F600\"\n",
      "root ::= x\nx ::= \"(\" x \")\" x | \"\"\n"};
  const std::string alphabet = "\"[]()|*+?{},.-^\\#:= \nax0";
  uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !src.empty(); ++e) {
      const size_t at = rng() % src.size();
      switch (rng() % 3) {
        case 0:
          src.erase(at, 1);
          break;
        case 1:
          src.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          src[at] = static_cast<char>(rng() % 256);
          break;
      }
    }
    auto g = Grammar::FromGbnf(src);
    if (!g.ok()) {
      ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
      ++failed;
      continue;
    }
    ++ok;
    Matcher m(*g);
    for (int i = 0; i < 20; ++i) {
      const std::string byte(1, alphabet[rng() % alphabet.size()]);
      m.CanAdvance(byte);
      m.Advance(byte);
    }
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(failed, 100);
}

// ---------------------------------------------------------------------------------------------
// Randomized comparison with a backtracking recognizer over code points.

struct RExpr {
  enum Kind { kSeq, kAlt, kChars, kRef, kRepeat } kind = kSeq;
  std::vector<RExpr> kids;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars (after negation)
  bool single = false;                                // kChars from a literal character
  int rule = 0;
  int min = 0, max = 0;  // max -1: unbounded
};

const std::vector<uint32_t> kAlphabet = {'a', 'b', 'c', 0xE9, 0x20AC, 0x1D11E};

class RandomGrammar {
 public:
  explicit RandomGrammar(std::mt19937& rng) : rng_(rng) {
    const int n = Rand(1, 4);
    rules_.resize(n);
    for (int r = 0; r < n; ++r) rules_[r] = Gen(0, n);
  }

  std::string Gbnf() {
    std::string out;
    for (size_t r = 0; r < rules_.size(); ++r) {
      out += Name(r) + " ::= " + Print(rules_[r]) + "\n";
    }
    return out;
  }

  // Ends of the root from position 0 over `text`; kExhausted: the text ran out inside.
  static constexpr int kExhausted = 1 << 20;
  std::set<int> RootEnds(const std::vector<uint32_t>& text) {
    text_ = &text;
    memo_.clear();
    in_progress_.clear();
    return Match(rules_[0], {0});
  }

 private:
  int Rand(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  static std::string Name(size_t r) { return r == 0 ? "root" : absl::StrCat("r-", r, "_x"); }

  uint32_t RandCp() { return kAlphabet[Rand(0, static_cast<int>(kAlphabet.size()) - 1)]; }

  RExpr Gen(int depth, int rules) {
    RExpr e;
    const int pick = depth >= 3 ? Rand(0, 2) : Rand(0, 6);
    switch (pick) {
      case 0: {  // literal (a sequence of single characters)
        e.kind = RExpr::kSeq;
        const int n = Rand(0, 3);
        for (int i = 0; i < n; ++i) {
          RExpr c;
          c.kind = RExpr::kChars;
          c.single = true;
          const uint32_t cp = RandCp();
          c.ranges = {{cp, cp}};
          e.kids.push_back(c);
        }
        return e;
      }
      case 1: {  // class or any
        e.kind = RExpr::kChars;
        if (Rand(0, 5) == 0) {
          e.ranges = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
          e.rule = -1;  // printed as '.'
          return e;
        }
        std::vector<std::pair<uint32_t, uint32_t>> raw;
        const int n = Rand(1, 3);
        for (int i = 0; i < n; ++i) {
          uint32_t a = RandCp(), b = RandCp();
          if (a > b) std::swap(a, b);
          if (Rand(0, 1)) b = a;
          raw.push_back({a, b});
        }
        e.min = Rand(0, 3) == 0;  // negated
        e.kids.clear();
        printed_.push_back(raw);
        e.max = static_cast<int>(printed_.size()) - 1;  // index of the printed ranges
        e.ranges = raw;
        if (e.min) {
          // Complement over Unicode scalars.
          std::sort(raw.begin(), raw.end());
          std::vector<std::pair<uint32_t, uint32_t>> comp;
          uint32_t next = 0;
          for (auto [lo, hi] : raw) {
            if (lo > next) comp.push_back({next, lo - 1});
            next = std::max(next, hi + 1);
          }
          comp.push_back({next, 0x10FFFF});
          e.ranges = comp;
        }
        return e;
      }
      case 2: {
        e.kind = RExpr::kRef;
        e.rule = Rand(0, rules - 1);
        return e;
      }
      case 3:
      case 4: {
        e.kind = Rand(0, 1) ? RExpr::kSeq : RExpr::kAlt;
        const int n = Rand(1, 3);
        for (int i = 0; i < n; ++i) e.kids.push_back(Gen(depth + 1, rules));
        return e;
      }
      default: {
        e.kind = RExpr::kRepeat;
        e.kids.push_back(Gen(depth + 1, rules));
        switch (Rand(0, 5)) {
          case 0:
            e.min = 0, e.max = -1;
            break;
          case 1:
            e.min = 1, e.max = -1;
            break;
          case 2:
            e.min = 0, e.max = 1;
            break;
          case 3:
            e.min = e.max = Rand(0, 3);
            break;
          case 4:
            e.min = Rand(0, 2), e.max = -1;
            break;
          default:
            e.min = Rand(0, 2), e.max = e.min + Rand(0, 2);
            break;
        }
        return e;
      }
    }
  }

  std::string Char(uint32_t cp) {
    switch (Rand(0, 3)) {
      case 0:
        return Utf8(cp);
      case 1:
        return cp < 0x100 ? absl::StrFormat("\\x%02x", cp) : Utf8(cp);
      case 2:
        return cp < 0x10000 ? absl::StrFormat("\\u%04X", cp) : Utf8(cp);
      default:
        return absl::StrFormat("\\U%08x", cp);
    }
  }

  std::string Print(const RExpr& e) {
    switch (e.kind) {
      case RExpr::kChars: {
        if (e.single) return "\"" + Char(e.ranges[0].first) + "\"";
        if (e.rule == -1) return ".";
        std::string s = e.min ? "[^" : "[";
        for (auto [lo, hi] : printed_[e.max]) {
          s += Char(lo);
          if (hi != lo) s += "-" + Char(hi);
        }
        return s + "]";
      }
      case RExpr::kRef:
        return Name(e.rule);
      case RExpr::kRepeat: {
        std::string s = "(" + Print(e.kids[0]) + ")";
        if (e.min == 0 && e.max == -1) return s + "*";
        if (e.min == 1 && e.max == -1) return s + "+";
        if (e.min == 0 && e.max == 1) return s + "?";
        if (e.max == -1) return s + absl::StrFormat("{%d,}", e.min);
        if (e.min == e.max) return s + absl::StrFormat("{%d}", e.min);
        return s + absl::StrFormat("{%d,%d}", e.min, e.max);
      }
      case RExpr::kSeq: {
        if (e.kids.empty()) return "\"\"";
        std::string s = "(";
        for (const RExpr& k : e.kids) s += Print(k) + " ";
        return s + ")";
      }
      case RExpr::kAlt: {
        std::string s = "(";
        for (size_t i = 0; i < e.kids.size(); ++i) s += (i ? " | " : "") + Print(e.kids[i]);
        return s + ")";
      }
    }
    return "";
  }

  // Positions reachable after `e` from each of `from`.
  std::set<int> Match(const RExpr& e, const std::set<int>& from) {
    const int n = static_cast<int>(text_->size());
    std::set<int> out;
    switch (e.kind) {
      case RExpr::kChars:
        for (int p : from) {
          if (p == kExhausted || p == n) {
            out.insert(kExhausted);
            continue;
          }
          const uint32_t c = (*text_)[p];
          for (auto [lo, hi] : e.ranges) {
            if (c >= lo && c <= hi && !(c >= 0xD800 && c <= 0xDFFF)) out.insert(p + 1);
          }
        }
        return out;
      case RExpr::kRef:
        for (int p : from) {
          if (p == kExhausted) {
            out.insert(kExhausted);
            continue;
          }
          const auto key = std::make_pair(e.rule, p);
          auto it = memo_.find(key);
          if (it == memo_.end()) {
            // The grammar compiled, so it has no left recursion: (rule, p) cannot recur.
            if (!in_progress_.insert(key).second) {
              ADD_FAILURE() << "left recursion not refused";
              return out;
            }
            std::set<int> ends = Match(rules_[e.rule], {p});
            in_progress_.erase(key);
            it = memo_.emplace(key, std::move(ends)).first;
          }
          out.insert(it->second.begin(), it->second.end());
        }
        return out;
      case RExpr::kSeq: {
        std::set<int> cur = from;
        for (const RExpr& k : e.kids) cur = Match(k, cur);
        return cur;
      }
      case RExpr::kAlt:
        for (const RExpr& k : e.kids) {
          std::set<int> r = Match(k, from);
          out.insert(r.begin(), r.end());
        }
        return out;
      case RExpr::kRepeat: {
        std::set<int> cur = from;
        for (int i = 0; i < e.min; ++i) cur = Match(e.kids[0], cur);
        out = cur;
        if (e.max < 0) {
          std::set<int> frontier = cur;
          while (!frontier.empty()) {
            std::set<int> next = Match(e.kids[0], frontier), fresh;
            for (int p : next) {
              if (out.insert(p).second) fresh.insert(p);
            }
            frontier = std::move(fresh);
          }
        } else {
          for (int i = e.min; i < e.max; ++i) {
            cur = Match(e.kids[0], cur);
            out.insert(cur.begin(), cur.end());
          }
        }
        return out;
      }
    }
    return out;
  }

  std::mt19937& rng_;
  std::vector<RExpr> rules_;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> printed_;
  const std::vector<uint32_t>* text_ = nullptr;
  std::map<std::pair<int, int>, std::set<int>> memo_;
  std::set<std::pair<int, int>> in_progress_;
};

std::string Show(const std::vector<uint32_t>& text) {
  std::string s;
  for (uint32_t c : text) s += Utf8(c);
  return s;
}

TEST(GrammarTest, RandomGrammarsAgreeWithBacktrackingReference) {
  uint32_t seed = std::random_device{}();
  if (const char* env = std::getenv("GRAMMAR_TEST_SEED")) seed = std::stoul(env);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  int compiled = 0, accepted_strings = 0, rejected_prefixes = 0;
  for (int gi = 0; gi < 300; ++gi) {
    RandomGrammar rg(rng);
    const std::string gbnf = rg.Gbnf();
    // Random grammars can be very ambiguous; the reference knows no stack cap.
    Limits limits;
    limits.max_stacks = 1 << 18;
    auto g = Grammar::FromGbnf(gbnf, limits);
    if (!g.ok()) {
      ASSERT_NE(g.status().message().find("left recursion"), std::string::npos)
          << g.status() << "\n"
          << gbnf;
      continue;
    }
    ++compiled;
    for (int si = 0; si < 40; ++si) {
      std::vector<uint32_t> text(std::uniform_int_distribution<int>(0, 7)(rng));
      for (uint32_t& c : text) c = kAlphabet[rng() % kAlphabet.size()];
      // Per character: the matcher advances iff the prefix can still be completed or extended
      // (the reference ran out of text inside the root, or ended exactly there).
      Matcher m(*g);
      bool alive = true;
      for (size_t i = 0; i <= text.size() && alive; ++i) {
        const std::vector<uint32_t> prefix(text.begin(), text.begin() + i);
        const std::set<int> ends = rg.RootEnds(prefix);
        const bool full = ends.count(static_cast<int>(i)) > 0;
        const bool viable = full || ends.count(RandomGrammar::kExhausted) > 0;
        if (i > 0) {
          const bool advanced = m.Advance(Utf8(text[i - 1]));
          ASSERT_EQ(advanced, viable) << gbnf << "prefix " << Show(prefix);
          if (!advanced) {
            ++rejected_prefixes;
            alive = false;
            break;
          }
        }
        ASSERT_EQ(m.Accepting(), full) << gbnf << "prefix " << Show(prefix);
        if (full) ++accepted_strings;
      }
    }
  }
  EXPECT_GT(compiled, 150);
  EXPECT_GT(accepted_strings, 100);
  EXPECT_GT(rejected_prefixes, 100);
}

}  // namespace
}  // namespace pagoda::grammar
