// RegexToGbnf / RegexGrammar: the GBNF accepts exactly the texts the pattern matches in full
// (checked against std::regex's ECMAScript grammar on random texts), JSON-string and search
// modes, length bounds, and errors that name the construct and its byte offset.

// GCC 12 at -O1 with the sanitizers reports -Wmaybe-uninitialized inside libstdc++'s std::regex
// (a std::function in its NFA states), a false positive in system code; it is reported where
// std_function.h was included, so the whole file ignores it (clang has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "common/grammar/regex.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/grammar/gbnf_reference.h"

namespace pagoda::grammar {
namespace {

using testing::CheckedGrammar;

std::string Grammar(const std::string& pattern, const RegexOptions& options = {}) {
  auto g = RegexGrammar(pattern, options);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status();
  return g.ok() ? *g : "root ::= \"unreachable\"";
}

// Patterns std::regex (ECMAScript) reads the same way, over ASCII.
const std::vector<std::string> kPatterns = {
    "abc",         "a|b",        "a*b+c?",      "(ab|cd)*",      "[a-c]{2,4}", "x{3}",
    "(a|b){1,3}c", "[^ab]*",     "\\d+",        "\\w\\s\\W",     ".*a.*",      "(a*)*b",
    "(a|)+",       "(?:ab)?c",   "a{2,}",       "[\\-a]+",       "[a-]",       "(a|bc|)d",
    "^ab$",        "\\.x",       "[.]",         "a.c",           "(a*b*)*",    "((a|b)c?){0,2}",
    "a??b*?",      "[\\d.]+",    "(x|y)(x|y)?", "\\D\\S",        "[^\\w]+",    "a{0,2}b{1}",
    "(a+|b+)*c",   "[a-c-]x",    "(|a)b",       "\\x61\\u0062c", "\\t|\\n",    "(a|b)*a(a|b)",
    "[\\s\\d]{2}", "a(?:b|c)*d", "\\[x\\]",     "\\/\\.",
};

std::string RandomText(std::mt19937& rng, const std::string& alphabet, int max_len) {
  std::uniform_int_distribution<int> len(0, max_len);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string s;
  for (int i = len(rng); i > 0; --i) s += alphabet[pick(rng)];
  return s;
}

TEST(RegexTest, MatchesStdRegexOnRandomTexts) {
  std::mt19937 rng(1234);
  const std::string alphabet = "abcdxy.-[]/1 \t\n_\"\\";
  for (const auto& pattern : kPatterns) {
    CheckedGrammar grammar(Grammar(pattern));
    ASSERT_TRUE(grammar.ok()) << pattern;
    std::regex re(pattern, std::regex::ECMAScript);
    int matched = 0;
    for (int i = 0; i < 600; ++i) {
      std::string text = RandomText(rng, alphabet, 7);
      bool expected = std::regex_match(text, re);
      matched += expected;
      EXPECT_EQ(grammar.Accepts(text), expected)
          << "pattern " << pattern << " text \"" << text << "\"\n"
          << Grammar(pattern);
    }
    // Texts built from the pattern's own letters, so that most patterns match some.
    std::string own = "ab";
    for (char c : pattern) {
      if (c != '(' && c != ')' && c != '|' && c != '*' && c != '+' && c != '?') own += c;
    }
    for (int i = 0; i < 600; ++i) {
      std::string text = RandomText(rng, own, 6);
      bool expected = std::regex_match(text, re);
      matched += expected;
      EXPECT_EQ(grammar.Accepts(text), expected)
          << "pattern " << pattern << " text \"" << text << "\"\n"
          << Grammar(pattern);
    }
    // A few fixed texts that some of the patterns match exactly.
    for (const std::string text : {"abc", "xxx", "[x]", "/.", "ab", "aab", "cd", "d", "a1", "\t"}) {
      bool expected = std::regex_match(text, re);
      matched += expected;
      EXPECT_EQ(grammar.Accepts(text), expected) << "pattern " << pattern << " text " << text;
    }
    EXPECT_GT(matched, 0) << "no text matched " << pattern << ": a weak test";
  }
}

TEST(RegexTest, EmitsCompactGbnf) {
  EXPECT_EQ(Grammar("a[b-d]*"), "root ::= \"a\" [b-d]*\n");
  EXPECT_EQ(Grammar("abc|d{2,3}"), "root ::= \"abc\" | \"d\"{2,3}\n");
  EXPECT_EQ(Grammar("."), "root ::= [^\\n\\r\\u2028\\u2029]\n");
  // (a*)* repeats only non-empty matches: no rule reaches itself without consuming.
  EXPECT_EQ(Grammar("(a*)*"), "root ::= \"a\"+*\n");
}

TEST(RegexTest, Unicode) {
  CheckedGrammar g(Grammar("é+[α-γ]\\u{1F600}\\uD83D\\uDE01."));
  EXPECT_TRUE(g.Accepts("ééβ😀😁x"));
  EXPECT_TRUE(g.Accepts("éγ😀😁😀"));
  EXPECT_FALSE(g.Accepts("éδ😀😁x"));
  EXPECT_FALSE(g.Accepts("eβ😀😁x"));
  CheckedGrammar not_space(Grammar("\\S"));
  EXPECT_TRUE(not_space.Accepts("中"));
  EXPECT_FALSE(not_space.Accepts("\u3000"));  // ideographic space is \s
  EXPECT_FALSE(not_space.Accepts("\u00a0"));
}

TEST(RegexTest, JsonStringSpellsCharactersAsJsonDoes) {
  RegexOptions o;
  o.json_string = true;
  CheckedGrammar dot(Grammar("a.b", o));
  EXPECT_TRUE(dot.Accepts("axb"));
  EXPECT_TRUE(dot.Accepts("a\\\"b"));      // a"b
  EXPECT_TRUE(dot.Accepts("a\\\\b"));      // a\b
  EXPECT_TRUE(dot.Accepts("a\\u0001b"));   // a U+0001 b
  EXPECT_TRUE(dot.Accepts("a\\tb"));       // a TAB b
  EXPECT_FALSE(dot.Accepts("a\"b"));       // a raw quote ends the JSON string
  EXPECT_FALSE(dot.Accepts("a\\nb"));      // newline: `.` excludes it
  EXPECT_FALSE(dot.Accepts("a\tb"));       // raw control character
  EXPECT_FALSE(dot.Accepts("a\\u0009b"));  // TAB has a shorter canonical spelling
  CheckedGrammar quote(Grammar("[\"\\\\]{2}\\n", o));
  EXPECT_TRUE(quote.Accepts("\\\"\\\\\\n"));
  EXPECT_FALSE(quote.Accepts("\"\\\\\\n"));
}

TEST(RegexTest, SearchWrapsUnanchoredSides) {
  RegexOptions o;
  o.search = true;
  CheckedGrammar plain(Grammar("ab+c", o));
  EXPECT_TRUE(plain.Accepts("abbc"));
  EXPECT_TRUE(plain.Accepts("xx\nabcyy"));
  EXPECT_FALSE(plain.Accepts("acb"));
  CheckedGrammar start(Grammar("^ab", o));
  EXPECT_TRUE(start.Accepts("abzz"));
  EXPECT_FALSE(start.Accepts("zab"));
  CheckedGrammar both(Grammar("^a|b$", o));
  EXPECT_TRUE(both.Accepts("axx"));
  EXPECT_TRUE(both.Accepts("xxb"));
  EXPECT_FALSE(both.Accepts("xax"));
  CheckedGrammar full(Grammar("^[0-9]{2}$", o));
  EXPECT_TRUE(full.Accepts("42"));
  EXPECT_FALSE(full.Accepts("421"));
}

TEST(RegexTest, LengthBounds) {
  RegexOptions o;
  o.search = true;
  o.max_length = 3;
  CheckedGrammar narrowed(Grammar("^[a-z]+$", o));
  EXPECT_TRUE(narrowed.Accepts("abc"));
  EXPECT_FALSE(narrowed.Accepts("abcd"));
  EXPECT_FALSE(narrowed.Accepts(""));
  o.min_length = 2;
  CheckedGrammar implied(Grammar("^(ab|xyz)$", o));
  EXPECT_TRUE(implied.Accepts("xyz"));
  auto unenforceable = RegexGrammar("abc", o);  // a search has no maximum length
  EXPECT_EQ(unenforceable.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unenforceable.status().message().find("length"), std::string::npos);
  o.min_length = 5;
  o.max_length = 9;
  auto empty = RegexGrammar("^[a-z]{1,3}$", o);
  EXPECT_FALSE(empty.ok());
}

TEST(RegexTest, ErrorsNameTheConstructAndOffset) {
  struct Case {
    std::string pattern;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a(?=b)", "lookahead at byte 1"},
      {"a(?<!b)", "lookbehind at byte 1"},
      {"(a)\\1", "backreference at byte 3"},
      {"(?<n>a)\\k<n>", "named backreference \\k at byte 7"},
      {"a\\bc", "word boundary"},
      {"a^b", "'^' other than at the start of the pattern at byte 1"},
      {"a$b", "'$' other than at the end of the pattern at byte 1"},
      {"(a", "unterminated group '(' at byte 0"},
      {"a)", "unmatched ')' at byte 1"},
      {"[ab", "unterminated class '[' at byte 0"},
      {"[z-a]", "range out of order in class at byte 1"},
      {"[\\d-z]", "class escape in a range at byte 1"},
      {"*a", "nothing to repeat at byte 0"},
      {"a**", "nothing to repeat at byte 2"},
      {"a{", "malformed quantifier {m,n} at byte 1"},
      {"a{3,1}", "n < m at byte 1"},
      {"{", "'{' with nothing to repeat at byte 0"},
      {"a\\p{L}", "Unicode property escape \\p at byte 1"},
      {"(?i)a", "group modifier '(?' at byte 0"},
      {"\\q", "unknown escape '\\q' at byte 0"},
      {"\\uD800", "lone surrogate"},
      {"a{1001}", "max_repetition (1000)"},
      {"((a{100}){100}){100}", "max_expanded_nodes (100000)"},
      {"[]", "the pattern matches nothing"},
      {"\xff", "invalid UTF-8 at byte 0"},
  };
  for (const auto& c : cases) {
    auto g = RegexGrammar(c.pattern);
    ASSERT_FALSE(g.ok()) << c.pattern << " gave " << *g;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.message), std::string::npos)
        << c.pattern << ": " << g.status().message();
  }
  RegexOptions small;
  small.max_pattern_bytes = 4;
  EXPECT_NE(RegexGrammar("abcde", small).status().message().find("max_pattern_bytes"),
            std::string::npos);
  std::string deep(300, '(');
  deep += "a" + std::string(300, ')');
  EXPECT_NE(RegexGrammar(deep).status().message().find("max_nesting"), std::string::npos);
}

TEST(RegexTest, EmptyClassesAndEmptyTexts) {
  CheckedGrammar g(Grammar("a[]|b"));  // the dead alternative drops out
  EXPECT_TRUE(g.Accepts("b"));
  EXPECT_FALSE(g.Accepts("a"));
  CheckedGrammar empty(Grammar(""));
  EXPECT_TRUE(empty.Accepts(""));
  EXPECT_FALSE(empty.Accepts("a"));
  CheckedGrammar any(Grammar("[^]*"));
  EXPECT_TRUE(any.Accepts("a\nb"));
}

TEST(RegexTest, Deterministic) {
  for (const auto& pattern : kPatterns) EXPECT_EQ(Grammar(pattern), Grammar(pattern));
}

}  // namespace
}  // namespace pagoda::grammar
