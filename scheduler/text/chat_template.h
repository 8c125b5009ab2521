// Chat templates: renders a conversation into a prompt with the model's Jinja template
// (tokenizer.chat_template in its GGUF file, or --chat-template FILE), exactly as Python's Jinja2
// renders it under transformers' apply_chat_template (the default, jinja::Dialect::kPython: what
// model authors test their templates with) or as @huggingface/jinja renders it (kJavaScript).
// tests/scheduler/text/chat compares byte for byte with both.
//
// Contract: Parse and Render never crash and never throw, whatever the template and messages: a
// syntax error, a template's raise_exception (its message verbatim), or a template that runs past
// its limits (ChatRenderOptions::limits) is absl::InvalidArgumentError. A ChatTemplate is
// immutable; Render may be called concurrently.
//
// The variables a template sees: messages (each {role, content[, name][, tool_calls]
// [, tool_call_id], extra_fields...} with the optional keys present only when set),
// add_generation_prompt, bos_token, eos_token, tools (in the JavaScript dialect only when set; in
// the Python dialect none when unset, and documents none, as apply_chat_template passes them),
// and every entry of `extra_variables` (e.g. enable_thinking), besides the globals
// true/false/none, raise_exception, range, namespace and strftime_now (which reads `now`, in UTC).
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/jinja/template.h"

namespace pagoda::scheduler::text {

struct ChatMessage {
  std::string role;     // system, user, assistant, tool
  std::string content;  // the text (an assistant message with only tool calls: "")
  std::optional<std::string> name;
  // OpenAI's tool_calls array, e.g. [{"id": "...", "type": "function", "function": {"name":
  // "...", "arguments": {...} or "..."}}]; key order is kept (tojson prints it).
  std::optional<nlohmann::ordered_json> tool_calls;
  std::optional<std::string> tool_call_id;  // a tool result's call id
  // When set, replaces `content` in the template's view: null (OpenAI's content of a message
  // with only tool calls), or a list of parts ([{"type": "text", "text": "..."}]).
  std::optional<nlohmann::ordered_json> content_json;
  // Further keys of the message object (e.g. Qwen 3's reasoning_content), after the others.
  nlohmann::ordered_json extra_fields = nlohmann::ordered_json::object();
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  std::optional<nlohmann::ordered_json> tools;  // OpenAI's tools array
  nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
  // strftime_now's clock; unset: the system clock.
  std::optional<std::chrono::system_clock::time_point> now;
  jinja::RenderLimits limits;
  // Python's Jinja2 (what the server renders with) or @huggingface/jinja.
  jinja::Dialect dialect = jinja::Dialect::kPython;
};

class ChatTemplate {
 public:
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;

  // The template variables Render passes (exposed for tests and debugging).
  static nlohmann::ordered_json Context(std::span<const ChatMessage> messages,
                                        const ChatRenderOptions& options);

 private:
  explicit ChatTemplate(jinja::Template t) : template_(std::move(t)) {}
  jinja::Template template_;
};

// The model's own template, `tokenizer.chat_template` of its GGUF file. NotFound (naming
// --chat-template) when the file has none; InvalidArgument when the key is not a string.
absl::StatusOr<std::string> ReadGgufChatTemplate(const common::GgufFile& file);

}  // namespace pagoda::scheduler::text
