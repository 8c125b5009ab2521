#include "scheduler/text/chat_template.h"

#include <utility>

namespace pagoda::scheduler::text {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  return ChatTemplate(*std::move(parsed));
}

nlohmann::ordered_json ChatTemplate::Context(std::span<const ChatMessage> messages,
                                             const ChatRenderOptions& options) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json message = {{"role", m.role}, {"content", m.content}};
    if (m.content_json) message["content"] = *m.content_json;
    if (m.name) message["name"] = *m.name;
    if (m.tool_calls) message["tool_calls"] = *m.tool_calls;
    if (m.tool_call_id) message["tool_call_id"] = *m.tool_call_id;
    if (m.extra_fields.is_object()) {
      for (const auto& [key, value] : m.extra_fields.items()) message[key] = value;
    }
    list.push_back(std::move(message));
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = std::move(list);
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = options.bos_token;
  context["eos_token"] = options.eos_token;
  if (options.tools) {
    context["tools"] = *options.tools;
  } else if (options.dialect == jinja::Dialect::kPython) {
    context["tools"] = nullptr;  // apply_chat_template passes tools=None, documents=None
  }
  if (options.dialect == jinja::Dialect::kPython) context["documents"] = nullptr;
  if (options.extra_variables.is_object()) {
    for (const auto& [key, value] : options.extra_variables.items()) context[key] = value;
  }
  return context;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  return template_.Render(Context(messages, options), options.limits,
                          options.now.value_or(std::chrono::system_clock::now()), options.dialect);
}

absl::StatusOr<std::string> ReadGgufChatTemplate(const common::GgufFile& file) {
  if (!file.HasKey("tokenizer.chat_template")) {
    return absl::NotFoundError(
        "the model has no chat template (no tokenizer.chat_template in its GGUF file); give one "
        "with --chat-template FILE");
  }
  std::optional<std::string> source = file.GetString("tokenizer.chat_template");
  if (!source) return absl::InvalidArgumentError("tokenizer.chat_template must be a string");
  return *source;
}

}  // namespace pagoda::scheduler::text
