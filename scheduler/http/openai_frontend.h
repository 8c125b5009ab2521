// OpenAiFrontend: the OpenAI-compatible API's routes, on top of the engine and the gRPC API's
// validation (GenerationService::Validate: one set of rules and messages for both APIs).
//
//   GET  /health               200 {"status":"ok"} while a worker is attached and no drain runs,
//                              503 otherwise
//   GET  /v1/models            the served model (id = --served-model-name); /v1/models/{id}
//                              that entry alone
//   POST /v1/completions       OpenAiCall (streaming or not)
//   POST /v1/chat/completions  the messages rendered with the chat template (its bos_token and
//                              eos_token from the vocabulary), tokenized with the special tokens
//                              it holds, then OpenAiCall; the output parsed for reasoning and
//                              tool calls (below)
//   POST /v1/responses         OpenAI's Responses API (docs/responses-api.md): the conversation
//                              (the stored one of previous_response_id, then the input items
//                              with item_reference items resolved) rendered as chat, then
//                              OpenAiCall with a ResponsesFormat; with "store" (the default) the
//                              response and its conversation go to the ResponseStore
//   GET, DELETE /v1/responses/{id}  a stored response of the caller's owner (StoreOwner: the API
//                              key's tenant, else the key); 404 for any other id
//
// Reasoning and tool calls (docs/structured-outputs.md, "Tool calls"). The tool-call format is
// FrontendOptions::tool_call_format, or when unset text::DetectToolCallFormat of the chat
// template (logged at start). Every chat request's output goes through text::OutputParser:
//  * reasoning is split off ("<think>...</think>" to reasoning_content) when the template's
//    source contains "<think>" (Qwen3, QwQ, DeepSeek-R1 templates), starting inside the block
//    when the rendered prompt opened it (text::PromptOpensReasoning);
//  * tool calls are parsed when the request has tools, tool_choice is not "none" and the format
//    is known. tool_choice "none" still renders the tools (the model knows them, as on OpenAI)
//    but nothing is parsed as a call;
//  * tool_choice "required" or a named function sets GenerateRequest.constraint.grammar to
//    text::ToolCallGbnf of the tools (each one's parameters schema through
//    grammar::JsonSchemaToGbnf; no parameters: any object), one call for a named function or
//    with parallel_tool_calls false, one or more otherwise. It goes through Validate's compile,
//    cache and budget like any grammar. 400s: an unknown format, a schema the converter refuses
//    (naming the tool and the keyword), another constraint (response_format, ...) beside it;
//  * parallel_tool_calls false with "auto" keeps the first call the model writes
//    (OutputParser::Options::max_tool_calls).
//
// Errors are OpenAI's error JSON: 404 for an unknown path or model, 405 for a known path with
// the wrong method, 401 without a Bearer key when keys are configured (/health needs none),
// 400/429/503 from the request's parse, validation and submission (429 with Retry-After: the
// queue is full, or predicted-wait admission refused; then Retry-After is its estimate). The
// front end tracks its calls so that a drain can wait for them and abort what is left.
//
// Tenant (fair share, SchedulerOptions::tenant_weights): the X-Pagoda-Tenant header when
// present and not empty (a bad name is a 400 naming the header), else the tenant of the API key
// used (--api-key-file ... tenant=NAME), else "default".
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "scheduler/engine/engine.h"
#include "scheduler/http/http_message.h"
#include "scheduler/http/openai_request.h"
#include "scheduler/http/responder.h"
#include "scheduler/http/response_store.h"
#include "scheduler/http/responses_request.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/service/served_model.h"
#include "scheduler/service/tenants.h"
#include "scheduler/text/chat_template.h"
#include "scheduler/text/tool_call_format.h"

namespace pagoda::scheduler::http {

class OpenAiCall;

struct FrontendOptions {
  std::string served_model_name;  // the id of /v1/models; requests may name it or omit it
  // One of them is required as "Authorization: Bearer KEY"; empty = no authentication.
  std::vector<ApiKey> api_keys;
  std::string chat_template;  // Jinja source; empty = the model has none
  // The tool-call format (--tool-call-parser); nullopt: detected from the chat template.
  std::optional<text::ToolCallFormat> tool_call_format;
  // The Responses API's stored responses; must outlive the front end. Null: /v1/responses
  // answers 503 (never in the server, which always opens one).
  ResponseStore* response_store = nullptr;
};

// Parses a chat template given with --chat-template: an error names the flag and the problem.
absl::Status CheckChatTemplate(const std::string& source);

class OpenAiFrontend {
 public:
  // `engine`, `service` and `model` must outlive the front end.
  OpenAiFrontend(Engine* engine, GenerationService* service, const ServedModel* model,
                 FrontendOptions options);
  ~OpenAiFrontend();

  // On the connection's strand: answers `request` through `responder`.
  void Handle(HttpRequest request, std::shared_ptr<Responder> responder);

  // /health answers 503 from now on (the engine refuses new requests itself).
  void SetDraining();
  // Ends every call still in progress with 503 and `why` (a drain ran out of time).
  void AbortAll(const std::string& why);
  // Waits until no call is in progress, or until `deadline`; true when none is.
  bool WaitNoActiveCalls(absl::Time deadline);

  const FrontendOptions& options() const { return options_; }

 private:
  friend class OpenAiCall;

  // The answer to a request that is not a generation (health, models, errors); nullopt when
  // `request` is a generation the caller must start. `key` is set to the API key it presented.
  std::optional<std::string> Route(const HttpRequest& request, std::optional<Endpoint>* endpoint,
                                   const ApiKey** key);
  // The key `authorization` presents ("Bearer KEY"); null when none matches.
  const ApiKey* FindKey(std::string_view authorization) const;
  // The request's tenant (see Tenant above) into `generate`; a 400 for a bad header.
  std::optional<ApiError> SetTenant(const HttpRequest& request, const ApiKey* key,
                                    pagoda::v1::GenerateRequest* generate) const;
  std::string Models(bool keep_alive) const;
  // A 404 when the request names a model this server does not serve.
  std::optional<ApiError> CheckModel(const std::string& model) const;
  // POST /v1/responses: parses, resolves the conversation and starts the call.
  void HandleResponses(const HttpRequest& request, const ApiKey* key,
                       std::shared_ptr<Responder> responder);
  // The conversation `request` continues and adds (previous_response_id's, then its input with
  // item_reference items resolved), rendered into its chat request; an error to answer.
  std::optional<ApiError> ResolveConversation(const std::string& owner, int64_t now,
                                              ResponsesRequest* request,
                                              nlohmann::ordered_json* conversation) const;
  // GET or DELETE /v1/responses/{id}.
  std::string AnswerStored(const HttpRequest& request, const ApiKey* key, std::string_view id);
  nlohmann::json ModelJson() const;  // the served model's entry in /v1/models
  std::string Health(bool keep_alive);
  // Sets the prompt of a chat request: the messages rendered and tokenized; then
  // PrepareOutput.
  absl::Status RenderChat(OpenAiRequest* request) const;
  // Sets a chat request's parsing and, for a forced tool_choice, its grammar (see above).
  absl::Status PrepareOutput(std::string_view prompt, OpenAiRequest* request) const;

  void CallStarted(std::shared_ptr<OpenAiCall> call);
  void CallEnded(OpenAiCall* call);
  std::optional<std::string> AbortMessage();

  Engine* const engine_;
  GenerationService* const service_;
  const ServedModel* const model_;
  const FrontendOptions options_;
  const int64_t created_;  // /v1/models' "created": when the server started
  // 16 random hex digits drawn at start: response ids are "cmpl-<tag>-<request id>", so they
  // stay unique across restarts and across replicas behind one load balancer.
  const std::string id_tag_;
  // The parsed chat template, or why there is none.
  std::optional<text::ChatTemplate> chat_template_;
  std::string chat_template_error_;
  text::ToolCallFormat tool_call_format_ = text::ToolCallFormat::kNone;
  bool reasoning_ = false;                       // the template's source contains "<think>"
  mutable std::atomic<uint64_t> id_counter_{0};  // feeds the tool-call ids' seeds

  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::string> abort_message_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<OpenAiCall*, std::shared_ptr<OpenAiCall>> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler::http
