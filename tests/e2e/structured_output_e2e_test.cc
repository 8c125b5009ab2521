// Structured outputs end to end: a real scheduler compiles each constraint, a real CPU worker on
// the trained test model masks every sample with it, and the answers, sampled at temperature 1,
// are sentences of the constraint that end with EOS.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "tests/e2e/trained_model.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;
namespace v1 = pagoda::v1;

v1::GenerateRequest Sampled(const std::string& prompt, uint64_t seed) {
  v1::GenerateRequest r = TextRequest(prompt, 200);
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(seed);
  return r;
}

class StructuredOutputE2eTest : public TrainedModelTest {};

// Each answer is JSON that the schema accepts: checked here field by field, independently of
// the grammar the scheduler built.
TEST_F(StructuredOutputE2eTest, JsonSchemaAnswersValidate) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const json schema = json::parse(R"({
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 10},
        "age": {"type": "integer", "minimum": 3, "maximum": 99},
        "pet": {"enum": ["cat", "dog", null]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
      },
      "required": ["name", "age"],
      "additionalProperties": false})");
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    v1::GenerateRequest r = Sampled("Once upon a time", seed);
    r.mutable_constraint()->set_json_schema(schema.dump());
    Generation g = cluster_->Generate(r);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message() << cluster_->Logs();
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_EOS) << g.text;
    const json answer = json::parse(g.text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(answer.is_object()) << g.text;
    for (const auto& [key, value] : answer.items()) {
      EXPECT_TRUE(schema["properties"].contains(key)) << key;
    }
    ASSERT_TRUE(answer.contains("name") && answer["name"].is_string()) << g.text;
    const std::string name = answer["name"];
    EXPECT_GE(name.size(), 1u);
    ASSERT_TRUE(answer.contains("age") && answer["age"].is_number_integer()) << g.text;
    EXPECT_GE(answer["age"].get<int>(), 3);
    EXPECT_LE(answer["age"].get<int>(), 99);
    if (answer.contains("pet")) {
      EXPECT_TRUE(answer["pet"] == "cat" || answer["pet"] == "dog" || answer["pet"].is_null());
    }
    if (answer.contains("tags")) {
      ASSERT_TRUE(answer["tags"].is_array());
      EXPECT_LE(answer["tags"].size(), 3u);
      for (const json& t : answer["tags"]) EXPECT_TRUE(t.is_boolean());
    }
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Regexes match the whole answer; a choice gives exactly one option, for each of n completions.
TEST_F(StructuredOutputE2eTest, RegexAndChoiceWithSeveralCompletions) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string pattern = "(cat|dog)s? [0-9]{1,2}, [a-z]{1,8}\\.";
  for (uint64_t seed = 0; seed < 6; ++seed) {
    v1::GenerateRequest r = Sampled("Lily had", seed);
    r.mutable_constraint()->set_regex(pattern);
    Generation g = cluster_->Generate(r);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    EXPECT_TRUE(std::regex_match(g.text, std::regex(pattern))) << g.text;
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_EOS);
  }
  const std::set<std::string> options = {"happy", "sad", "very sleepy"};
  v1::GenerateRequest r = Sampled("The dog was", 3);
  for (const std::string& o : options) r.mutable_constraint()->mutable_choice()->add_options(o);
  r.set_n(4);
  grpc::ClientContext ctx;
  auto reader = cluster_->stub().Generate(&ctx, r);
  std::vector<std::string> texts(4);
  std::vector<bool> ended(4, false);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    texts[msg.index()] += msg.text();
    if (msg.has_finished()) ended[msg.index()] = true;
  }
  ASSERT_TRUE(reader->Finish().ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(ended[i]);
    EXPECT_TRUE(options.contains(texts[i])) << i << ": " << texts[i];
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// gRPC clients get reasoning and tool calls as fields of the stream (GenerateRequest.parsing):
// a grammar makes the model think and then call a function in the Hermes format; the markup never
// reaches `text`, and the argument pieces join to the call's JSON arguments.
TEST_F(StructuredOutputE2eTest, ParsedReasoningAndToolCallsOverGrpc) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  for (uint64_t seed = 0; seed < 4; ++seed) {
    SCOPED_TRACE(seed);
    v1::GenerateRequest r = Sampled("Once upon a time", seed);
    r.mutable_constraint()->set_grammar(
        "root ::= \"<think>\" [a-z ]{1,20} \"</think>\" \"<tool_call>\\n{\\\"name\\\": "
        "\\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \\\"\" [a-z]{1,8} "
        "\"\\\"}}\\n</tool_call>\"\n");
    r.mutable_parsing()->set_reasoning(true);
    r.mutable_parsing()->set_tool_call_format("hermes");
    grpc::ClientContext ctx;
    auto reader = cluster_->stub().Generate(&ctx, r);
    std::string text, reasoning, name, id, arguments;
    int starts = 0;
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      text += msg.text();
      reasoning += msg.reasoning_text();
      for (const v1::ToolCallDelta& d : msg.tool_calls()) {
        EXPECT_EQ(d.index(), 0u);
        EXPECT_FALSE(d.invalid());
        if (!d.name().empty()) {
          ++starts;
          name = d.name();
          id = d.id();
        }
        arguments += d.arguments();
      }
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(text, "");
    EXPECT_FALSE(reasoning.empty());
    EXPECT_EQ(reasoning.find("think>"), std::string::npos) << reasoning;
    EXPECT_EQ(starts, 1);
    EXPECT_EQ(name, "get_weather");
    EXPECT_TRUE(id.starts_with("call_")) << id;
    const json args = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(args.is_object()) << arguments;
    EXPECT_TRUE(args["city"].is_string()) << arguments;
  }
}

// What cannot be enforced is refused with INVALID_ARGUMENT naming it; the server keeps serving.
TEST_F(StructuredOutputE2eTest, UnenforceableConstraintsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  auto refused = [&](const v1::GenerateRequest& r, const std::string& words) {
    Generation g = cluster_->Generate(r);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(g.status.error_message().find(words), std::string::npos) << g.status.error_message();
  };
  v1::GenerateRequest r = Sampled("Once", 1);
  r.mutable_constraint()->set_json_schema(R"({"type": "array", "uniqueItems": true})");
  refused(r, "uniqueItems");
  r.mutable_constraint()->set_grammar("root ::= root \"x\" | \"y\"\n");
  refused(r, "constraint grammar");
  r.mutable_constraint()->set_regex("(a)\\1");
  refused(r, "regex");
  r.mutable_constraint()->set_regex("[ab]+");
  r.set_ignore_eos(true);
  refused(r, "ignore_eos");
  r.set_ignore_eos(false);
  v1::GenerateRequest parsed = Sampled("Once", 2);
  parsed.mutable_parsing()->set_tool_call_format("hermes");
  parsed.mutable_parsing()->set_max_tool_calls(-1);
  refused(parsed, "max_tool_calls");
  Generation g = cluster_->Generate(r);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_TRUE(std::regex_match(g.text, std::regex("[ab]+"))) << g.text;
}

}  // namespace
}  // namespace pagoda::testing
