// ChatTemplate: the variables it passes to a template (messages with their optional keys, tools,
// bos/eos, extra variables) in both dialects, its errors, and reading the template from a GGUF
// file.
#include "scheduler/text/chat_template.h"

#include <chrono>
#include <string>
#include <vector>

#include "common/gguf_reader.h"
#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::text {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kChatMl[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

ChatMessage Message(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

TEST(ChatTemplate, RendersChatMl) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(kChatMl);
  ASSERT_OK(t);
  std::vector<ChatMessage> messages = {Message("system", "Be brief."), Message("user", "Hi")};
  ChatRenderOptions options;
  absl::StatusOr<std::string> out = t->Render(messages, options);
  ASSERT_OK(out);
  EXPECT_EQ(*out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  options.add_generation_prompt = false;
  out = t->Render(messages, options);
  ASSERT_OK(out);
  EXPECT_EQ(out->find("assistant"), std::string::npos);
}

TEST(ChatTemplate, ContextHasOptionalKeysOnlyWhenSet) {
  ChatMessage call = Message("assistant", "");
  call.tool_calls = Json::parse(R"([{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": {"x": 1}}}])");
  ChatMessage result = Message("tool", "42");
  result.tool_call_id = "c1";
  result.name = "f";
  std::vector<ChatMessage> messages = {Message("user", "q"), call, result};
  ChatRenderOptions options;
  options.dialect = jinja::Dialect::kJavaScript;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.extra_variables = {{"enable_thinking", false}};
  Json context = ChatTemplate::Context(messages, options);
  EXPECT_EQ(context.dump(),
            R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"",)"
            R"("tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":)"
            R"({"x":1}}}]},{"role":"tool","content":"42","name":"f","tool_call_id":"c1"}],)"
            R"("add_generation_prompt":true,"bos_token":"<s>","eos_token":"</s>",)"
            R"("enable_thinking":false})");
  ChatMessage parts = Message("user", "ignored");
  parts.content_json = Json::parse(R"([{"type": "text", "text": "hi"}])");
  parts.extra_fields = {{"reasoning_content", "r"}};
  EXPECT_EQ(ChatTemplate::Context(std::vector<ChatMessage>{parts}, options)["messages"].dump(),
            R"([{"role":"user","content":[{"type":"text","text":"hi"}],"reasoning_content":"r"}])");
  options.tools = Json::array({{{"type", "function"}}});
  EXPECT_TRUE(ChatTemplate::Context(messages, options).contains("tools"));

  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% for m in messages %}{{ m.role }}:{{ m.tool_calls is defined }}:"
      "{{ m.tool_call_id | default('-') }};{% endfor %}{{ tools is defined }}{{ bos_token }}");
  ASSERT_OK(t);
  absl::StatusOr<std::string> out = t->Render(messages, options);
  ASSERT_OK(out);
  EXPECT_EQ(*out, "user:false:-;assistant:true:-;tool:false:c1;true<s>");
}

// The Python dialect (the default) passes tools and documents as none when unset, as
// apply_chat_template does, and prints as Python's Jinja2 does.
TEST(ChatTemplate, PythonDialectContextAndPrinting) {
  ChatRenderOptions options;
  ASSERT_EQ(options.dialect, jinja::Dialect::kPython);
  std::vector<ChatMessage> messages = {Message("user", "q")};
  Json context = ChatTemplate::Context(messages, options);
  EXPECT_EQ(context.dump(),
            R"({"messages":[{"role":"user","content":"q"}],"add_generation_prompt":true,)"
            R"("bos_token":"","eos_token":"","tools":null,"documents":null})");
  options.tools = Json::array({{{"type", "function"}}});
  EXPECT_EQ(ChatTemplate::Context(messages, options)["tools"].dump(), R"([{"type":"function"}])");

  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{{ tools is defined }} {{ tools }} {{ messages[0] }} {{ [1.0, none, true] }}");
  ASSERT_OK(t);
  absl::StatusOr<std::string> out = t->Render(messages, options);
  ASSERT_OK(out);
  EXPECT_EQ(*out, "True [{'type': 'function'}] {'role': 'user', 'content': 'q'} [1.0, None, True]");
  options.dialect = jinja::Dialect::kJavaScript;
  out = t->Render(messages, options);
  ASSERT_OK(out);
  EXPECT_EQ(*out,
            R"(true [{"type": "function"}] {"role": "user", "content": "q"} [1, null, true])");
}

TEST(ChatTemplate, TemplateErrorsAreInvalidArgumentWithTheirMessage) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('First message must be from the "
      "user') }}{% endif %}ok");
  ASSERT_OK(t);
  std::vector<ChatMessage> messages = {Message("assistant", "x")};
  absl::StatusOr<std::string> out = t->Render(messages, ChatRenderOptions{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "First message must be from the user");

  absl::StatusOr<ChatTemplate> bad = ChatTemplate::Parse("{% for m in messages %}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, StrftimeNowReadsTheInjectedClock) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_OK(t);
  ChatRenderOptions options;
  options.now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
  absl::StatusOr<std::string> out = t->Render({}, options);
  ASSERT_OK(out);
  EXPECT_EQ(*out, "26 Jul 2024");
}

TEST(ChatTemplate, ReadsTheTemplateFromGguf) {
  modelgen::GgufWriter with;
  with.AddString("general.architecture", "llama");
  with.AddString("tokenizer.chat_template", kChatMl);
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file =
      common::GgufFile::FromBytes(with.Serialize());
  ASSERT_OK(file);
  absl::StatusOr<std::string> source = ReadGgufChatTemplate(**file);
  ASSERT_OK(source);
  EXPECT_EQ(*source, kChatMl);

  modelgen::GgufWriter without;
  without.AddString("general.architecture", "llama");
  file = common::GgufFile::FromBytes(without.Serialize());
  ASSERT_OK(file);
  source = ReadGgufChatTemplate(**file);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find("--chat-template"), std::string::npos);

  modelgen::GgufWriter wrong;
  wrong.AddUint32("tokenizer.chat_template", 7);
  file = common::GgufFile::FromBytes(wrong.Serialize());
  ASSERT_OK(file);
  EXPECT_EQ(ReadGgufChatTemplate(**file).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::scheduler::text
