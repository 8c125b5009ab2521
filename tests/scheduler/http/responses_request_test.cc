// ParseResponsesRequest and ConversationTurns: the Responses API's JSON onto a chat request and
// the chat template's turns, and refusals that name the field.
#include "scheduler/http/responses_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

ResponsesRequest Parse(const std::string& body) {
  ResponsesRequest r;
  std::optional<ApiError> e = ParseResponsesRequest(body, &r);
  EXPECT_FALSE(e) << e->message;
  return r;
}

ApiError Refusal(const std::string& body) {
  ResponsesRequest r;
  std::optional<ApiError> e = ParseResponsesRequest(body, &r);
  EXPECT_TRUE(e) << body;
  return e.value_or(ApiError{});
}

std::vector<ChatTurn> Turns(const ResponsesRequest& r) {
  std::vector<ChatTurn> turns;
  std::optional<ApiError> e = ConversationTurns(r.input, r.instructions, "input", &turns);
  EXPECT_FALSE(e) << e->message;
  return turns;
}

TEST(ResponsesRequestTest, StringInputAndOpenAiDefaults) {
  ResponsesRequest r = Parse(R"({"model": "m", "input": "Once"})");
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_EQ(r.chat.endpoint, Endpoint::kChat);
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.chat.stream);
  EXPECT_FLOAT_EQ(r.chat.generate.sampling().temperature(), 1.0f);
  EXPECT_EQ(r.chat.generate.max_tokens(), 0u) << "up to the context";
  EXPECT_FALSE(r.chat.generate.has_constraint());
  EXPECT_EQ(r.input, json::parse(R"([{"type":"message","role":"user","content":"Once"}])"));
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["text"], json::parse(R"({"format":{"type":"text"}})"));
  EXPECT_EQ(r.echo["metadata"], json::object());
  EXPECT_TRUE(r.echo["previous_response_id"].is_null());
  std::vector<ChatTurn> turns = Turns(r);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].role, "user");
  EXPECT_EQ(turns[0].content, "Once");
}

TEST(ResponsesRequestTest, MapsGenerationFieldsAndEchoesThem) {
  ResponsesRequest r = Parse(R"({
    "input": "x", "instructions": "Be brief", "max_output_tokens": 32, "temperature": 0.5,
    "top_p": 0.9, "stream": true, "stream_options": {"include_obfuscation": false},
    "store": false, "previous_response_id": "resp_1", "metadata": {"k": "v"},
    "user": "u", "service_tier": "auto", "prompt_cache_key": "p", "parallel_tool_calls": false,
    "text": {"format": {"type": "json_schema", "name": "x", "strict": true,
                        "schema": {"type": "object"}}, "verbosity": "medium"}})");
  EXPECT_EQ(r.chat.generate.max_tokens(), 32u);
  EXPECT_FLOAT_EQ(r.chat.generate.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.chat.generate.sampling().top_p(), 0.9f);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_FALSE(r.store);
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(r.previous_response_id, "resp_1");
  EXPECT_EQ(r.instructions, "Be brief");
  EXPECT_EQ(r.chat.generate.constraint().json_schema(), R"({"type":"object"})");
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_EQ(r.echo["max_output_tokens"], 32);
  EXPECT_EQ(r.echo["instructions"], "Be brief");
  EXPECT_EQ(r.echo["text"]["format"]["name"], "x");
  std::vector<ChatTurn> turns = Turns(r);
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].role, "system");
  EXPECT_EQ(turns[0].content, "Be brief");

  r = Parse(R"({"input": "x", "text": {"format": {"type": "json_object"}}})");
  EXPECT_TRUE(r.chat.generate.constraint().json_object());
}

TEST(ResponsesRequestTest, ItemsBecomeChatTurns) {
  ResponsesRequest r = Parse(R"({"input": [
    {"role": "developer", "content": "dev"},
    {"type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [],
     "content": [{"type": "reasoning_text", "text": "think"}]},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get", "arguments": "{}"},
    {"type": "function_call", "call_id": "c2", "name": "put", "arguments": "{\"a\":1}"},
    {"type": "function_call_output", "call_id": "c2", "output": "done"},
    {"type": "function_call_output", "call_id": "c1",
     "output": [{"type": "input_text", "text": "sunny"}]}]})");
  std::vector<ChatTurn> turns = Turns(r);
  ASSERT_EQ(turns.size(), 5u);
  EXPECT_EQ(turns[0].role, "developer");
  EXPECT_EQ(turns[1].content, "ab");
  EXPECT_EQ(turns[2].role, "assistant");
  EXPECT_EQ(turns[2].content, "Let me look.");
  EXPECT_FALSE(turns[2].content_null);
  EXPECT_EQ(turns[2].reasoning_content, "think");
  ASSERT_TRUE(turns[2].tool_calls.has_value()) << "the calls join the message before them";
  ASSERT_EQ(turns[2].tool_calls->size(), 2u);
  EXPECT_EQ((*turns[2].tool_calls)[1], json::parse(R"({"id": "c2", "type": "function",
      "function": {"name": "put", "arguments": "{\"a\":1}"}})"));
  EXPECT_EQ(turns[3].role, "tool");
  EXPECT_EQ(turns[3].tool_call_id, "c2");
  EXPECT_EQ(turns[3].name, "put");
  EXPECT_EQ(turns[3].content, "done");
  EXPECT_EQ(turns[4].content, "sunny");
  EXPECT_EQ(turns[4].name, "get");

  // A call with no message before it is an assistant turn of its own, with empty content (not
  // null: Qwen3's template searches the content for "</think>").
  r = Parse(R"({"input": [{"role": "user", "content": "q"},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})");
  turns = Turns(r);
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_FALSE(turns[1].content_null);
  EXPECT_EQ(turns[1].content, "");
  EXPECT_EQ(turns[1].tool_calls->size(), 1u);
}

TEST(ResponsesRequestTest, FlatFunctionToolsBecomeChatTools) {
  ResponsesRequest r = Parse(R"({"input": "x", "tools": [
    {"type": "function", "name": "get", "description": "d", "strict": true,
     "parameters": {"type": "object"}},
    {"type": "function", "name": "put"}],
    "tool_choice": {"type": "function", "name": "put"}})");
  ASSERT_TRUE(r.chat.tools.has_value());
  EXPECT_EQ((*r.chat.tools)[0], json::parse(R"({"type": "function", "function": {"name": "get",
      "description": "d", "strict": true, "parameters": {"type": "object"}}})"));
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.chat.tool_choice_function, "put");
  EXPECT_EQ(r.echo["tools"].size(), 2u);
  EXPECT_EQ(r.echo["tool_choice"]["name"], "put");
  r = Parse(R"({"input": "x", "tools": [{"type": "function", "name": "get"}],
                "tool_choice": "required"})");
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kRequired);
  r = Parse(R"({"input": "x", "tools": [{"type": "function", "name": "get"}]})");
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kAuto);
  r = Parse(R"({"input": "x"})");
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kNone);
}

TEST(ResponsesRequestTest, RefusesWhatWouldChangeTheResultNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools"},
      {R"({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]})", "tools"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "extra": 1}]})", "tools"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "conversation": "conv_1"})", "conversation"},
      {R"({"input": "x", "prompt": {"id": "pmpt_1"}})", "prompt"},
      {R"({"input": "x", "include": ["reasoning.encrypted_content"]})", "include"},
      {R"({"input": "x", "top_logprobs": 3})", "top_logprobs"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "reasoning": {"effort": "high"}})", "reasoning"},
      {R"({"input": "x", "text": {"verbosity": "low"}})", "text.verbosity"},
      {R"({"input": "x", "text": {"format": {"type": "grammar"}}})", "text.format"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema"}}})", "text.format"},
      {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
           "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice"},
      {R"({"input": "x", "tool_choice": {"type": "web_search_preview"}})", "tool_choice"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "stream_options": {"include_obfuscation": true}})", "stream_options"},
      {R"({"input": "x", "metadata": {"k": 1}})", "metadata"},
      {R"({"input": "x", "frobnicate": 1})", "frobnicate"},
      {R"({})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})",
       "input"},
      {R"({"input": [{"type": "web_search_call", "id": "ws_1"}]})", "input"},
      {R"({"input": [{"role": "tool", "content": "x"}]})", "input"},
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})", "input"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input"},
      {R"({"input": [{"type": "item_reference"}]})", "input"},
  };
  for (const Case& c : cases) {
    ApiError e = Refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  EXPECT_EQ(Refusal("[1]").message, "the body must be a JSON object");
  EXPECT_EQ(Refusal("{").message, "the body is not valid JSON");
  std::string deep = R"({"input": )" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_EQ(Refusal(deep).status, 400);
  // Accepted as the defaults they are.
  Parse(R"({"input": "x", "background": false, "include": [], "truncation": "disabled",
            "reasoning": {"effort": null}, "top_logprobs": 0, "conversation": null})");
}

TEST(ResponsesRequestTest, ConversationTurnsRefusesMalformedStoredItems) {
  std::vector<ChatTurn> turns;
  json items = json::parse(R"([{"role": "user", "content": 5}])");
  std::optional<ApiError> e = ConversationTurns(items, std::nullopt, "input", &turns);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  items = json::parse(R"([{"type": "item_reference", "id": "msg_1"}])");
  e = ConversationTurns(items, std::nullopt, "input", &turns);
  ASSERT_TRUE(e) << "an unresolved reference";
  e = ConversationTurns(json::object(), std::nullopt, "input", &turns);
  ASSERT_TRUE(e);
}

}  // namespace
}  // namespace pagoda::scheduler::http
