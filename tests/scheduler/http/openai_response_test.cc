// The answers' JSON: chunks from ChunkEncoder parse back to what was put in, whatever the text.
#include "scheduler/http/openai_response.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda::scheduler::http {
namespace {

using nlohmann::json;

json ParseEvent(const std::string& event) {
  EXPECT_EQ(event.substr(0, 6), "data: ");
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  return json::parse(event.substr(6));
}

TEST(OpenAiResponseTest, CompletionChunksCarryEscapedText) {
  const AnswerHeader h{.endpoint = Endpoint::kCompletions,
                       .id = "cmpl-\"7\"",
                       .created = 42,
                       .model = "m\\1",
                       .usage_in_chunks = true};
  const std::string text = "a \"quote\", a \\ slash\n\t\r\x01 é 中 😀 \x7f";
  const json chunk = ParseEvent(ChunkEvent(h, 3, text, false, "", nullptr));
  EXPECT_EQ(chunk["id"], "cmpl-\"7\"");
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["created"], 42);
  EXPECT_EQ(chunk["model"], "m\\1");
  EXPECT_EQ(chunk["choices"][0]["index"], 3);
  EXPECT_EQ(chunk["choices"][0]["text"], text);
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
  // Ill-formed UTF-8 is replaced, never written as is.
  const json bad = ParseEvent(ChunkEvent(h, 0, "a\xff", false, "length", nullptr));
  EXPECT_EQ(bad["choices"][0]["text"], "a\xef\xbf\xbd");
  EXPECT_EQ(bad["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiResponseTest, ChatChunksHaveDeltas) {
  const AnswerHeader h{
      .endpoint = Endpoint::kChat, .id = "c", .created = 1, .model = "m", .usage_in_chunks = false};
  json first = ParseEvent(ChunkEvent(h, 0, "", true, "", nullptr));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_FALSE(first.contains("usage"));
  json last = ParseEvent(ChunkEvent(h, 1, "", false, "stop", nullptr));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json logprobs = ChatLogprobs({{"hi", -0.5f, {{"hi", -0.5f}, {"yo", -1.5f}}}});
  json with = ParseEvent(ChunkEvent(h, 0, "hi", false, "", logprobs));
  EXPECT_EQ(with["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "yo");
  EXPECT_EQ(with["choices"][0]["logprobs"]["content"][0]["bytes"], json({104, 105}));
}

TEST(OpenAiResponseTest, ChatChunksCarryReasoningAndToolCalls) {
  const AnswerHeader h{
      .endpoint = Endpoint::kChat, .id = "c", .created = 1, .model = "m", .usage_in_chunks = false};
  ChunkEncoder encoder(h);
  std::string out;
  ChatDelta reasoning;
  reasoning.reasoning = "hm \"so\"";
  encoder.AppendChat(0, reasoning, false, "", nullptr, &out);
  EXPECT_EQ(ParseEvent(out)["choices"][0]["delta"], json({{"reasoning_content", "hm \"so\""}}));
  out.clear();
  ChatDelta start;
  start.tool_index = 1;
  start.tool_id = "call_1";
  start.tool_name = "get";
  encoder.AppendChat(0, start, false, "", nullptr, &out);
  EXPECT_EQ(ParseEvent(out)["choices"][0]["delta"],
            json::parse(R"({"tool_calls": [{"index": 1, "id": "call_1", "type": "function",
                            "function": {"name": "get", "arguments": ""}}]})"));
  out.clear();
  ChatDelta arguments;
  arguments.tool_index = 1;
  arguments.tool_arguments = "{\"a\": ";
  encoder.AppendChat(0, arguments, false, "tool_calls", nullptr, &out);
  const json chunk = ParseEvent(out);
  EXPECT_EQ(
      chunk["choices"][0]["delta"],
      json::parse(R"({"tool_calls": [{"index": 1, "function": {"arguments": "{\"a\": "}}]})"));
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "tool_calls");
}

TEST(OpenAiResponseTest, ChatAnswersCarryReasoningAndToolCalls) {
  const AnswerHeader h{
      .endpoint = Endpoint::kChat, .id = "c", .created = 1, .model = "m", .usage_in_chunks = false};
  std::vector<Choice> choices(2);
  choices[0].finish_reason = "tool_calls";
  choices[0].reasoning = "think";
  choices[0].tool_calls = {{.id = "call_a", .name = "f", .arguments = "{\"x\":1}"}};
  choices[1].text = "plain";
  choices[1].finish_reason = "stop";
  const json body = json::parse(CompletionBody(h, choices, Usage{}));
  const json& calls = body["choices"][0]["message"];
  EXPECT_TRUE(calls["content"].is_null()) << "only calls: content is null";
  EXPECT_EQ(calls["reasoning_content"], "think");
  EXPECT_EQ(calls["tool_calls"], json::parse(R"([{"id": "call_a", "type": "function",
                                   "function": {"name": "f", "arguments": "{\"x\":1}"}}])"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["choices"][1]["message"], json({{"role", "assistant"}, {"content", "plain"}}));
}

TEST(OpenAiResponseTest, CompletionLogprobsAndUsage) {
  const json l = CompletionLogprobs({{"a", -1.0f, {{"b", -0.5f}}}, {"cd", -2.0f, {}}}, 10);
  EXPECT_EQ(l["tokens"], json({"a", "cd"}));
  EXPECT_EQ(l["text_offset"], json({10, 11}));
  EXPECT_EQ(l["top_logprobs"][0], json({{"a", -1.0}, {"b", -0.5}}));
  const json u = UsageJson({.prompt_tokens = 5, .completion_tokens = 7, .cached_tokens = 4});
  EXPECT_EQ(u["total_tokens"], 12);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 4);
}

}  // namespace
}  // namespace pagoda::scheduler::http
