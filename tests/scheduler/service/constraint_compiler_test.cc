// ConstraintCompiler: each kind of constraint becomes GBNF that compiles and means what the
// request said; failures name the cause; the cache returns the same compilation.
#include "scheduler/service/constraint_compiler.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "common/grammar/grammar.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

// Whether the compiled grammar accepts `text` as a whole sentence.
bool Accepts(const std::string& gbnf, const std::string& text) {
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = grammar::Grammar::FromGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return false;
  grammar::Matcher m(*g);
  return m.Advance(text) && m.Accepting();
}

v1::Constraint Choice(std::initializer_list<std::string> options) {
  v1::Constraint c;
  for (const std::string& o : options) c.mutable_choice()->add_options(o);
  return c;
}

TEST(ConstraintCompilerTest, ChoiceIsExactlyItsOptions) {
  ConstraintCompiler compiler;
  // Quotes, backslashes, control bytes and UTF-8 survive the literal escapes.
  absl::StatusOr<std::shared_ptr<const std::string>> gbnf =
      compiler.Compile(Choice({"yes", "no \"quoted\"", "a\\b\n\x01", "日本"}));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  for (const std::string ok : {"yes", "no \"quoted\"", "a\\b\n\x01", "日本"}) {
    EXPECT_TRUE(Accepts(**gbnf, ok)) << ok;
  }
  for (const std::string bad : {"ye", "yess", "no", "", "日"}) {
    EXPECT_FALSE(Accepts(**gbnf, bad)) << bad;
  }
}

TEST(ConstraintCompilerTest, EveryKindCompiles) {
  ConstraintCompiler compiler;
  v1::Constraint c;
  c.set_regex("[0-9]{2}-[a-z]+");
  absl::StatusOr<std::shared_ptr<const std::string>> gbnf = compiler.Compile(c);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_TRUE(Accepts(**gbnf, "42-abc"));
  EXPECT_FALSE(Accepts(**gbnf, "4-abc"));
  c.set_json_object(true);
  gbnf = compiler.Compile(c);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_TRUE(Accepts(**gbnf, R"({"a":[1,{"b":null}]})"));
  EXPECT_FALSE(Accepts(**gbnf, "[1]"));
  c.set_json_schema(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3,
                        "maximum": 12}}, "required": ["n"], "additionalProperties": false})");
  gbnf = compiler.Compile(c);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_TRUE(Accepts(**gbnf, R"({"n":12})"));
  EXPECT_FALSE(Accepts(**gbnf, R"({"n":13})"));
  EXPECT_FALSE(Accepts(**gbnf, R"({})"));
  c.set_grammar("root ::= \"a\"+ \"b\"\n");
  gbnf = compiler.Compile(c);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_TRUE(Accepts(**gbnf, "aaab"));
}

TEST(ConstraintCompilerTest, FailuresNameTheirCause) {
  ConstraintCompiler compiler;
  v1::Constraint c;
  EXPECT_EQ(compiler.Compile(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.set_json_schema("{not json");
  EXPECT_EQ(compiler.Compile(c).status().message(), "constraint: json_schema is not valid JSON");
  c.set_json_schema(R"({"type": "integer", "multipleOf": 3})");
  absl::Status s = compiler.Compile(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multipleOf"), std::string::npos) << s;
  c.set_regex("(a)\\1");
  s = compiler.Compile(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "regex: ")) << s;
  c.set_grammar("root ::= root \"a\"\n");  // left recursion
  s = compiler.Compile(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "constraint grammar: ")) << s;
  EXPECT_EQ(compiler.Compile(Choice({})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(compiler.Compile(Choice({"a", ""})).status().message(),
            "choice option 1 must be a non-empty UTF-8 string");
  ConstraintOptions tiny;
  tiny.max_source_bytes = 8;
  ConstraintCompiler small(tiny);
  c.set_grammar("root ::= \"abcdefgh\"\n");
  EXPECT_EQ(small.Compile(c).status().message(),
            "constraint: the definition has 20 bytes; the limit is 8");
}

TEST(ConstraintCompilerTest, OverTheTimeBudgetIsRefusedNamingIt) {
  ConstraintOptions options;
  options.compile_budget = absl::Nanoseconds(1);
  ConstraintCompiler compiler(options);
  absl::Status s = compiler.Compile(Choice({"a", "b"})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--constraint-compile-budget-ms"), std::string::npos) << s;
}

TEST(ConstraintCompilerTest, CachesByContentAndForgetsTheLeastRecentlyUsed) {
  ConstraintOptions options;
  options.cache_entries = 2;
  ConstraintCompiler compiler(options);
  auto a1 = compiler.Compile(Choice({"a"}));
  auto a2 = compiler.Compile(Choice({"a"}));
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(a1->get(), a2->get());  // one compilation
  // The option boundaries are part of the key: {"ab"} and {"a", "b"} differ.
  auto ab = compiler.Compile(Choice({"ab"}));
  auto a_b = compiler.Compile(Choice({"a", "b"}));
  ASSERT_TRUE(ab.ok() && a_b.ok());
  EXPECT_NE(**ab, **a_b);
  // Two entries at most: "a" was used least recently and is compiled again.
  auto a3 = compiler.Compile(Choice({"a"}));
  ASSERT_TRUE(a3.ok());
  EXPECT_NE(a1->get(), a3->get());
  EXPECT_EQ(**a1, **a3);
}

}  // namespace
}  // namespace pagoda::scheduler
