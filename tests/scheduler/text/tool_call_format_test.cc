#include "scheduler/text/tool_call_format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pagoda::scheduler::text {
namespace {

// Excerpts of real chat templates (tokenizer_config.json of the models named), enough to carry
// the markers the rules look at. The full Llama 3.2, Qwen 2.5, Qwen3 and Mistral Nemo templates
// of tests/scheduler/text/chat's packages detect as the excerpts of the same name do.
constexpr std::string_view kQwen25 =
    R"({{- "\n</tools>\n\nFor each function call, return a json object with function name and )"
    R"(arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": )"
    R"(<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }})"
    "\n"
    R"({{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }})";
constexpr std::string_view kQwen3 =
    R"({%- if '</think>' in message.content %}{%- set content = )"
    R"(message.content.split('</think>')[-1].lstrip('\n') %}{%- endif %})"
    R"({{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }})"
    R"({%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n)"
    R"(</think>\n\n' }}{%- endif %})";
constexpr std::string_view kQwen3Coder =
    R"({{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}{%- for args_name, )"
    R"(args_value in tool_call.arguments|items %}{{- '<parameter=' + args_name + '>\n' }})";
constexpr std::string_view kMistralNemo =
    R"({%- elif message["role"] == "tool_calls" or message.tool_calls is defined %})"
    R"({{- "[TOOL_CALLS][" }}{%- for tool_call in tool_calls %}{%- set out = )"
    R"(tool_call.function|tojson %}{{- out[:-1] }})";
constexpr std::string_view kLlama32 =
    R"({%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %})"
    R"({{- 'Respond in the format {"name": function name, "parameters": dictionary of )"
    R"(argument name and its value}.' }})"
    R"({{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }})";
constexpr std::string_view kLlama31 =
    R"({%- if builtin_tools is defined and tool_call.name in builtin_tools %})"
    R"({{- "<|python_tag|>" + tool_call.name + ".call(" }})";
constexpr std::string_view kLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = )"
    R"('<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ )"
    R"(message['content'] | trim + '<|eot_id|>' %})";
constexpr std::string_view kGemma3 =
    R"({{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }})";

TEST(ToolCallFormatTest, DetectsFromTemplates) {
  EXPECT_EQ(DetectToolCallFormat(kQwen25), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(kQwen3), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(kQwen3Coder), ToolCallFormat::kNone) << "XML parameters";
  EXPECT_EQ(DetectToolCallFormat(kMistralNemo), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat(kLlama32), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(kLlama31), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(kLlama3), ToolCallFormat::kNone);
  EXPECT_EQ(DetectToolCallFormat(kGemma3), ToolCallFormat::kNone);
  EXPECT_EQ(DetectToolCallFormat(""), ToolCallFormat::kNone);
}

TEST(ToolCallFormatTest, ParsesFlag) {
  EXPECT_EQ(*ParseToolCallFormatFlag("auto"), std::nullopt);
  EXPECT_EQ(*ParseToolCallFormatFlag("none"), ToolCallFormat::kNone);
  EXPECT_EQ(*ParseToolCallFormatFlag("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*ParseToolCallFormatFlag("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ParseToolCallFormatFlag("qwen3"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ParseToolCallFormatFlag("mistral"), ToolCallFormat::kMistral);
  const auto bad = ParseToolCallFormatFlag("Hermes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"Hermes\""), std::string::npos);
  for (const ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kLlama3Json,
                                 ToolCallFormat::kHermes, ToolCallFormat::kMistral}) {
    EXPECT_EQ(**ParseToolCallFormatFlag(ToolCallFormatName(f)), f);
  }
}

TEST(ToolCallFormatTest, PromptOpensReasoning) {
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
}

TEST(ToolCallFormatTest, SyntaxDescribesEachFormat) {
  EXPECT_EQ(SyntaxOf(ToolCallFormat::kLlama3Json).arguments_key, "parameters");
  EXPECT_EQ(SyntaxOf(ToolCallFormat::kHermes).arguments_key, "arguments");
  EXPECT_EQ(SyntaxOf(ToolCallFormat::kMistral).arguments_key, "arguments");
  EXPECT_EQ(SyntaxOf(ToolCallFormat::kMistral).special_markers,
            std::vector<std::string_view>{"[TOOL_CALLS]"});
  EXPECT_TRUE(SyntaxOf(ToolCallFormat::kHermes).special_markers.empty());
  EXPECT_TRUE(SyntaxOf(ToolCallFormat::kNone).arguments_key.empty());
}

// An arguments grammar as a JSON-schema translator would write it, with the traps: rule-like
// words in literals, comments and classes, '"' inside a class, repetition counts, a rule going
// on over lines.
constexpr std::string_view kArguments = R"(# arguments of get_weather: root ::= city
root ::= "{" space "\"city\"" space ":" space string ("," space days-kv)? "}" space
days-kv ::= "\"days\" root" space ":" space [1-9] [0-9]{0,2}
string ::= "\"" char* "\"" space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
space ::= | " " | "\n" [ \t]{0,20}
alt_2 ::= root |
  string
)";

TEST(ToolCallFormatTest, PrefixesEveryRuleAndNothingElse) {
  const absl::StatusOr<std::string> renamed = PrefixGbnfRules(kArguments, "t0-");
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(*renamed, R"(# arguments of get_weather: root ::= city
t0-root ::= "{" t0-space "\"city\"" t0-space ":" t0-space t0-string ("," t0-space t0-days-kv)? "}" t0-space
t0-days-kv ::= "\"days\" root" t0-space ":" t0-space [1-9] [0-9]{0,2}
t0-string ::= "\"" t0-char* "\"" t0-space
t0-char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
t0-space ::= | " " | "\n" [ \t]{0,20}
t0-alt_2 ::= t0-root |
  t0-string
)");
}

TEST(ToolCallFormatTest, PrefixRejectsBrokenGrammars) {
  EXPECT_FALSE(PrefixGbnfRules("root ::= foo\n", "p-").ok()) << "undefined rule";
  EXPECT_FALSE(PrefixGbnfRules("a ::= \"x\"\n", "p-").ok()) << "no root";
  EXPECT_FALSE(PrefixGbnfRules("root ::= \"abc\n", "p-").ok()) << "open literal";
  EXPECT_FALSE(PrefixGbnfRules("root ::= [abc\n", "p-").ok()) << "open class";
  EXPECT_FALSE(PrefixGbnfRules("root ::= \"a\"{1,\n", "p-").ok()) << "open count";
  EXPECT_FALSE(PrefixGbnfRules("root ::= \"a\"\n", "p 0").ok()) << "bad prefix";
  const auto undefined = PrefixGbnfRules("root ::= x\nx ::= y\n", "p-");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("\"y\" used on line 2"), std::string::npos)
      << undefined.status();
}

TEST(ToolCallFormatTest, RootGrammarPerFormat) {
  const std::vector<ToolRule> one = {{"get_weather", "t0-root"}};
  EXPECT_EQ(*ToolCallRootGbnf(ToolCallFormat::kHermes, one, /*parallel=*/true),
            "root ::= call (\"\\n\" call)*\n"
            "call ::= \"<tool_call>\\n\" (call-0) \"\\n</tool_call>\"\n"
            "call-0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" t0-root "
            "\"}\"\n");
  EXPECT_EQ(*ToolCallRootGbnf(ToolCallFormat::kLlama3Json, one, /*parallel=*/false),
            "root ::= call\n"
            "call ::= (call-0)\n"
            "call-0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"parameters\\\": \" t0-root "
            "\"}\"\n");
  const std::vector<ToolRule> two = {{"a", "args-a"}, {"b\"q", "args-b"}};
  EXPECT_EQ(*ToolCallRootGbnf(ToolCallFormat::kMistral, two, /*parallel=*/true),
            "root ::= \"[TOOL_CALLS][\" call (\", \" call)* \"]\"\n"
            "call ::= (call-0 | call-1)\n"
            "call-0 ::= \"{\\\"name\\\": \\\"a\\\", \\\"arguments\\\": \" args-a \"}\"\n"
            "call-1 ::= \"{\\\"name\\\": \\\"b\\\\\\\"q\\\", \\\"arguments\\\": \" args-b "
            "\"}\"\n")
      << "a quote in a name is escaped for JSON, then for GBNF";
  EXPECT_FALSE(ToolCallRootGbnf(ToolCallFormat::kNone, one, true).ok());
  EXPECT_FALSE(ToolCallRootGbnf(ToolCallFormat::kHermes, {}, true).ok());
  const std::vector<ToolRule> bad = {{"f", "bad rule"}};
  EXPECT_FALSE(ToolCallRootGbnf(ToolCallFormat::kHermes, bad, true).ok());
}

TEST(ToolCallFormatTest, FullGrammarKeepsEachToolsRulesApart) {
  const std::vector<ToolGrammar> tools = {
      {"get_weather", std::string(kArguments)},
      {"noop", "root ::= \"{\" space \"}\"\nspace ::= \" \"?\n"}};
  const absl::StatusOr<std::string> gbnf = ToolCallGbnf(ToolCallFormat::kHermes, tools, true);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_EQ(gbnf->substr(0, gbnf->find('\n')), "root ::= call (\"\\n\" call)*");
  EXPECT_NE(gbnf->find("call-0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
                       "t0-root \"}\"\n"),
            std::string::npos);
  EXPECT_NE(gbnf->find("call-1 ::= \"{\\\"name\\\": \\\"noop\\\", \\\"arguments\\\": \" t1-root "
                       "\"}\"\n"),
            std::string::npos);
  EXPECT_NE(gbnf->find("\nt1-root ::= \"{\" t1-space \"}\"\nt1-space ::= \" \"?\n"),
            std::string::npos);
  EXPECT_NE(gbnf->find("\nt0-space ::= "), std::string::npos);

  const auto broken =
      ToolCallGbnf(ToolCallFormat::kHermes, std::vector<ToolGrammar>{{"f", "x ::= \"a\""}}, true);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("tool \"f\""), std::string::npos);
}

}  // namespace
}  // namespace pagoda::scheduler::text
