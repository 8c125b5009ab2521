#include "scheduler/http/openai_response.h"

#include "absl/strings/str_cat.h"

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
  json out = Envelope(h, true);
  json choice = {{"index", index}};
  if (h.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = std::string(text);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = Reason(finish_reason);
  out["choices"] = json::array({std::move(choice)});
  if (h.usage_in_chunks) out["usage"] = nullptr;
  return absl::StrCat("data: ", Dump(out), "\n\n");
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
