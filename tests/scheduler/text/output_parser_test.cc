#include "scheduler/text/output_parser.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace pagoda::scheduler::text {
namespace {

using Kind = OutputEvent::Kind;

// What a client would assemble from the events, plus the parser's own final account.
struct Outcome {
  std::string content;    // concatenated kContent
  std::string reasoning;  // concatenated kReasoning
  // Per index: "id name" from the start event, and the concatenated arguments.
  std::map<int32_t, std::pair<std::string, std::string>> streamed_calls;
  std::vector<int32_t> invalid;  // kToolCallInvalid indexes
  OutputParser::Final final;

  bool operator==(const Outcome& o) const {
    auto calls = [](const std::vector<ToolCall>& c) {
      std::vector<std::string> out;
      for (const ToolCall& t : c) {
        out.push_back(std::to_string(t.index) + " " + t.id + " " + t.name + " " + t.arguments);
      }
      return out;
    };
    return content == o.content && reasoning == o.reasoning && streamed_calls == o.streamed_calls &&
           invalid == o.invalid && final.content == o.final.content &&
           final.reasoning == o.final.reasoning &&
           calls(final.tool_calls) == calls(o.final.tool_calls);
  }
};

void PrintTo(const Outcome& o, std::ostream* os) {
  *os << "{content=" << nlohmann::json(o.content).dump()
      << " reasoning=" << nlohmann::json(o.reasoning).dump() << " streamed=[";
  for (const auto& [index, call] : o.streamed_calls) {
    *os << index << ":" << call.first << " " << nlohmann::json(call.second).dump() << " ";
  }
  *os << "] invalid=" << o.invalid.size() << " final_calls=[";
  for (const ToolCall& t : o.final.tool_calls)
    *os << t.index << ":" << t.name << " " << t.arguments << " ";
  *os << "]}";
}

void Apply(const std::vector<OutputEvent>& events, Outcome* out) {
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::kContent:
        ASSERT_FALSE(e.text.empty());
        out->content += e.text;
        break;
      case Kind::kReasoning:
        ASSERT_FALSE(e.text.empty());
        out->reasoning += e.text;
        break;
      case Kind::kToolCallStart:
        ASSERT_EQ(out->streamed_calls.count(e.index), 0u) << "two starts for call " << e.index;
        out->streamed_calls[e.index].first = e.id + " " + e.name;
        break;
      case Kind::kToolCallArguments:
        ASSERT_EQ(out->streamed_calls.count(e.index), 1u) << "arguments before the start";
        out->streamed_calls[e.index].second += e.text;
        break;
      case Kind::kToolCallInvalid:
        out->invalid.push_back(e.index);
        break;
    }
  }
}

Outcome Parse(const OutputParser::Options& options, const std::vector<std::string>& pieces) {
  OutputParser parser(options);
  Outcome out;
  for (const std::string& piece : pieces) Apply(parser.Push(piece), &out);
  out.final = parser.Finish();
  Apply(out.final.events, &out);
  // The final account agrees with the stream.
  EXPECT_EQ(out.final.content, out.content);
  EXPECT_EQ(out.final.reasoning, out.reasoning);
  for (const ToolCall& call : out.final.tool_calls) {
    EXPECT_EQ(out.streamed_calls[call.index].first, call.id + " " + call.name);
    EXPECT_EQ(out.streamed_calls[call.index].second, call.arguments) << "call " << call.index;
    EXPECT_TRUE(nlohmann::json::parse(call.arguments, nullptr, false).is_object())
        << call.arguments;
  }
  return out;
}

std::vector<std::string> Bytes(const std::string& text) {
  std::vector<std::string> out;
  for (const char c : text) out.emplace_back(1, c);
  return out;
}

std::vector<std::string> RandomSplit(const std::string& text, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::uniform_int_distribution<size_t>(1, 9)(rng);
    out.push_back(text.substr(at, n));
    at += n;
  }
  return out;
}

// Parses `text` whole, byte by byte and in random splits; all must agree. Returns the whole.
Outcome ParseAllWays(const OutputParser::Options& options, const std::string& text) {
  const Outcome whole = Parse(options, {text});
  EXPECT_EQ(Parse(options, Bytes(text)), whole) << "byte by byte: " << text;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    EXPECT_EQ(Parse(options, RandomSplit(text, seed)), whole) << "split " << seed << ": " << text;
  }
  return whole;
}

OutputParser::Options Tools(ToolCallFormat format, bool reasoning = false) {
  OutputParser::Options o;
  o.format = format;
  o.tools_given = true;
  o.reasoning = reasoning;
  o.id_seed = 7;
  return o;
}

// name + " " + arguments of each final call.
std::vector<std::string> Calls(const Outcome& out) {
  std::vector<std::string> v;
  for (const ToolCall& c : out.final.tool_calls) v.push_back(c.name + " " + c.arguments);
  return v;
}

using Strings = std::vector<std::string>;

// ---- Hermes / Qwen ----

TEST(OutputParserTest, HermesCallAfterContent) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kHermes),
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": [1, 2]}}\n</tool_call>");
  EXPECT_EQ(out.content, "Let me check.");
  EXPECT_EQ(Calls(out), Strings({"get_weather {\"city\": \"Paris\", \"days\": [1, 2]}"}));
  EXPECT_TRUE(out.invalid.empty());
  EXPECT_EQ(out.final.tool_calls[0].id, MakeToolCallId(ToolCallFormat::kHermes, 7, 0));
}

TEST(OutputParserTest, HermesParallelCallsAndTrailingText) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kHermes),
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"}{\\\"\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n\nDone.");
  EXPECT_EQ(Calls(out), Strings({"a {\"x\": \"}{\\\"\"}", "b {}"}));
  EXPECT_EQ(out.content, "Done.");
  EXPECT_NE(out.final.tool_calls[0].id, out.final.tool_calls[1].id);
}

TEST(OutputParserTest, MaxToolCallsKeepsTheFirstCalls) {
  // parallel_tool_calls false: the first call only; the later call's markup is not content.
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    const std::string text =
        format == ToolCallFormat::kHermes
            ? "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>"
        : format == ToolCallFormat::kLlama3Json
            ? "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}"
            : "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
              "\"arguments\": {}}]";
    OutputParser::Options options = Tools(format);
    EXPECT_EQ(Calls(ParseAllWays(options, text)).size(), 2u) << text;
    options.max_tool_calls = 1;
    const Outcome one = ParseAllWays(options, text);
    EXPECT_EQ(Calls(one), Strings({"a {\"x\": 1}"})) << text;
    EXPECT_EQ(one.streamed_calls.size(), 1u) << text;
    EXPECT_EQ(one.content, "") << text;
  }
}

TEST(OutputParserTest, ArgumentsStreamBeforeTheCallEnds) {
  OutputParser parser(Tools(ToolCallFormat::kHermes));
  Outcome out;
  Apply(parser.Push("Hi <tool"), &out);
  EXPECT_EQ(out.content, "Hi") << "the space and the marker's start are held";
  Apply(parser.Push("_call>\n{\"name\": \"f\", \"argu"), &out);
  ASSERT_EQ(out.streamed_calls.size(), 1u) << "the start comes with the name";
  EXPECT_EQ(out.streamed_calls[0].second, "");
  Apply(parser.Push("ments\": {\"q\": \"abc"), &out);
  EXPECT_EQ(out.streamed_calls[0].second, "{\"q\": \"abc");
  Apply(parser.Push("def\"}}\n</tool_call>"), &out);
  EXPECT_EQ(out.streamed_calls[0].second, "{\"q\": \"abcdef\"}");
  const OutputParser::Final final = parser.Finish();
  EXPECT_TRUE(final.events.empty());
  ASSERT_EQ(final.tool_calls.size(), 1u);
  EXPECT_EQ(final.content, "Hi");
}

TEST(OutputParserTest, ContentIsNotHeldWithoutAReason) {
  OutputParser parser(Tools(ToolCallFormat::kHermes));
  Outcome out;
  Apply(parser.Push("a < b, <tool_"), &out);
  EXPECT_EQ(out.content, "a < b,");
  Apply(parser.Push("x> is not a marker"), &out);
  EXPECT_EQ(out.content, "a < b, <tool_x> is not a marker");
}

TEST(OutputParserTest, UnicodeArguments) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kHermes),
      "Ça va ? 👍\n<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"日本語 é \\u00e9\"}}"
      "</tool_call>");
  EXPECT_EQ(out.content, "Ça va ? 👍");
  EXPECT_EQ(Calls(out), Strings({"say {\"text\": \"日本語 é \\u00e9\"}"}));
}

TEST(OutputParserTest, ArgumentsBeforeName) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kHermes),
                   "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
  EXPECT_EQ(Calls(out), Strings({"f {\"x\": 1}"}));
}

TEST(OutputParserTest, ArgumentsAsStringAndMissing) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kHermes),
                   "<tool_call>{\"name\": \"f\", \"arguments\": \" {\\\"x\\\": 1} \"}</tool_call>"
                   "<tool_call>{\"name\": \"g\"}</tool_call>"
                   "<tool_call>{\"name\": \"h\", \"arguments\": null}</tool_call>");
  EXPECT_EQ(Calls(out), Strings({"f {\"x\": 1}", "g {}", "h {}"}));
}

TEST(OutputParserTest, MalformedBeforeNameGoesBackToContent) {
  const std::string text =
      "See <tool_call>\nnot json\n</tool_call> and <tool_call>{\"name\": 5}</tool_call>"
      " and <tool_call>{\"arguments\": {}}</tool_call>.";
  const Outcome out = ParseAllWays(Tools(ToolCallFormat::kHermes), text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.final.tool_calls.empty());
  EXPECT_TRUE(out.streamed_calls.empty());
}

TEST(OutputParserTest, BrokenArgumentsAfterStartAreInvalid) {
  const std::string text =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>"
      "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"b\": 2}}\n</tool_call>";
  const Outcome out = ParseAllWays(Tools(ToolCallFormat::kHermes), text);
  EXPECT_EQ(out.invalid, std::vector<int32_t>({0}));
  EXPECT_EQ(out.content,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>");
  ASSERT_EQ(out.final.tool_calls.size(), 1u);
  EXPECT_EQ(out.final.tool_calls[0].index, 1) << "later calls keep their own index";
  EXPECT_EQ(Calls(out), Strings({"g {\"b\": 2}"}));
}

TEST(OutputParserTest, TruncatedCallIsInvalid) {
  const std::string text = "Ok <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2";
  const Outcome out = ParseAllWays(Tools(ToolCallFormat::kHermes), text);
  EXPECT_EQ(out.invalid, std::vector<int32_t>({0}));
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.final.tool_calls.empty());
}

TEST(OutputParserTest, CompleteArgumentsStandDespiteBrokenTail) {
  // A missing "}" and closer, and an extra "}": the arguments are complete, so the calls stand.
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kHermes),
                   "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>"
                   "<tool_call>{\"name\": \"g\", \"arguments\": {}}}\n</tool_call>"
                   "<tool_call>{\"name\": \"h\", \"arguments\": {\"c\": 3}");
  EXPECT_EQ(Calls(out), Strings({"f {\"a\": 1}", "g {}", "h {\"c\": 3}"}));
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserTest, NoToolsNoParsing) {
  OutputParser::Options options = Tools(ToolCallFormat::kHermes);
  options.tools_given = false;
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const Outcome out = ParseAllWays(options, text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.final.tool_calls.empty());
}

// ---- reasoning ----

TEST(OutputParserTest, ThinkThenToolCallMarkupInsideThinkIsReasoning) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kHermes, /*reasoning=*/true),
      "<think>\nMaybe <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call>?\n</think>\n\n"
      "<tool_call>\n{\"name\": \"yes\", \"arguments\": {\"k\": \"v\"}}\n</tool_call>");
  EXPECT_EQ(out.reasoning, "Maybe <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call>?\n");
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(Calls(out), Strings({"yes {\"k\": \"v\"}"}));
}

TEST(OutputParserTest, ReasoningThenContent) {
  const Outcome out = ParseAllWays(Tools(ToolCallFormat::kNone, /*reasoning=*/true),
                                   "\n<think>\nhmm </thin k> 2+2</think>\n\nIt is 4.");
  EXPECT_EQ(out.reasoning, "hmm </thin k> 2+2");
  EXPECT_EQ(out.content, "It is 4.");
}

TEST(OutputParserTest, NoThinkAtStartIsContent) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kNone, /*reasoning=*/true), "Answer <think>x</think>");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "Answer <think>x</think>");
  EXPECT_EQ(ParseAllWays(Tools(ToolCallFormat::kNone, true), "<thin").content, "<thin");
}

TEST(OutputParserTest, StartsInReasoning) {
  OutputParser::Options options = Tools(ToolCallFormat::kHermes, /*reasoning=*/true);
  options.starts_in_reasoning = true;
  const Outcome out =
      ParseAllWays(options,
                   "\nThe user wants weather.\n</think>\n\nChecking.<tool_call>\n{\"name\": \"w\", "
                   "\"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(out.reasoning, "The user wants weather.\n");
  EXPECT_EQ(out.content, "Checking.");
  EXPECT_EQ(Calls(out), Strings({"w {}"}));
  // Never closed: all reasoning.
  EXPECT_EQ(ParseAllWays(options, "still thinking </thi").reasoning, "still thinking </thi");
}

TEST(OutputParserTest, ReasoningOffKeepsThinkAsContent) {
  const Outcome out = ParseAllWays(Tools(ToolCallFormat::kNone), "<think>a</think>b");
  EXPECT_EQ(out.content, "<think>a</think>b");
}

// ---- Llama 3.x ----

TEST(OutputParserTest, Llama3BareJson) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kLlama3Json),
                   " {\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris, FR\"}}");
  EXPECT_EQ(Calls(out), Strings({"get_weather {\"location\": \"Paris, FR\"}"}));
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserTest, Llama3PythonTagTypeKeyAndSeveralCalls) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kLlama3Json),
      "<|python_tag|>{\"type\": \"function\", \"name\": \"a\", \"parameters\": {\"x\": 1}}; "
      "{\"name\": \"b\", \"arguments\": {}}");
  EXPECT_EQ(Calls(out), Strings({"a {\"x\": 1}", "b {}"}));
}

TEST(OutputParserTest, Llama3PlainJsonAndLaterBracesAreContent) {
  for (const std::string text : {"{\"answer\": 42}", " \n{\"name\": \"Ada\", \"age\": 36}",
                                 "Sure: {\"name\": \"f\", \"parameters\": {}}", "{not json",
                                 "<|python_tag|>brave_search.call(query=\"x\")"}) {
    const Outcome out = ParseAllWays(Tools(ToolCallFormat::kLlama3Json), text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.final.tool_calls.empty()) << text;
    EXPECT_TRUE(out.streamed_calls.empty()) << text;
  }
}

TEST(OutputParserTest, Llama3AfterThink) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kLlama3Json, /*reasoning=*/true),
                   "<think>use a tool</think>\n{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}");
  EXPECT_EQ(out.reasoning, "use a tool");
  EXPECT_EQ(Calls(out), Strings({"f {\"a\": \"b\"}"}));
}

// ---- Mistral ----

TEST(OutputParserTest, MistralArray) {
  const Outcome out = ParseAllWays(
      Tools(ToolCallFormat::kMistral),
      "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": null}]}, "
      "\"id\": \"abcdef123\"}, {\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(out.content, "Sure.");
  EXPECT_EQ(Calls(out), Strings({"a {\"x\": [1, {\"y\": null}]}", "b {}"}));
  for (const ToolCall& call : out.final.tool_calls) {
    EXPECT_EQ(call.id.size(), 9u);
    for (const char c : call.id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
  }
}

TEST(OutputParserTest, MistralArgsMarkerFormAndSingleObject) {
  const Outcome out =
      ParseAllWays(Tools(ToolCallFormat::kMistral),
                   "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]f2[ARGS] {}"
                   "[TOOL_CALLS] {\"name\": \"g\", \"arguments\": {\"z\": true}}");
  EXPECT_EQ(Calls(out), Strings({"get_weather {\"city\": \"Paris\"}", "f2 {}", "g {\"z\": true}"}));
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserTest, MistralMalformed) {
  for (const std::string text : {"[TOOL_CALLS]", "[TOOL_CALLS][", "[TOOL_CALLS] oops",
                                 "[TOOL_CALLS]f[AR", "[TOOL_CALLS][{\"nam"}) {
    const Outcome out = ParseAllWays(Tools(ToolCallFormat::kMistral), text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.final.tool_calls.empty()) << text;
  }
}

TEST(OutputParserTest, WhitespaceOnlyAndEmpty) {
  EXPECT_EQ(ParseAllWays(Tools(ToolCallFormat::kHermes), "").content, "");
  EXPECT_EQ(ParseAllWays(Tools(ToolCallFormat::kHermes), "Hi \n").content, "Hi \n");
  EXPECT_EQ(ParseAllWays(Tools(ToolCallFormat::kNone), " x ").content, " x ");
}

// Plausible outputs (reasoning, content, calls in the format), some cut short or with a
// fragment of markup dropped in at random: whatever the text, the stream agrees with the final
// account and does not depend on how the text was cut.
std::string RandomOutput(ToolCallFormat format, std::mt19937& rng) {
  auto pick = [&](const std::vector<std::string>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  auto coin = [&](int in) { return std::uniform_int_distribution<int>(0, in - 1)(rng) == 0; };
  const std::vector<std::string> words = {"Sure", " the", " weather", " é",   " 日本", "\n",
                                          " ",    " <b>", " {x}",     " [y]", "."};
  const std::vector<std::string> args = {"{}",
                                         "{\"a\": 1}",
                                         "{ \"q\" : \"x\\\"}\" }",
                                         "{\"l\": [1, {\"m\": null}], \"t\": true}",
                                         "\"{\\\"s\\\": 1}\"",
                                         "null"};
  const std::vector<std::string> fragments = {"<tool_call>",
                                              "</tool_call>",
                                              "[TOOL_CALLS]",
                                              "<think>",
                                              "</think>",
                                              "{",
                                              "}",
                                              "\"",
                                              ",",
                                              "]",
                                              ";",
                                              "<|python_tag|>",
                                              "tru",
                                              "\\"};
  auto object = [&](int i) {
    const std::string name = "\"name\": \"f" + std::to_string(i) + "\"";
    const std::string arguments =
        std::string(coin(2) ? "\"arguments\"" : "\"parameters\"") + ": " + pick(args);
    return "{" + (coin(4) ? arguments + ", " + name : name + ", " + arguments) + "}";
  };
  std::string text;
  if (coin(3)) text += "<think>" + pick(words) + pick(fragments) + pick(words) + "</think>\n\n";
  const bool llama = format == ToolCallFormat::kLlama3Json;
  if (!llama || coin(3)) {
    for (int i = std::uniform_int_distribution<int>(0, 4)(rng); i > 0; --i) text += pick(words);
  }
  const int calls = std::uniform_int_distribution<int>(0, 3)(rng);
  for (int i = 0; i < calls; ++i) {
    switch (format) {
      case ToolCallFormat::kHermes:
        text += "<tool_call>\n" + object(i) + "\n</tool_call>\n";
        break;
      case ToolCallFormat::kLlama3Json:
        text += (i ? "; " : (coin(2) ? "<|python_tag|>" : "")) + object(i);
        break;
      case ToolCallFormat::kMistral:
        if (coin(2)) {
          text += "[TOOL_CALLS]f" + std::to_string(i) + "[ARGS]" + pick(args);
        } else {
          text += (i ? ", " : "[TOOL_CALLS][") + object(i) + (i == calls - 1 ? "]" : "");
        }
        break;
      case ToolCallFormat::kNone:
        break;
    }
  }
  if (coin(3)) text += pick(words);
  if (!text.empty() && coin(3)) {
    text.resize(std::uniform_int_distribution<size_t>(0, text.size())(rng));
  }
  if (!text.empty() && coin(3)) {
    text.insert(std::uniform_int_distribution<size_t>(0, text.size())(rng), pick(fragments));
  }
  return text;
}

TEST(OutputParserTest, RandomOutputsAgreeAcrossSplits) {
  std::mt19937 rng(12345);
  int with_calls = 0;
  int with_invalid = 0;
  for (const ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (int i = 0; i < 400; ++i) {
      const std::string text = RandomOutput(format, rng);
      OutputParser::Options options = Tools(format, /*reasoning=*/i % 2 == 1);
      options.starts_in_reasoning = i % 8 == 7;
      const Outcome whole = Parse(options, {text});
      with_calls += !whole.final.tool_calls.empty();
      with_invalid += !whole.invalid.empty();
      ASSERT_EQ(Parse(options, Bytes(text)), whole) << text;
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        ASSERT_EQ(Parse(options, RandomSplit(text, seed)), whole) << text;
      }
    }
  }
  // The generator does make calls, and broken ones.
  EXPECT_GT(with_calls, 300);
  EXPECT_GT(with_invalid, 30);
}

TEST(OutputParserTest, IdsDependOnSeedAndIndex) {
  EXPECT_EQ(MakeToolCallId(ToolCallFormat::kHermes, 1, 0).substr(0, 5), "call_");
  EXPECT_EQ(MakeToolCallId(ToolCallFormat::kHermes, 1, 0).size(), 29u);
  EXPECT_NE(MakeToolCallId(ToolCallFormat::kHermes, 1, 0),
            MakeToolCallId(ToolCallFormat::kHermes, 2, 0));
  EXPECT_NE(MakeToolCallId(ToolCallFormat::kHermes, 1, 0),
            MakeToolCallId(ToolCallFormat::kHermes, 1, 1));
  EXPECT_EQ(MakeToolCallId(ToolCallFormat::kMistral, 1, 0).size(), 9u);
}

}  // namespace
}  // namespace pagoda::scheduler::text
