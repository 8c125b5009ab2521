#include "scheduler/server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "scheduler/engine/engine.h"
#include "scheduler/http/http_server.h"
#include "scheduler/http/openai_frontend.h"
#include "scheduler/http/response_store.h"
#include "scheduler/link/link_service.h"
#include "scheduler/metrics/metrics.h"
#include "scheduler/service/generation_service.h"

namespace pagoda::scheduler {
namespace {

constexpr char kGenerationService[] = "pagoda.v1.Generation";
constexpr char kLivenessService[] = "liveness";
// How often a drain looks for a CutDrainShort() while it waits for requests.
constexpr absl::Duration kDrainPoll = absl::Milliseconds(50);
// gRPC's default receive limit: worker results never came near it, so it stays the floor.
constexpr size_t kMinTransportLimit = size_t{4} << 20;

// gRPC's receive limit for a service limit of `max_request_bytes`: requests between the two
// reach the service, which refuses them with INVALID_ARGUMENT naming the limit.
int TransportLimit(size_t max_request_bytes) {
  const size_t limit = std::max(kMinTransportLimit, 2 * max_request_bytes);
  return static_cast<int>(std::min<size_t>(limit, INT_MAX));
}

// The tenants named in --tenant-weights keep their own metrics label whatever the bound.
MetricsOptions ToMetricsOptions(const ServerOptions& o) {
  MetricsOptions m;
  for (const auto& [tenant, weight] : o.scheduler.tenant_weights) m.named_tenants.push_back(tenant);
  std::sort(m.named_tenants.begin(), m.named_tenants.end());
  m.max_tenant_labels = o.max_tenant_labels;
  return m;
}

EngineGauges ToGauges(const EngineStatus& s) {
  EngineGauges g;
  g.running = s.running;
  g.waiting = s.waiting;
  g.preempted = s.preempted;
  g.preemptions_total = s.preemptions_total;
  g.prefix_cache_queries = s.prefix_cache_queried_tokens;
  g.prefix_cache_hits = s.prefix_cache_hit_tokens;
  g.preemptions_recompute = s.preemptions_recompute;
  g.preemptions_swap = s.preemptions_swap;
  g.swapped_out_pages = s.swapped_out_pages;
  g.swapped_in_pages = s.swapped_in_pages;
  for (const TenantStats& t : s.tenants) {
    g.tenants.push_back({t.name, t.served_tokens, t.queued, t.running});
  }
  for (const WorkerStatus& w : s.workers) {
    g.workers.push_back(
        {w.name, w.info.num_pages, w.info.num_pages - w.free_pages, w.cached_pages});
  }
  return g;
}

}  // namespace

struct SchedulerServer::Impl {
  Impl(ServerOptions opts, ServedModel served)
      : options(std::move(opts)),
        model(std::move(served)),
        metrics(ToMetricsOptions(options)),
        engine(
            options.scheduler,
            [start = absl::Now()] { return absl::ToDoubleSeconds(absl::Now() - start); }, &metrics),
        generation(&engine, &model, &metrics,
                   GenerationLimits{.max_request_bytes = options.max_request_bytes,
                                    .constraints = options.constraints}),
        link(&engine,
             LinkOptions{.model_fingerprint = model.fingerprint,
                         .link_token = options.link_token,
                         .worker_timeout = options.worker_timeout,
                         .vocabulary = std::make_shared<const pagoda::worker::v1::Vocabulary>(
                             WorkerVocabulary(model.tokenizer))}) {}
  // A scrape must not reach the engine while it is being destroyed, nor an HTTP connection.
  ~Impl() {
    metrics.SetSnapshotSource(nullptr);
    if (http_server) http_server->Stop();
  }

  // Readiness follows both the attached workers and the drain; the two change on different
  // threads, so they are combined under one lock.
  void SetWorkers(size_t count) {
    absl::MutexLock lock(&health_mu);
    workers = count;
    PublishReadinessLocked();
  }
  void SetDraining() {
    absl::MutexLock lock(&health_mu);
    draining = true;
    PublishReadinessLocked();
  }
  void PublishReadinessLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu) {
    // Named services only: the bool-only overload would overwrite "liveness" too.
    const bool ready = workers > 0 && !draining;
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    health->SetServingStatus("", ready);
    health->SetServingStatus(kGenerationService, ready);
  }

  ServerOptions options;
  ServedModel model;
  SchedulerMetrics metrics;  // before the engine and the service, which report to it
  // Readiness inputs; declared before the server, whose last link handlers may update them.
  absl::Mutex health_mu;
  size_t workers ABSL_GUARDED_BY(health_mu) = 0;
  bool draining ABSL_GUARDED_BY(health_mu) = false;
  std::atomic<bool> cut_drain{false};
  // The HTTP API, when served. Declared before the engine so that it is destroyed after it: the
  // engine's last sinks may hold HTTP connections, whose sockets need the server's io_context.
  std::unique_ptr<http::HttpServer> http_server;
  std::unique_ptr<http::ResponseStore> response_store;  // outlives the front end
  std::unique_ptr<http::OpenAiFrontend> http_frontend;
  Engine engine;
  GenerationService generation;
  LinkService link;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  int metrics_port = 0;
  int http_port = 0;
};

namespace {

// /v1/models' id when none is given: general.name, else the file name without .gguf.
std::string DefaultServedName(const ServedModel& model) {
  if (!model.config.name.empty()) return model.config.name;
  std::string name = model.path.substr(model.path.find_last_of('/') + 1);
  constexpr std::string_view kExtension = ".gguf";
  if (name.size() > kExtension.size() && name.ends_with(kExtension)) {
    name.resize(name.size() - kExtension.size());
  }
  return name;
}

ServerOptions WithModelLimits(ServerOptions options, const ServedModel& model) {
  options.scheduler.context_length = model.config.context_length;
  options.scheduler.eos_id = model.tokenizer.eos_id();
  for (int32_t id : model.tokenizer.EndOfGenerationIds()) {
    if (id != model.tokenizer.eos_id()) options.scheduler.more_eos_ids.push_back(id);
  }
  return options;
}

}  // namespace

SchedulerServer::SchedulerServer(ServerOptions options, ServedModel model) {
  ServerOptions resolved = WithModelLimits(std::move(options), model);
  impl_ = std::make_unique<Impl>(std::move(resolved), std::move(model));
}

SchedulerServer::~SchedulerServer() {
  if (impl_->server) Shutdown(absl::ZeroDuration());
}

absl::Status SchedulerServer::StartHttp() {
  const ServerOptions& o = impl_->options;
  if (!o.chat_template.empty()) {
    if (absl::Status s = http::CheckChatTemplate(o.chat_template); !s.ok()) return s;
  }
  http::FrontendOptions frontend;
  frontend.served_model_name =
      o.served_model_name.empty() ? DefaultServedName(impl_->model) : o.served_model_name;
  frontend.api_keys = o.api_keys;
  frontend.chat_template =
      o.chat_template.empty() ? impl_->model.tokenizer.chat_template() : o.chat_template;
  frontend.tool_call_format = o.tool_call_format;
  absl::StatusOr<std::unique_ptr<http::ResponseStore>> store = http::ResponseStore::Open(
      o.responses_db, http::StoreLimits{.max_rows = o.responses_max_rows,
                                        .max_bytes = o.responses_max_bytes,
                                        .max_age_s = o.responses_max_age_s});
  if (!store.ok()) return store.status();
  impl_->response_store = *std::move(store);
  frontend.response_store = impl_->response_store.get();
  PAGODA_LOG(kInfo, "scheduler", "Responses API: %d stored responses in %s",
             impl_->response_store->rows(),
             o.responses_db.empty() ? "memory (--responses-db not set)" : o.responses_db);
  impl_->http_frontend = std::make_unique<http::OpenAiFrontend>(&impl_->engine, &impl_->generation,
                                                                &impl_->model, std::move(frontend));
  http::HttpServerOptions server;
  server.listen = o.http_listen;
  server.limits.max_body_bytes = o.http_max_body_bytes;
  impl_->http_server =
      std::make_unique<http::HttpServer>(std::move(server), impl_->http_frontend.get());
  if (absl::Status s = impl_->http_server->Start(); !s.ok()) return s;
  impl_->http_port = impl_->http_server->port();
  PAGODA_LOG(kInfo, "scheduler", "HTTP API serves the model as '%s'%s",
             impl_->http_frontend->options().served_model_name,
             o.api_keys.empty() ? "" : " (Bearer key required)");
  return absl::OkStatus();
}

absl::Status SchedulerServer::Start() {
  if (!impl_->options.http_listen.empty()) {
    if (absl::Status s = StartHttp(); !s.ok()) return s;
  }
  if (!impl_->options.metrics_listen.empty()) {
    absl::StatusOr<int> port = impl_->metrics.Serve(impl_->options.metrics_listen);
    if (!port.ok()) return port.status();
    impl_->metrics_port = *port;
    impl_->metrics.SetSnapshotSource(
        [impl = impl_.get()] { return ToGauges(impl->engine.Status()); });
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(TransportLimit(impl_->options.max_request_bytes));
  builder.AddListeningPort(impl_->options.listen, common::MakeServerCredentials(impl_->options.tls),
                           &impl_->port);
  builder.RegisterService(&impl_->generation);
  builder.RegisterService(&impl_->link);
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    impl_->server.reset();
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s: the address is invalid or the port is in use%s",
        impl_->options.listen,
        impl_->options.tls.enabled
            ? ", or the TLS key does not match the certificate (gRPC's log above says which)"
            : ""));
  }
  impl_->server->GetHealthCheckService()->SetServingStatus(kLivenessService, true);
  impl_->SetWorkers(0);
  impl_->engine.SetWorkersChangedCallback([impl = impl_.get()](size_t n) { impl->SetWorkers(n); });
  PAGODA_LOG(kInfo, "scheduler", "serving %s (%s, fingerprint %s) on port %d (%s)",
             impl_->model.path, impl_->model.config.architecture, impl_->model.fingerprint,
             impl_->port, common::DescribeTls(impl_->options.tls, common::TlsSide::kServer));
  if (impl_->metrics_port != 0) {
    PAGODA_LOG(kInfo, "scheduler", "metrics on %s (port %d), path /metrics",
               impl_->options.metrics_listen, impl_->metrics_port);
  }
  return absl::OkStatus();
}

int SchedulerServer::port() const { return impl_->port; }

int SchedulerServer::metrics_port() const { return impl_->metrics_port; }

int SchedulerServer::http_port() const { return impl_->http_port; }

DrainReport SchedulerServer::Drain(absl::Duration timeout, absl::Duration grace) {
  const absl::Time start = absl::Now();
  DrainReport report;
  impl_->SetDraining();
  if (impl_->http_frontend) impl_->http_frontend->SetDraining();
  report.admitted = impl_->engine.StartDrain();
  PAGODA_LOG(kInfo, "scheduler",
             "drain started: %d requests queued or running get up to %s to finish; new requests "
             "are refused; workers stay attached",
             report.admitted, absl::FormatDuration(timeout));
  const absl::Time deadline = start + timeout;
  bool idle = false;
  while (!idle && absl::Now() < deadline && !impl_->cut_drain.load()) {
    idle = impl_->engine.WaitIdle(std::min(deadline, absl::Now() + kDrainPoll));
  }
  if (!idle) {
    const EngineStatus s = impl_->engine.Status();
    report.cut = std::min(s.running + s.waiting, report.admitted);
    const std::string why = absl::StrFormat(
        "the server shut down before the request finished (drain timeout of %s reached)",
        absl::FormatDuration(timeout));
    impl_->generation.AbortAll(why);
    if (impl_->http_frontend) impl_->http_frontend->AbortAll(why);
  }
  report.calls_done = impl_->generation.WaitNoActiveCalls(absl::Now() + grace);
  if (impl_->http_frontend) {
    report.calls_done =
        impl_->http_frontend->WaitNoActiveCalls(absl::Now() + grace) && report.calls_done;
  }
  report.refused = impl_->engine.refused_while_draining();
  PAGODA_LOG(kInfo, "scheduler",
             "drain finished in %.2fs: %d of %d requests completed, %d cut short with "
             "UNAVAILABLE, %d new requests refused%s",
             absl::ToDoubleSeconds(absl::Now() - start), report.admitted - report.cut,
             report.admitted, report.cut, report.refused,
             report.calls_done ? "" : "; some calls did not return in time");
  return report;
}

void SchedulerServer::CutDrainShort() { impl_->cut_drain.store(true); }

void SchedulerServer::Shutdown(absl::Duration grace) {
  if (impl_->http_server) impl_->http_server->Stop();
  if (!impl_->server) return;
  impl_->server->GetHealthCheckService()->Shutdown();
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void SchedulerServer::Wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace pagoda::scheduler
