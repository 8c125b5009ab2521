#include "scheduler/http/openai_frontend.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grammar/json_schema.h"
#include "common/log.h"
#include "scheduler/http/openai_call.h"
#include "scheduler/http/openai_response.h"
#include "scheduler/http/responses_format.h"

namespace pagoda::scheduler::http {
namespace {

using nlohmann::json;

// Compares without an early exit, so that the time taken tells nothing of the key.
bool SameKey(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string MethodNotAllowed(std::string_view allow, bool keep_alive) {
  ApiError e =
      MakeError(405, absl::StrCat("method not allowed; this path takes ", std::string(allow)));
  return HttpResponse(405, "application/json", e.Body(), keep_alive,
                      {{"Allow", std::string(allow)}});
}

std::string RandomTag() {
  std::random_device device;
  const uint64_t bits = uint64_t{device()} << 32 | device();
  return absl::StrFormat("%016x", bits);
}

}  // namespace

OpenAiFrontend::OpenAiFrontend(Engine* engine, GenerationService* service, const ServedModel* model,
                               FrontendOptions options)
    : engine_(engine),
      service_(service),
      model_(model),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())),
      id_tag_(RandomTag()) {
  tool_call_format_ =
      options_.tool_call_format.value_or(text::DetectToolCallFormat(options_.chat_template));
  reasoning_ = absl::StrContains(options_.chat_template, "<think>");
  PAGODA_LOG(kInfo, "http", "tool calls: format %s (%s); reasoning split: %s",
             text::ToolCallFormatName(tool_call_format_),
             options_.tool_call_format ? "--tool-call-parser" : "detected from the chat template",
             reasoning_ ? "<think> blocks" : "no");
  if (options_.chat_template.empty()) {
    chat_template_error_ =
        "the model has no chat template (no tokenizer.chat_template in its GGUF file): start "
        "pagoda-scheduler with --chat-template FILE, or use /v1/completions";
    return;
  }
  absl::StatusOr<text::ChatTemplate> parsed = text::ChatTemplate::Parse(options_.chat_template);
  if (parsed.ok()) {
    chat_template_ = *std::move(parsed);
  } else {
    chat_template_error_ =
        absl::StrCat("the model's chat template does not parse (", parsed.status().message(),
                     "): start pagoda-scheduler with --chat-template FILE, or use /v1/completions");
    PAGODA_LOG(kWarning, "http", "%s", chat_template_error_);
  }
}

absl::Status CheckChatTemplate(const std::string& source) {
  absl::StatusOr<text::ChatTemplate> parsed = text::ChatTemplate::Parse(source);
  if (parsed.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--chat-template does not parse: ", parsed.status().message()));
}

OpenAiFrontend::~OpenAiFrontend() = default;

const ApiKey* OpenAiFrontend::FindKey(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) return nullptr;
  authorization.remove_prefix(kBearer.size());
  const ApiKey* found = nullptr;
  // Every key is compared, so that the time taken tells nothing of which one matched.
  for (const ApiKey& key : options_.api_keys) {
    if (SameKey(authorization, key.key) && found == nullptr) found = &key;
  }
  return found;
}

std::optional<ApiError> OpenAiFrontend::SetTenant(const HttpRequest& request, const ApiKey* key,
                                                  pagoda::v1::GenerateRequest* generate) const {
  if (!request.tenant.empty()) {
    const std::string what = "the " + std::string(kTenantHeader) + " header";
    if (absl::Status s = CheckTenantName(request.tenant, what); !s.ok()) {
      return BadRequest(std::string(s.message()), std::string(kTenantHeader));
    }
    generate->set_tenant(request.tenant);
  } else if (key != nullptr && !key->tenant.empty()) {
    generate->set_tenant(key->tenant);
  } else {
    generate->clear_tenant();  // the default tenant
  }
  return std::nullopt;
}

std::optional<std::string> OpenAiFrontend::Route(const HttpRequest& request,
                                                 std::optional<Endpoint>* endpoint,
                                                 const ApiKey** key) {
  const bool keep = request.keep_alive;
  const std::string& path = request.target;
  if (path == "/health") {
    if (request.method != "GET" && request.method != "HEAD") return MethodNotAllowed("GET", keep);
    return Health(keep);
  }
  if (!options_.api_keys.empty()) {
    *key = FindKey(request.authorization);
    if (*key == nullptr) {
      return ErrorResponse(
          MakeError(401, "missing or wrong API key: send \"Authorization: Bearer KEY\"",
                    "authentication_error", "", "invalid_api_key"),
          keep);
    }
  }
  if (path == "/v1/models") {
    if (request.method != "GET") return MethodNotAllowed("GET", keep);
    return Models(keep);
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses") {
    if (request.method != "POST") return MethodNotAllowed("POST", keep);
    *endpoint = path == "/v1/completions" ? Endpoint::kCompletions
                : path == "/v1/responses" ? Endpoint::kResponses
                                          : Endpoint::kChat;
    return std::nullopt;
  }
  if (const std::string kStored = "/v1/responses/"; absl::StartsWith(path, kStored)) {
    if (request.method != "GET" && request.method != "DELETE") {
      return MethodNotAllowed("GET, DELETE", keep);
    }
    return AnswerStored(request, *key, std::string_view(path).substr(kStored.size()));
  }
  if (absl::StartsWith(path, "/v1/models/")) {
    if (request.method != "GET") return MethodNotAllowed("GET", keep);
    const std::string id = path.substr(11);
    if (id == options_.served_model_name) {
      return HttpResponse(200, "application/json", Dump(ModelJson()), keep);
    }
    return ErrorResponse(MakeError(404, absl::StrCat("the model '", id, "' does not exist"),
                                   "invalid_request_error", "model", "model_not_found"),
                         keep);
  }
  return ErrorResponse(MakeError(404, absl::StrCat("no such path: ", path), "invalid_request_error",
                                 "", "not_found"),
                       keep);
}

void OpenAiFrontend::Handle(HttpRequest request, std::shared_ptr<Responder> responder) {
  std::optional<Endpoint> endpoint;
  const ApiKey* key = nullptr;
  std::optional<std::string> answer = Route(request, &endpoint, &key);
  const bool keep = request.keep_alive;
  auto reply = [&](std::string bytes) {
    responder->Write(std::move(bytes),
                     [responder, keep](bool ok) { responder->Complete(ok && keep); });
  };
  if (answer) return reply(*std::move(answer));
  if (*endpoint == Endpoint::kResponses) return HandleResponses(request, key, std::move(responder));
  OpenAiRequest parsed;
  if (std::optional<ApiError> e = ParseOpenAiRequest(*endpoint, request.body, &parsed)) {
    return reply(ErrorResponse(*e, keep));
  }
  if (std::optional<ApiError> e = CheckModel(parsed.model)) return reply(ErrorResponse(*e, keep));
  parsed.generate.set_request_id("");
  if (std::optional<ApiError> e = SetTenant(request, key, &parsed.generate)) {
    return reply(ErrorResponse(*e, keep));
  }
  if (parsed.endpoint == Endpoint::kChat) {
    if (absl::Status s = RenderChat(&parsed); !s.ok()) {
      return reply(ErrorResponse(FromStatus(s), keep));
    }
  }
  OpenAiCall::Start(this, std::move(responder), std::move(parsed), keep);
}

std::optional<ApiError> OpenAiFrontend::CheckModel(const std::string& model) const {
  if (model.empty() || model == options_.served_model_name) return std::nullopt;
  return MakeError(404,
                   absl::StrCat("the model '", model, "' does not exist; this server serves '",
                                options_.served_model_name, "'"),
                   "invalid_request_error", "model", "model_not_found");
}

json OpenAiFrontend::ModelJson() const {
  return json{{"id", options_.served_model_name},
              {"object", "model"},
              {"created", created_},
              {"owned_by", "pagoda"},
              {"max_model_len", model_->config.context_length}};
}

std::string OpenAiFrontend::Models(bool keep_alive) const {
  json out = {{"object", "list"}, {"data", json::array({ModelJson()})}};
  return HttpResponse(200, "application/json", Dump(out), keep_alive);
}

std::string OpenAiFrontend::Health(bool keep_alive) {
  bool draining = false;
  {
    absl::MutexLock lock(&mu_);
    draining = draining_;
  }
  const size_t workers = engine_->Status().workers.size();
  if (draining || workers == 0) {
    json out = {{"status", draining ? "draining" : "no worker attached"}};
    return HttpResponse(503, "application/json", Dump(out), keep_alive);
  }
  return HttpResponse(200, "application/json", Dump(json{{"status", "ok"}}), keep_alive);
}

absl::Status OpenAiFrontend::RenderChat(OpenAiRequest* request) const {
  if (!chat_template_) return absl::InvalidArgumentError(chat_template_error_);
  const text::Tokenizer& tok = model_->tokenizer;
  text::ChatRenderOptions options;
  options.add_generation_prompt = request->add_generation_prompt;
  if (tok.bos_id() >= 0) options.bos_token = std::string(tok.Piece(tok.bos_id()));
  if (tok.eos_id() >= 0) options.eos_token = std::string(tok.Piece(tok.eos_id()));
  options.tools = request->tools;
  std::vector<text::ChatMessage> messages;
  messages.reserve(request->messages.size());
  for (ChatTurn& turn : request->messages) {
    text::ChatMessage& m = messages.emplace_back();
    m.role = std::move(turn.role);
    m.content = std::move(turn.content);
    if (turn.content_null) m.content_json = nullptr;  // the template sees none, as OpenAI sent
    m.name = std::move(turn.name);
    m.tool_calls = std::move(turn.tool_calls);
    m.tool_call_id = std::move(turn.tool_call_id);
    if (turn.reasoning_content) m.extra_fields["reasoning_content"] = *turn.reasoning_content;
  }
  absl::StatusOr<std::string> prompt = chat_template_->Render(messages, options);
  if (!prompt.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template failed: ", prompt.status().message()));
  }
  // As Hugging Face and vLLM do, the rendered text is tokenized with its special tokens parsed
  // and nothing added, except that a model that wants a BOS gets one when the template did not
  // write it (llama.cpp's rule, which never doubles it).
  std::vector<int32_t> ids = tok.Encode(*prompt, /*add_special=*/false, /*parse_special=*/true);
  const bool template_wrote_bos = !ids.empty() && ids.front() == tok.bos_id();
  if (tok.add_bos() && tok.bos_id() >= 0 && !template_wrote_bos) {
    ids.insert(ids.begin(), tok.bos_id());
  }
  auto* dst = request->generate.mutable_token_ids()->mutable_ids();
  dst->Assign(ids.begin(), ids.end());
  return PrepareOutput(*prompt, request);
}

absl::Status OpenAiFrontend::PrepareOutput(std::string_view prompt, OpenAiRequest* request) const {
  const bool tools = request->tools.has_value() && request->tool_choice != ToolChoice::kNone;
  text::OutputParser::Options parsing{
      .reasoning = reasoning_,
      .starts_in_reasoning = reasoning_ && text::PromptOpensReasoning(prompt),
      .format = tool_call_format_,
      .tools_given = tools,
      // Ids differ between requests (and restarts: the tag is random).
      .id_seed = std::hash<std::string>{}(id_tag_) + static_cast<uint64_t>(id_counter_++),
      .max_tool_calls = request->parallel_tool_calls ? 0 : 1,
  };
  if (tools || reasoning_) request->parsing = parsing;
  const bool forced = request->tool_choice == ToolChoice::kRequired ||
                      request->tool_choice == ToolChoice::kFunction;
  if (!forced) return absl::OkStatus();
  if (tool_call_format_ == text::ToolCallFormat::kNone) {
    return absl::InvalidArgumentError(
        "tool_choice \"required\" or a named function needs the model's tool-call format, "
        "which its chat template does not show: start pagoda-scheduler with --tool-call-parser");
  }
  if (request->generate.has_constraint()) {
    return absl::InvalidArgumentError(
        "tool_choice \"required\" or a named function constrains the answer, and so does "
        "response_format (or a guided_* field); set one of them");
  }
  std::vector<text::ToolGrammar> grammars;
  for (const nlohmann::ordered_json& tool : *request->tools) {
    const nlohmann::ordered_json& f = tool["function"];
    std::string name = f["name"].get<std::string>();
    if (request->tool_choice == ToolChoice::kFunction && name != request->tool_choice_function) {
      continue;
    }
    nlohmann::ordered_json schema = nlohmann::ordered_json{{"type", "object"}};
    if (auto p = f.find("parameters"); p != f.end() && !p->is_null()) schema = *p;
    absl::StatusOr<std::string> gbnf =
        grammar::JsonSchemaToGbnf(schema, service_->schema_options());
    if (!gbnf.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools: the parameters of '", name, "': ", gbnf.status().message()));
    }
    grammars.push_back(text::ToolGrammar{.name = std::move(name), .arguments_gbnf = *gbnf});
  }
  const bool parallel =
      request->tool_choice == ToolChoice::kRequired && request->parallel_tool_calls;
  absl::StatusOr<std::string> gbnf = text::ToolCallGbnf(tool_call_format_, grammars, parallel);
  if (!gbnf.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tools: ", gbnf.status().message()));
  }
  request->generate.mutable_constraint()->set_grammar(*std::move(gbnf));
  return absl::OkStatus();
}

namespace {

// The 404 of an id that is not among the caller's stored responses.
ApiError NotStored(std::string_view what, std::string_view id, std::string param) {
  return MakeError(404,
                   absl::StrCat("no stored ", std::string(what), " with id '", std::string(id),
                                "' (it was never stored, was deleted, has expired, or belongs "
                                "to another API key)"),
                   "invalid_request_error", std::move(param), "response_not_found");
}

std::string Owner(const ApiKey* key) {
  return key == nullptr ? "" : StoreOwner(key->key, key->tenant);
}

}  // namespace

std::string OpenAiFrontend::AnswerStored(const HttpRequest& request, const ApiKey* key,
                                         std::string_view id) {
  const bool keep = request.keep_alive;
  ResponseStore* store = options_.response_store;
  if (store == nullptr) {
    return ErrorResponse(MakeError(503, "this server stores no responses"), keep);
  }
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  if (request.method == "DELETE") {
    if (!store->Delete(id, Owner(key), now))
      return ErrorResponse(NotStored("response", id, ""), keep);
    json out = {{"id", id}, {"object", "response"}, {"deleted", true}};
    return HttpResponse(200, "application/json", Dump(out), keep);
  }
  std::optional<http::StoredResponse> stored = store->Get(id, Owner(key), now);
  if (!stored) return ErrorResponse(NotStored("response", id, ""), keep);
  return HttpResponse(200, "application/json",
                      stored->response.dump(-1, ' ', false, json::error_handler_t::replace), keep);
}

std::optional<ApiError> OpenAiFrontend::ResolveConversation(
    const std::string& owner, int64_t now, ResponsesRequest* request,
    nlohmann::ordered_json* conversation) const {
  using ordered = nlohmann::ordered_json;
  ResponseStore* store = options_.response_store;
  *conversation = ordered::array();
  if (!request->previous_response_id.empty()) {
    std::optional<http::StoredResponse> previous =
        store == nullptr ? std::nullopt : store->Get(request->previous_response_id, owner, now);
    if (!previous) {
      return NotStored("response", request->previous_response_id, "previous_response_id");
    }
    *conversation = std::move(previous->conversation);
    const ordered& output = previous->response["output"];
    if (output.is_array()) {
      for (const ordered& item : output) conversation->push_back(item);
    }
  }
  for (size_t i = 0; i < request->input.size(); ++i) {
    ordered& item = request->input[i];
    if (item.value("type", ordered()) == "item_reference") {
      const std::string id = item["id"].get<std::string>();
      std::optional<ordered> found = store == nullptr ? std::nullopt : store->Item(id, owner, now);
      if (!found) return NotStored("item", id, absl::StrCat("input[", i, "]"));
      item = *std::move(found);
    }
    conversation->push_back(item);
  }
  return ConversationTurns(*conversation, request->instructions, "input", &request->chat.messages);
}

void OpenAiFrontend::HandleResponses(const HttpRequest& request, const ApiKey* key,
                                     std::shared_ptr<Responder> responder) {
  const bool keep = request.keep_alive;
  auto refuse = [&](const ApiError& e) {
    responder->Write(ErrorResponse(e, keep),
                     [responder, keep](bool ok) { responder->Complete(ok && keep); });
  };
  auto parsed = std::make_unique<ResponsesRequest>();
  if (std::optional<ApiError> e = ParseResponsesRequest(request.body, parsed.get()))
    return refuse(*e);
  if (std::optional<ApiError> e = CheckModel(parsed->chat.model)) return refuse(*e);
  parsed->chat.generate.set_request_id("");
  if (std::optional<ApiError> e = SetTenant(request, key, &parsed->chat.generate)) {
    return refuse(*e);
  }
  const std::string owner = Owner(key);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  auto conversation = std::make_shared<nlohmann::ordered_json>();
  if (std::optional<ApiError> e =
          ResolveConversation(owner, now, parsed.get(), conversation.get())) {
    return refuse(*e);
  }
  if (absl::Status s = RenderChat(&parsed->chat); !s.ok()) return refuse(FromStatus(s));
  ResponsesFormat::Options format{.echo = std::move(parsed->echo),
                                  .model = options_.served_model_name,
                                  .id_tag = id_tag_,
                                  .stream = parsed->chat.stream,
                                  .keep_alive = keep,
                                  .on_final = nullptr};
  if (parsed->store && options_.response_store != nullptr) {
    format.on_final = [store = options_.response_store, owner,
                       conversation](const nlohmann::ordered_json& response) {
      const std::string id = response["id"].get<std::string>();
      absl::Status s = store->Put(
          id, owner, absl::ToUnixSeconds(absl::Now()),
          http::StoredResponse{.conversation = std::move(*conversation), .response = response});
      if (!s.ok()) PAGODA_LOG(kWarning, "http", "response %s not stored: %s", id, s.message());
    };
  }
  OpenAiCall::Start(this, std::move(responder), std::move(parsed->chat), keep,
                    std::make_unique<ResponsesFormat>(std::move(format)));
}

void OpenAiFrontend::SetDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void OpenAiFrontend::CallStarted(std::shared_ptr<OpenAiCall> call) {
  absl::MutexLock lock(&mu_);
  OpenAiCall* key = call.get();
  calls_.emplace(key, std::move(call));
}

void OpenAiFrontend::CallEnded(OpenAiCall* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

std::optional<std::string> OpenAiFrontend::AbortMessage() {
  absl::MutexLock lock(&mu_);
  return abort_message_;
}

void OpenAiFrontend::AbortAll(const std::string& why) {
  std::vector<std::shared_ptr<OpenAiCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    abort_message_ = why;
    for (const auto& [key, call] : calls_) calls.push_back(call);
  }
  for (const auto& call : calls) call->Abort(why);
}

bool OpenAiFrontend::WaitNoActiveCalls(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

}  // namespace pagoda::scheduler::http
