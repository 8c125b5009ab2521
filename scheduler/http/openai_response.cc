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
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
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
  out->append(prefix_);
  absl::StrAppend(out, index);
  if (chat_) {
    out->append(",\"delta\":{");
    if (role) out->append("\"role\":\"assistant\"");
    if (!text.empty() || role) {
      if (role) out->push_back(',');
      out->append("\"content\":");
      AppendJsonString(text, out);
    }
    out->push_back('}');
  } else {
    out->append(",\"text\":");
    AppendJsonString(text, out);
  }
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
