// SchedulerServer: one gRPC server carrying the public API (pagoda.v1.Generation), the worker
// link (pagoda.worker.v1.WorkerLink), grpc.health.v1.Health and server reflection, plus the
// Prometheus endpoint (/metrics over HTTP, its own port) when ServerOptions::metrics_listen is
// set, and the OpenAI-compatible HTTP API (scheduler/http, its own port) when
// ServerOptions::http_listen is set: same engine, limits, metrics, logs and drain.
//
// Health, by service name:
//  * "" and "pagoda.v1.Generation" (readiness): SERVING while a worker is attached and no drain
//    has started, NOT_SERVING otherwise;
//  * "liveness": SERVING from Start() until Shutdown(), workers or not, so that an orchestrator
//    does not restart a scheduler that merely waits for its first worker.
//
// Security: ServerOptions::tls serves the one port (API, link, health, reflection) over TLS,
// mutual when it carries a client CA: workers and API clients then need a certificate signed
// by it. The metrics endpoint stays plain HTTP.
//
// Request size: Generate and Tokenize requests above max_request_bytes get INVALID_ARGUMENT
// from the service (naming the limit); gRPC's own receive limit is set above that (twice it,
// and at least 4 MiB, gRPC's default), and only messages beyond it get gRPC's
// RESOURCE_EXHAUSTED.
//
// Stopping: Drain() first (refuse new requests, finish the admitted ones, cut what is left
// after the timeout), then Shutdown() and Wait(). Start() fails with a clear status when an
// address cannot be bound (gRPC's SO_REUSEPORT is turned off so a port in use is an error).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "scheduler/core/scheduler.h"
#include "scheduler/service/constraint_compiler.h"
#include "scheduler/service/served_model.h"
#include "scheduler/service/tenants.h"
#include "scheduler/text/tool_call_format.h"

namespace pagoda::scheduler {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen;  // HOST:PORT for /metrics; empty = no metrics endpoint
  std::string link_token;      // workers must present it; empty = no authentication
  absl::Duration worker_timeout = absl::ZeroDuration();  // silent links are cut; zero = never
  common::TlsConfig tls;                                 // disabled = plaintext
  size_t max_request_bytes = size_t{4} << 20;            // largest Generate/Tokenize request
  ConstraintOptions constraints;  // structured outputs: compile budget and cache
  SchedulerOptions scheduler;     // context_length and eos_id are filled from the model
  // Tenants not in scheduler.tenant_weights with a metrics label of their own, at most.
  int32_t max_tenant_labels = 32;
  // The OpenAI-compatible HTTP API (scheduler/http): served when http_listen is set.
  std::string http_listen;  // HOST:PORT; empty = off
  size_t http_max_body_bytes = size_t{8} << 20;
  std::string served_model_name;  // /v1/models' id; empty = general.name or the file stem
  // HTTP clients must send one as a Bearer token; each may name its requests' tenant. Empty =
  // no authentication.
  std::vector<ApiKey> api_keys;
  std::string chat_template;  // overrides the GGUF's tokenizer.chat_template when set
  // The chat API's tool-call format (--tool-call-parser); nullopt: detected from the template.
  std::optional<text::ToolCallFormat> tool_call_format;
  // The Responses API's stored responses (--responses-db: an SQLite file; empty: in memory)
  // and their limits (--responses-max-rows, --responses-max-bytes, --responses-max-age-s; age 0
  // = none).
  std::string responses_db;
  int64_t responses_max_rows = 10000;
  int64_t responses_max_bytes = int64_t{1} << 30;
  int64_t responses_max_age_s = 30 * 24 * 3600;
};

// What a drain did, for the log and the caller.
struct DrainReport {
  size_t admitted = 0;     // requests queued or running when the drain started
  size_t cut = 0;          // of those, still unfinished at the timeout: ended with UNAVAILABLE
  int64_t refused = 0;     // new requests refused with UNAVAILABLE during the drain
  bool calls_done = true;  // every Generate call returned before the grace ran out
};

class SchedulerServer {
 public:
  SchedulerServer(ServerOptions options, ServedModel model);
  ~SchedulerServer();

  absl::Status Start();
  int port() const;          // the bound port (useful with port 0)
  int metrics_port() const;  // the bound metrics port; 0 without metrics_listen
  int http_port() const;     // the bound HTTP API port; 0 without http_listen

  // Turns readiness NOT_SERVING and refuses new Generate calls with UNAVAILABLE, while workers
  // stay attached and the admitted requests run on. After `timeout`, or CutDrainShort(), the
  // requests still unfinished end with UNAVAILABLE; then waits up to `grace` for their calls
  // to return. Call once, before Shutdown().
  DrainReport Drain(absl::Duration timeout, absl::Duration grace);
  // Thread-safe: makes a Drain() in progress stop waiting for requests now.
  void CutDrainShort();
  // Stops accepting calls; in-flight calls (worker links included) are cancelled after `grace`.
  void Shutdown(absl::Duration grace);
  void Wait();

 private:
  absl::Status StartHttp();

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::scheduler
