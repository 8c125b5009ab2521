// pagoda-scheduler: the public gRPC API, continuous batching and the KV page tables.
//
//   pagoda-scheduler --listen HOST:PORT --model PATH [--max-batch-tokens N] [--max-running N]
//                    [--max-prefill-chunk N] [--max-queued-requests N]
//                    [--max-queued-prompt-tokens N] [--aging-interval-s S]
//                    [--max-preemptions-in-row N] [--max-plans-in-flight N] [--log-level info]
//                    [--metrics-listen HOST:PORT] [--drain-timeout S]
//                    [--tls-cert PEM --tls-key PEM [--tls-ca PEM]] [--max-request-bytes N]
//                    [--http-listen HOST:PORT [--served-model-name NAME] [--api-key-file FILE]
//                     [--chat-template FILE] [--http-max-body-bytes N]
//                     [--tool-call-parser auto|none|llama3_json|hermes|mistral]
//                     [--responses-db FILE] [--responses-max-rows N] [--responses-max-bytes N]
//                     [--responses-max-age-s S]]
//                    [--tenant-weights FILE] [--fairness vtc|none] [--max-tenant-labels N]
//                    [--preemption-mode auto|recompute|swap] [--max-predicted-wait-s S]
//                    [--constraint-compile-budget-ms MS] [--constraint-cache-entries N]
//
// --http-listen adds the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,
// /v1/responses, /v1/models, /health) on its own port, served by the same engine as the gRPC
// API. The Responses API keeps stored responses in --responses-db (SQLite; in memory without it).
//
// SIGTERM or SIGINT drains: readiness turns NOT_SERVING, new requests get UNAVAILABLE, the
// admitted ones finish within --drain-timeout (the rest end with UNAVAILABLE), then the server
// stops and the process exits 0. A second signal cuts the drain short.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "common/startup.h"
#include "scheduler/server/server.h"
#include "scheduler/service/tenants.h"
#include "scheduler/text/tool_call_format.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "address to serve the API and worker link on");
ABSL_FLAG(std::string, model, "", "GGUF model file (the workers must load the same file)");
ABSL_FLAG(int32_t, max_batch_tokens, 0,
          "input tokens per iteration per worker, at most the worker's own --max-batch-tokens; "
          "0 = the worker's");
ABSL_FLAG(int32_t, max_running, 256, "running sequences per worker");
ABSL_FLAG(int32_t, max_prefill_chunk, 0,
          "prefill tokens per sequence per iteration; 0 = what the worker prefers (a CUDA "
          "worker: its whole --max-batch-tokens), else 512");
ABSL_FLAG(int32_t, max_queued_requests, 4096,
          "requests waiting at most; past it new requests get RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_queued_prompt_tokens, int64_t{1} << 22,
          "prompt tokens waiting at most; past it new requests get RESOURCE_EXHAUSTED");
ABSL_FLAG(double, aging_interval_s, 10,
          "seconds of waiting that raise a request one priority class (bounds the wait of low "
          "priority under a stream of higher ones); 0 = off");
ABSL_FLAG(int32_t, max_preemptions_in_row, 3,
          "times a sequence may be preempted without generating a token before it is spared");
ABSL_FLAG(int32_t, max_plans_in_flight, 2,
          "plans per worker in flight: 2 overlaps planning with execution, 1 turns overlap off");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "reuse the KV of full pages across requests (exact prefix cache); "
          "--enable-prefix-caching=false turns it off");
ABSL_FLAG(double, drain_timeout, 30,
          "seconds the queued and running requests get to finish after SIGTERM/SIGINT; what is "
          "left then ends with UNAVAILABLE");
ABSL_FLAG(double, worker_timeout, 10,
          "seconds a worker link may stay silent (no result, no heartbeat) before it is cut and "
          "its sequences re-queued on the other workers; 0 = never");
ABSL_FLAG(double, shutdown_grace_s, 5,
          "seconds the calls of requests cut at the drain timeout get to return");
ABSL_FLAG(std::string, port_file, "",
          "after binding, write the port here (for --listen HOST:0 in scripts and tests)");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics); empty = off");
ABSL_FLAG(std::string, metrics_port_file, "",
          "after binding, write the metrics port here (for --metrics-listen HOST:0)");
// --log-level, --tls-cert, --tls-key, --tls-ca and --link-token-file: common/startup.h.
ABSL_FLAG(int64_t, max_request_bytes, int64_t{4} << 20,
          "largest Generate/Tokenize request in bytes; larger ones get INVALID_ARGUMENT naming "
          "this limit");
ABSL_FLAG(int64_t, constraint_compile_budget_ms, 2000,
          "structured outputs: the longest a constraint (JSON Schema, regex, choice, grammar) "
          "may take to compile; slower ones are refused naming this budget");
ABSL_FLAG(int64_t, constraint_cache_entries, 1024,
          "structured outputs: compiled constraints kept for reuse (least recently used go "
          "first)");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT to serve the OpenAI-compatible HTTP API on (/v1/completions, "
          "/v1/chat/completions, /v1/models, /health); empty = off");
ABSL_FLAG(std::string, http_port_file, "",
          "after binding, write the HTTP API's port here (for --http-listen HOST:0)");
ABSL_FLAG(int64_t, http_max_body_bytes, int64_t{8} << 20,
          "largest HTTP request body in bytes; larger ones get 413");
ABSL_FLAG(std::string, served_model_name, "",
          "the model's id in the HTTP API (/v1/models, the requests' \"model\"); empty = the "
          "GGUF's general.name, else the file name without .gguf");
ABSL_FLAG(std::string, api_key_file, "",
          "file of the keys HTTP API clients must send as \"Authorization: Bearer KEY\", one per "
          "line; a line \"KEY tenant=NAME\" serves that key's requests as tenant NAME unless "
          "they send X-Pagoda-Tenant; blank and # lines skipped (empty: no authentication)");
ABSL_FLAG(std::string, tenant_weights, "",
          "file of tenant weights for fair share, \"TENANT WEIGHT\" per line (WEIGHT > 0; blank "
          "lines and # comments allowed); tenants not named weigh 1");
ABSL_FLAG(std::string, fairness, "vtc",
          "admission order within a priority class: vtc (the backlogged tenant served least, "
          "by weight, first) or none (arrival order)");
ABSL_FLAG(std::string, preemption_mode, "auto",
          "how a preempted sequence gives its KV back: auto (the cheaper of the two per victim), "
          "recompute, or swap (to the worker's host swap space)");
ABSL_FLAG(double, max_predicted_wait_s, 0,
          "refuse a request whose predicted time to first token is longer (RESOURCE_EXHAUSTED, "
          "HTTP 429, with a retry-after estimate); 0 = off");
ABSL_FLAG(int32_t, max_tenant_labels, 32,
          "tenants not named in --tenant-weights that get a metrics label of their own (first "
          "seen first); the others are summed under tenant=\"other\"");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions; empty = the GGUF's "
          "tokenizer.chat_template");
ABSL_FLAG(std::string, tool_call_parser, "auto",
          "tool-call format of /v1/chat/completions: auto (detected from the chat template), "
          "none, llama3_json, hermes (also Qwen 2.5 / Qwen3) or mistral");
ABSL_FLAG(std::string, responses_db, "",
          "SQLite file of the Responses API's stored responses (kept across restarts); empty = "
          "an in-memory database");
ABSL_FLAG(int64_t, responses_max_rows, 10000,
          "stored responses at most; past it the oldest go first");
ABSL_FLAG(int64_t, responses_max_bytes, int64_t{1} << 30,
          "bytes of stored responses and their conversations at most; past it the oldest go first");
ABSL_FLAG(int64_t, responses_max_age_s, 30 * 24 * 3600,
          "seconds a stored response is kept; 0 = no age limit");

namespace {

// The whole file, or nullopt when it cannot be read.
std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "pagoda-scheduler: %s\n", message.c_str());
  return 1;
}

// Drains on a second thread so that this one can still take a second signal, which cuts the
// drain short; then stops the server. Worker links end only here, after the drain.
void DrainAndStop(pagoda::scheduler::SchedulerServer& server) {
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout));
  const absl::Duration grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  std::thread drain([&] {
    server.Drain(timeout, grace);
    pagoda::common::WakeSignalWaiter();
  });
  while (pagoda::common::WaitForTerminationSignal() != SIGUSR1) {
    PAGODA_LOG(kInfo, "scheduler", "second signal: cutting the drain short");
    server.CutDrainShort();
  }
  drain.join();
  // Every Generate handler has returned, but a handler's final status is sent just after it
  // returns: give those a moment. What else is open (worker links, health watches) never ends
  // on its own and is cancelled when this short grace runs out.
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

// The HTTP API's options from the flags; an error message, or "" when they are fine.
std::string HttpOptions(pagoda::scheduler::ServerOptions* options) {
  options->http_listen = absl::GetFlag(FLAGS_http_listen);
  if (options->http_listen.empty() && !absl::GetFlag(FLAGS_http_port_file).empty()) {
    return "--http-port-file needs --http-listen";
  }
  const int64_t max_body = absl::GetFlag(FLAGS_http_max_body_bytes);
  if (max_body < 1024 || max_body > (int64_t{1} << 30)) {
    return "--http-max-body-bytes must be in [1024, 1073741824]";
  }
  options->http_max_body_bytes = static_cast<size_t>(max_body);
  options->served_model_name = absl::GetFlag(FLAGS_served_model_name);
  if (const std::string path = absl::GetFlag(FLAGS_api_key_file); !path.empty()) {
    std::optional<std::string> text = ReadFile(path);
    if (!text) return "cannot read --api-key-file " + path;
    absl::StatusOr<std::vector<pagoda::scheduler::ApiKey>> keys =
        pagoda::scheduler::ParseApiKeys(*text, path);
    if (!keys.ok()) return std::string(keys.status().message());
    options->api_keys = *std::move(keys);
  }
  if (const std::string path = absl::GetFlag(FLAGS_chat_template); !path.empty()) {
    std::optional<std::string> source = ReadFile(path);
    if (!source) return "cannot read --chat-template " + path;
    if (source->empty()) return "--chat-template " + path + " is empty";
    options->chat_template = *std::move(source);
  }
  absl::StatusOr<std::optional<pagoda::scheduler::text::ToolCallFormat>> format =
      pagoda::scheduler::text::ParseToolCallFormatFlag(absl::GetFlag(FLAGS_tool_call_parser));
  if (!format.ok()) return "--tool-call-parser: " + std::string(format.status().message());
  options->tool_call_format = *format;
  options->responses_db = absl::GetFlag(FLAGS_responses_db);
  options->responses_max_rows = absl::GetFlag(FLAGS_responses_max_rows);
  options->responses_max_bytes = absl::GetFlag(FLAGS_responses_max_bytes);
  options->responses_max_age_s = absl::GetFlag(FLAGS_responses_max_age_s);
  if (options->responses_max_rows < 1 || options->responses_max_bytes < 1024 ||
      options->responses_max_age_s < 0) {
    return absl::StrFormat(
        "--responses-max-rows must be >= 1 (got %d), --responses-max-bytes >= 1024 (got %d) and "
        "--responses-max-age-s >= 0 (got %d)",
        options->responses_max_rows, options->responses_max_bytes, options->responses_max_age_s);
  }
  return "";
}

// The fair-share, preemption and admission options from the flags; an error message, or "".
std::string TenancyOptions(pagoda::scheduler::ServerOptions* options) {
  pagoda::scheduler::SchedulerOptions& o = options->scheduler;
  if (const std::string path = absl::GetFlag(FLAGS_tenant_weights); !path.empty()) {
    std::optional<std::string> text = ReadFile(path);
    if (!text) return "cannot read --tenant-weights " + path;
    auto weights = pagoda::scheduler::ParseTenantWeights(*text, path);
    if (!weights.ok()) return std::string(weights.status().message());
    o.tenant_weights = *std::move(weights);
  }
  absl::StatusOr<pagoda::scheduler::Fairness> fairness =
      pagoda::scheduler::ParseFairness(absl::GetFlag(FLAGS_fairness));
  if (!fairness.ok()) return std::string(fairness.status().message());
  o.fairness = *fairness;
  absl::StatusOr<pagoda::scheduler::PreemptionMode> mode =
      pagoda::scheduler::ParsePreemptionMode(absl::GetFlag(FLAGS_preemption_mode));
  if (!mode.ok()) return std::string(mode.status().message());
  o.preemption_mode = *mode;
  const double wait = absl::GetFlag(FLAGS_max_predicted_wait_s);
  if (!std::isfinite(wait) || wait < 0) {
    return absl::StrFormat(
        "--max-predicted-wait-s must be a finite number of seconds >= 0 (0 = off), got %g", wait);
  }
  o.max_predicted_wait = wait;
  options->max_tenant_labels = absl::GetFlag(FLAGS_max_tenant_labels);
  if (options->max_tenant_labels < 0) {
    return absl::StrFormat("--max-tenant-labels must be >= 0, got %d", options->max_tenant_labels);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (absl::Status s = pagoda::common::StartProcess(
          argc, argv, "pagoda-scheduler --listen HOST:PORT --model PATH");
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  // Debian's Abseil is built with its debug checks, which keep a lock graph on every Mutex
  // acquisition (3% of the serving CPU in bench/streaming.sh). The tests keep the checks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) return Fail("--model PATH is required");

  pagoda::scheduler::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<std::string> token = pagoda::common::LoadLinkTokenFromFlags();
  if (!token.ok()) return Fail(std::string(token.status().message()));
  options.link_token = *std::move(token);
  absl::StatusOr<pagoda::common::TlsConfig> tls =
      pagoda::common::LoadTlsFromFlags(pagoda::common::TlsSide::kServer);
  if (!tls.ok()) return Fail(std::string(tls.status().message()));
  options.tls = *std::move(tls);
  const int64_t max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  if (max_request_bytes < 1024 || max_request_bytes > (int64_t{1} << 30)) {
    return Fail("--max-request-bytes must be in [1024, 1073741824]");
  }
  options.max_request_bytes = static_cast<size_t>(max_request_bytes);
  const int64_t budget_ms = absl::GetFlag(FLAGS_constraint_compile_budget_ms);
  if (budget_ms < 1 || budget_ms > 600000) {
    return Fail("--constraint-compile-budget-ms must be in [1, 600000]");
  }
  options.constraints.compile_budget = absl::Milliseconds(budget_ms);
  const int64_t cache_entries = absl::GetFlag(FLAGS_constraint_cache_entries);
  if (cache_entries < 1 || cache_entries > 1000000) {
    return Fail("--constraint-cache-entries must be in [1, 1000000]");
  }
  options.constraints.cache_entries = static_cast<int32_t>(cache_entries);
  if (absl::GetFlag(FLAGS_worker_timeout) < 0) return Fail("--worker-timeout must be >= 0");
  options.worker_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_timeout));
  options.scheduler.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  options.scheduler.max_prefill_chunk = absl::GetFlag(FLAGS_max_prefill_chunk);
  options.scheduler.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  options.scheduler.max_queued_prompt_tokens = absl::GetFlag(FLAGS_max_queued_prompt_tokens);
  options.scheduler.aging_interval = absl::GetFlag(FLAGS_aging_interval_s);
  options.scheduler.max_preemptions_in_row = absl::GetFlag(FLAGS_max_preemptions_in_row);
  options.scheduler.max_plans_in_flight = absl::GetFlag(FLAGS_max_plans_in_flight);
  options.scheduler.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  const auto& o = options.scheduler;
  if (o.max_batch_tokens < 0 || o.max_running <= 0 || o.max_prefill_chunk < 0 ||
      o.max_queued_requests <= 0 || o.max_queued_prompt_tokens <= 0 ||
      o.max_preemptions_in_row <= 0) {
    return Fail(
        "--max-running, --max-queued-requests, --max-queued-prompt-tokens and "
        "--max-preemptions-in-row must be positive, --max-batch-tokens and --max-prefill-chunk "
        ">= 0 (0: the worker's)");
  }
  if (o.max_plans_in_flight < 1 || o.max_plans_in_flight > 2) {
    return Fail("--max-plans-in-flight must be 1 (no overlap) or 2");
  }
  if (!(absl::GetFlag(FLAGS_drain_timeout) >= 0) || !(absl::GetFlag(FLAGS_shutdown_grace_s) >= 0)) {
    return Fail("--drain-timeout and --shutdown-grace-s must be >= 0 seconds");
  }
  if (const std::string err = HttpOptions(&options); !err.empty()) return Fail(err);
  if (const std::string err = TenancyOptions(&options); !err.empty()) return Fail(err);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (options.metrics_listen.empty() && !absl::GetFlag(FLAGS_metrics_port_file).empty()) {
    return Fail("--metrics-port-file needs --metrics-listen");
  }

  auto model = pagoda::scheduler::LoadServedModel(model_path);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  pagoda::scheduler::SchedulerServer server(std::move(options), *std::move(model));
  if (absl::Status s = server.Start(); !s.ok()) return Fail(std::string(s.message()));
  // The metrics and HTTP ports first: once --port-file exists, all are known.
  if (const std::string file = absl::GetFlag(FLAGS_http_port_file);
      !file.empty() && !pagoda::common::WritePortFile(file, server.http_port())) {
    return Fail("cannot write --http-port-file " + file);
  }
  if (const std::string file = absl::GetFlag(FLAGS_metrics_port_file);
      !file.empty() && !pagoda::common::WritePortFile(file, server.metrics_port())) {
    return Fail("cannot write --metrics-port-file " + file);
  }
  if (const std::string file = absl::GetFlag(FLAGS_port_file);
      !file.empty() && !pagoda::common::WritePortFile(file, server.port())) {
    return Fail("cannot write --port-file " + file);
  }

  const int sig = pagoda::common::WaitForTerminationSignal();
  PAGODA_LOG(kInfo, "scheduler", "signal %d: draining, then stopping", sig);
  DrainAndStop(server);
  PAGODA_LOG(kInfo, "scheduler", "stopped");
  return 0;
}
