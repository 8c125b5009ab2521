// ParseOpenAiRequest: OpenAI JSON onto the GenerateRequest proto, defaults, and refusals that
// name the field.
#include "scheduler/http/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda::scheduler::http {
namespace {

OpenAiRequest Parse(Endpoint endpoint, const std::string& body) {
  OpenAiRequest r;
  std::optional<ApiError> e = ParseOpenAiRequest(endpoint, body, &r);
  EXPECT_FALSE(e) << e->message;
  return r;
}

ApiError Refusal(Endpoint endpoint, const std::string& body) {
  OpenAiRequest r;
  std::optional<ApiError> e = ParseOpenAiRequest(endpoint, body, &r);
  EXPECT_TRUE(e) << body;
  return e.value_or(ApiError{});
}

TEST(OpenAiRequestTest, CompletionDefaultsFollowOpenAi) {
  OpenAiRequest r = Parse(Endpoint::kCompletions, R"({"model": "m", "prompt": "Once"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.generate.text(), "Once");
  EXPECT_EQ(r.generate.max_tokens(), 16u);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.top_logprobs, -1);
  // Chat has no default length: up to the context.
  r = Parse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r.generate.max_tokens(), 0u);
}

TEST(OpenAiRequestTest, MapsEveryGenerationField) {
  OpenAiRequest r = Parse(Endpoint::kCompletions, R"({
      "prompt": [1, 2, 3], "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": -1, "seed": -1, "n": 3, "stop": ["a", "b"], "stop_token_ids": [5],
      "ignore_eos": true, "cache_salt": "tenant", "stream": true,
      "stream_options": {"include_usage": true}, "user": "u1"})");
  ASSERT_TRUE(r.generate.has_token_ids());
  EXPECT_EQ(r.generate.token_ids().ids_size(), 3);
  EXPECT_EQ(r.generate.max_tokens(), 7u);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.generate.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.generate.sampling().top_k(), 0);  // vLLM's -1 = off
  EXPECT_EQ(r.generate.sampling().seed(), ~uint64_t{0});
  EXPECT_EQ(r.generate.n(), 3u);
  ASSERT_EQ(r.generate.stop_size(), 2);
  EXPECT_EQ(r.generate.stop(1), "b");
  EXPECT_EQ(r.generate.stop_token_ids(0), 5);
  EXPECT_TRUE(r.generate.ignore_eos());
  EXPECT_EQ(r.generate.cache_salt(), "tenant");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequestTest, MapsThePenaltiesBiasAndLogprobs) {
  OpenAiRequest r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "min_p": 0.1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2,
      "logit_bias": {"7": -100, "9": 2.5}, "logprobs": 3})");
  const auto& s = r.generate.sampling();
  EXPECT_FLOAT_EQ(s.min_p(), 0.1f);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.2f);
  ASSERT_EQ(s.logit_bias_size(), 2);
  EXPECT_FLOAT_EQ(s.logit_bias().at(7), -100.0f);
  EXPECT_FLOAT_EQ(s.logit_bias().at(9), 2.5f);
  EXPECT_TRUE(r.generate.logprobs());
  EXPECT_EQ(r.generate.top_logprobs(), 3u);
  EXPECT_EQ(r.top_logprobs, 3);
  // Completions' logprobs: 0 still returns the chosen tokens' logprobs.
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 0})");
  EXPECT_TRUE(r.generate.logprobs());
  EXPECT_EQ(r.generate.top_logprobs(), 0u);
  // Chat: a boolean and top_logprobs.
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  r = Parse(Endpoint::kChat, "{" + user + R"(, "logprobs": true, "top_logprobs": 20})");
  EXPECT_TRUE(r.generate.logprobs());
  EXPECT_EQ(r.generate.top_logprobs(), 20u);
  r = Parse(Endpoint::kChat, "{" + user + R"(, "logprobs": false})");
  EXPECT_FALSE(r.generate.logprobs());
  EXPECT_EQ(Refusal(Endpoint::kChat, "{" + user + R"(, "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"a": 1}})").param,
            "logit_bias");
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": [1]})").param,
            "logit_bias");
}

TEST(OpenAiRequestTest, PromptForms) {
  EXPECT_EQ(Parse(Endpoint::kCompletions, R"({"prompt": ["one"]})").generate.text(), "one");
  EXPECT_EQ(Parse(Endpoint::kCompletions, R"({"prompt": [[4, 5]]})").generate.token_ids().ids(1),
            5);
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"prompt": [-1]})").param, "prompt");
  EXPECT_EQ(Refusal(Endpoint::kCompletions, R"({"max_tokens": 3})").message, "prompt is required");
}

TEST(OpenAiRequestTest, ChatMessages) {
  OpenAiRequest r = Parse(Endpoint::kChat, R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
      "add_generation_prompt": false})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.messages[2].content, "");
  ASSERT_TRUE(r.messages[2].tool_calls);
  EXPECT_EQ((*r.messages[2].tool_calls)[0]["id"], "c1");
  EXPECT_EQ(r.messages[3].tool_call_id, "c1");
  ASSERT_TRUE(r.tools);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(Refusal(Endpoint::kChat, R"({"messages": []})").param, "messages");
  EXPECT_EQ(Refusal(Endpoint::kChat, R"({"messages": [{"role": "robot", "content": "x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(Refusal(Endpoint::kChat,
                    R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
                .param,
            "messages[0].content");
  EXPECT_EQ(Refusal(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                         "tool_choice": "required"})")
                .param,
            "tool_choice");
}

TEST(OpenAiRequestTest, ToolChoiceForms) {
  const std::string base = R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "g"}}])";
  EXPECT_EQ(Parse(Endpoint::kChat, base + "}").tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(Parse(Endpoint::kChat, base + R"(, "tool_choice": "none"})").tool_choice,
            ToolChoice::kNone);
  EXPECT_EQ(Parse(Endpoint::kChat, base + R"(, "tool_choice": "auto"})").tool_choice,
            ToolChoice::kAuto);
  OpenAiRequest r = Parse(Endpoint::kChat, base + R"(, "tool_choice": "required"})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_TRUE(r.parallel_tool_calls);
  r = Parse(Endpoint::kChat, base + R"(, "parallel_tool_calls": false,
      "tool_choice": {"type": "function", "function": {"name": "g"}}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.tool_choice_function, "g");
  EXPECT_FALSE(r.parallel_tool_calls);
  // No tools: nothing to parse, whatever auto says.
  r = Parse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [],
                                 "tool_choice": "auto"})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(r.tools);
}

TEST(OpenAiRequestTest, ToolRefusalsNameTheField) {
  const std::string user = R"({"messages": [{"role": "user", "content": "x"}])";
  const std::string tools =
      user + R"(, "tools": [{"type": "function", "function": {"name": "f"}}])";
  ApiError e = Refusal(Endpoint::kChat, tools + R"(, "tool_choice": "always"})");
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(e.message.find("required"), std::string::npos) << e.message;
  e = Refusal(Endpoint::kChat,
              tools + R"(, "tool_choice": {"type": "function", "function": {"name": "h"}}})");
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(e.message.find("'h'"), std::string::npos) << e.message;
  EXPECT_EQ(Refusal(Endpoint::kChat, tools + R"(, "tool_choice": {"type": "function"}})").param,
            "tool_choice");
  EXPECT_EQ(Refusal(Endpoint::kChat, tools + R"(, "parallel_tool_calls": 1})").param,
            "parallel_tool_calls");
  e = Refusal(Endpoint::kChat, user + R"(, "tools": [{"type": "function", "function": {}}]})");
  EXPECT_EQ(e.param, "tools");
  EXPECT_EQ(e.message, "tools[0].function.name must be a non-empty string");
  EXPECT_EQ(Refusal(Endpoint::kChat, user + R"(, "tools": [{"type": "code"}]})").param, "tools");
  e = Refusal(Endpoint::kChat, user + R"(, "tools": [{"type": "function",
      "function": {"name": "f", "parameters": 3}}]})");
  EXPECT_EQ(e.message, "tools[0].function.parameters must be a JSON Schema object");
}

TEST(OpenAiRequestTest, RefusalsNameTheField) {
  const Endpoint c = Endpoint::kCompletions;
  EXPECT_EQ(Refusal(c, "{").message, "the body is not valid JSON");
  EXPECT_EQ(Refusal(c, "[1]").message, "the body must be a JSON object");
  EXPECT_EQ(Refusal(c, std::string(100, '[')).message, "the body nests deeper than 64 levels");
  ApiError e = Refusal(c, R"({"prompt": "x", "max_tokens": "8"})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "max_tokens must be an integer in [1, 4294967295]");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "n": 0})").param, "n");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "temperature": "hot"})").param, "temperature");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "stop": [1]})").param, "stop");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "stream_options": {"include_usage": true}})").param,
            "stream_options");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "echo": true})").param, "echo");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "best_of": 2})").param, "best_of");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(Refusal(c, R"({"prompt": "x", "temprature": 0})").param, "temprature");
  // Neutral values of fields that are not implemented are accepted.
  Parse(c, R"({"prompt": "x", "echo": false, "best_of": 1, "suffix": null, "min_tokens": 0})");
}

// Structured outputs: every spelling of a constraint lands in GenerateRequest.constraint, on
// both endpoints.
TEST(OpenAiRequestTest, ResponseFormatsBecomeTheConstraint) {
  const std::string chat = R"("messages": [{"role": "user", "content": "hi"}])";
  OpenAiRequest r =
      Parse(Endpoint::kChat, "{" + chat + R"(, "response_format": {"type": "json_object"}})");
  EXPECT_TRUE(r.generate.constraint().json_object());
  r = Parse(Endpoint::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "strict": true,
                      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})");
  ASSERT_TRUE(r.generate.constraint().has_json_schema());
  EXPECT_EQ(
      nlohmann::json::parse(r.generate.constraint().json_schema()),
      nlohmann::json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  r = Parse(Endpoint::kCompletions,
            R"({"prompt": "x", "response_format": {"type": "regex", "regex": "[0-9]+"}})");
  EXPECT_EQ(r.generate.constraint().regex(), "[0-9]+");
  r = Parse(Endpoint::kCompletions,
            R"({"prompt": "x", "response_format": {"type": "choice", "choice": ["yes", "no"]}})");
  ASSERT_EQ(r.generate.constraint().choice().options_size(), 2);
  EXPECT_EQ(r.generate.constraint().choice().options(1), "no");
  r = Parse(
      Endpoint::kCompletions,
      R"({"prompt": "x", "response_format": {"type": "grammar", "grammar": "root ::= \"a\""}})");
  EXPECT_EQ(r.generate.constraint().grammar(), "root ::= \"a\"");
  // vLLM's and llama.cpp's spellings.
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_json": {"type": "string"}})");
  EXPECT_EQ(nlohmann::json::parse(r.generate.constraint().json_schema()),
            nlohmann::json::parse(R"({"type": "string"})"));
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_choice": ["a", "b"]})");
  EXPECT_EQ(r.generate.constraint().choice().options_size(), 2);
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_regex": "a|b"})");
  EXPECT_EQ(r.generate.constraint().regex(), "a|b");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "grammar": "root ::= \"b\""})");
  EXPECT_EQ(r.generate.constraint().grammar(), "root ::= \"b\"");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "json_schema": {"type": "boolean"}})");
  EXPECT_TRUE(r.generate.constraint().has_json_schema());
  // Text (or null) constrains nothing.
  r = Parse(Endpoint::kChat, "{" + chat + R"(, "response_format": {"type": "text"}})");
  EXPECT_FALSE(r.generate.has_constraint());
  r = Parse(Endpoint::kChat, "{" + chat + R"(, "response_format": null})");
  EXPECT_FALSE(r.generate.has_constraint());
}

TEST(OpenAiRequestTest, MalformedResponseFormatsAreRefused) {
  const Endpoint c = Endpoint::kCompletions;
  auto refused = [&](const std::string& fields) {
    return Refusal(c, R"({"prompt": "x", )" + fields + "}");
  };
  ApiError e = refused(R"("response_format": {"type": "xml"})");
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(e.message.find("'xml' is not one of"), std::string::npos) << e.message;
  EXPECT_EQ(refused(R"("response_format": "json")").param, "response_format");
  EXPECT_EQ(refused(R"("response_format": {"type": "json_schema"})").param, "response_format");
  EXPECT_EQ(
      refused(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})").param,
      "response_format");
  e = refused(R"("response_format": {"type": "json_object", "schema": {}})");
  EXPECT_EQ(e.message, "response_format of type 'json_object' has no field 'schema'");
  EXPECT_EQ(refused(R"("response_format": {"type": "choice", "choice": [1]})").param,
            "response_format");
  EXPECT_EQ(refused(R"("response_format": {"type": "regex"})").param, "response_format");
  EXPECT_EQ(refused(R"("guided_choice": "a")").param, "guided_choice");
  e = refused(R"("response_format": {"type": "json_object"}, "guided_regex": "a")");
  EXPECT_EQ(e.param, "guided_regex");
  EXPECT_EQ(e.message,
            "both response_format and guided_regex constrain the answer; set one of them");
}

}  // namespace
}  // namespace pagoda::scheduler::http
