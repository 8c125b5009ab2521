#include "scheduler/http/openai_response.h"

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace pagoda::scheduler::http {
namespace {

using nlohmann::json;

json Envelope(const AnswerHeader& h, bool chunk) {
  const bool chat = h.endpoint == Endpoint::kChat;
  return json{
      {"id", h.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", h.created},
      {"model", h.model}};
}

json Reason(std::string_view finish_reason) {
  return finish_reason.empty() ? json() : json(std::string(finish_reason));
}

json Bytes(const std::string& text) {
  json out = json::array();
  for (unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

json CompletionLogprobs(const std::vector<TokenLogprobText>& tokens, int64_t offset) {
  json text = json::array(), logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprobText& t : tokens) {
    text.push_back(t.token);
    logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [token, logprob] : t.top) alternatives[token] = logprob;
    if (!alternatives.contains(t.token)) alternatives[t.token] = t.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.token.size());
  }
  return json{{"tokens", std::move(text)},
              {"token_logprobs", std::move(logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

json ChatLogprobs(const std::vector<TokenLogprobText>& tokens) {
  json content = json::array();
  for (const TokenLogprobText& t : tokens) {
    json top = json::array();
    for (const auto& [token, logprob] : t.top) {
      top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", Bytes(token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json UsageJson(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string CompletionBody(const AnswerHeader& h, const std::vector<Choice>& choices,
                           const Usage& usage) {
  json out = Envelope(h, false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {{"index", i}};
    if (h.endpoint == Endpoint::kChat) {
      json message = {{"role", "assistant"}};
      message["content"] = c.text.empty() && !c.tool_calls.empty() ? json() : json(c.text);
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCallOut& t : c.tool_calls) {
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = Reason(c.finish_reason);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return Dump(out);
}

std::string ChunkEvent(const AnswerHeader& h, int index, std::string_view text, bool role,
                       std::string_view finish_reason, const json& logprobs) {
  std::string out;
  ChunkEncoder(h).Append(index, text, role, finish_reason, logprobs, &out);
  return out;
}

void AppendJsonString(std::string_view text, std::string* out) {
  if (!common::IsValidUtf8(text)) {
    out->append(Dump(json(common::SanitizeUtf8(text))));
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->reserve(out->size() + text.size() + 2);
  out->push_back('"');
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

ChunkEncoder::ChunkEncoder(const AnswerHeader& h) : chat_(h.endpoint == Endpoint::kChat) {
  prefix_ = "data: {\"id\":";
  AppendJsonString(h.id, &prefix_);
  absl::StrAppend(&prefix_, ",\"object\":\"", chat_ ? "chat.completion.chunk" : "text_completion",
                  "\",\"created\":", h.created, ",\"model\":");
  AppendJsonString(h.model, &prefix_);
  prefix_ += ",\"choices\":[{\"index\":";
  suffix_ = h.usage_in_chunks ? "}],\"usage\":null}\n\n" : "}]}\n\n";
}

void ChunkEncoder::Append(int index, std::string_view text, bool role,
                          std::string_view finish_reason, const json& logprobs,
                          std::string* out) const {
  if (chat_) {
    ChatDelta delta;
    delta.content = text;
    return AppendChat(index, delta, role, finish_reason, logprobs, out);
  }
  out->append(prefix_);
  absl::StrAppend(out, index);
  out->append(",\"text\":");
  AppendJsonString(text, out);
  AppendTail(finish_reason, logprobs, out);
}

void ChunkEncoder::AppendChat(int index, const ChatDelta& delta, bool role,
                              std::string_view finish_reason, const json& logprobs,
                              std::string* out) const {
  out->append(prefix_);
  absl::StrAppend(out, index);
  out->append(",\"delta\":{");
  bool first = true;
  auto key = [&](std::string_view name) {
    if (!first) out->push_back(',');
    first = false;
    out->push_back('"');
    out->append(name);
    out->append("\":");
  };
  if (role) {
    key("role");
    out->append("\"assistant\"");
  }
  if (!delta.content.empty() || role) {
    key("content");
    AppendJsonString(delta.content, out);
  }
  if (!delta.reasoning.empty()) {
    key("reasoning_content");
    AppendJsonString(delta.reasoning, out);
  }
  if (delta.tool_index >= 0) {
    key("tool_calls");
    absl::StrAppend(out, "[{\"index\":", delta.tool_index);
    if (!delta.tool_id.empty()) {
      out->append(",\"id\":");
      AppendJsonString(delta.tool_id, out);
      out->append(",\"type\":\"function\",\"function\":{\"name\":");
      AppendJsonString(delta.tool_name, out);
      out->push_back(',');
    } else {
      out->append(",\"function\":{");
    }
    out->append("\"arguments\":");
    AppendJsonString(delta.tool_arguments, out);
    out->append("}}]");
  }
  out->push_back('}');
  AppendTail(finish_reason, logprobs, out);
}

void ChunkEncoder::AppendTail(std::string_view finish_reason, const json& logprobs,
                              std::string* out) const {
  out->append(",\"logprobs\":");
  out->append(logprobs.is_null() ? "null" : Dump(logprobs));
  out->append(",\"finish_reason\":");
  if (finish_reason.empty()) {
    out->append("null");
  } else {
    AppendJsonString(finish_reason, out);
  }
  out->append(suffix_);
}

std::string UsageEvent(const AnswerHeader& h, const Usage& usage) {
  json out = Envelope(h, true);
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return absl::StrCat("data: ", Dump(out), "\n\n");
}

std::string ErrorEvent(const std::string& error_body) {
  return absl::StrCat("data: ", error_body, "\n\n");
}

}  // namespace pagoda::scheduler::http
