#include "scheduler/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "scheduler/link/link_service.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/generation_service.h"

namespace pagoda::scheduler {

struct SchedulerServer::Impl {
  Impl(ServerOptions opts, ServedModel served)
      : options(std::move(opts)),
        model(std::move(served)),
        engine(options.scheduler,
               [start = absl::Now()] { return absl::ToDoubleSeconds(absl::Now() - start); }),
        generation(&engine, &model),
        link(&engine, LinkOptions{model.fingerprint}) {}

  ServerOptions options;
  ServedModel model;
  Engine engine;
  GenerationService generation;
  LinkService link;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

namespace {

ServerOptions WithModelLimits(ServerOptions options, const ServedModel& model) {
  options.scheduler.context_length = model.config.context_length;
  options.scheduler.eos_id = model.tokenizer.eos_id();
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

absl::Status SchedulerServer::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(impl_->options.listen, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->generation);
  builder.RegisterService(&impl_->link);
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    impl_->server.reset();
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: the address is invalid or the port is in use",
                        impl_->options.listen));
  }
  grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService();
  auto set_health = [health](size_t workers) {
    const bool serving = workers > 0;
    health->SetServingStatus(serving);
    health->SetServingStatus("pagoda.v1.Generation", serving);
  };
  set_health(0);
  impl_->engine.SetWorkersChangedCallback(set_health);
  PAGODA_LOG(kInfo, "scheduler", "serving %s (%s, fingerprint %s) on port %d", impl_->model.path,
             impl_->model.config.architecture, impl_->model.fingerprint, impl_->port);
  return absl::OkStatus();
}

int SchedulerServer::port() const { return impl_->port; }

void SchedulerServer::Shutdown(absl::Duration grace) {
  if (!impl_->server) return;
  impl_->server->GetHealthCheckService()->Shutdown();
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void SchedulerServer::Wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace pagoda::scheduler
