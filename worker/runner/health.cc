#include "worker/runner/health.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/client_interceptor.h>

#include <string_view>

#include "absl/strings/str_format.h"
#include "pagoda/worker/v1/worker_link.pb.h"

namespace pagoda::worker {
namespace {

namespace wv1 = pagoda::worker::v1;
using grpc::experimental::InterceptionHookPoints;

constexpr char kLivenessService[] = "liveness";
constexpr std::string_view kAttachMethod = "/pagoda.worker.v1.WorkerLink/Attach";

// One per Attach call. The scheduler's first message on a link is Accepted (or the call ends
// with a refusal); a failed read or the final status means the link is gone.
class AttachInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit AttachInterceptor(AttachWatcher* watcher) : watcher_(watcher) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Null when the read failed: the stream is over.
      const auto* msg = static_cast<const wv1::SchedulerMessage*>(methods->GetRecvMessage());
      if (msg == nullptr) {
        watcher_->Set(false);
      } else if (msg->has_accepted()) {
        watcher_->Set(true);
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      watcher_->Set(false);
    }
    methods->Proceed();
  }

 private:
  AttachWatcher* watcher_;
};

}  // namespace

HealthServer::HealthServer() = default;

HealthServer::~HealthServer() { Shutdown(); }

absl::StatusOr<int> HealthServer::Start(const std::string& address) {
  grpc::EnableDefaultHealthCheckService(true);
  // gRPC refuses a server whose only service is the default health service (no polled
  // completion queue); reflection is a real synchronous service, and lets grpcurl list this one.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot serve health on %s: the address is invalid or the port is in use", address));
  }
  absl::MutexLock lock(&mu_);
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  // Named services only: the bool-only overload would set "liveness" too.
  health->SetServingStatus(kLivenessService, true);
  health->SetServingStatus("", ready_);
  server_ = std::move(server);
  return port;
}

void HealthServer::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  ready_ = ready;
  if (server_) server_->GetHealthCheckService()->SetServingStatus("", ready);
}

void HealthServer::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (!server_) return;
  server_->GetHealthCheckService()->Shutdown();
  // Health watches never end on their own: cancel them now rather than wait.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

class AttachWatcher::Factory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit Factory(AttachWatcher* watcher) : watcher_(watcher) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    if (info->method() == nullptr || kAttachMethod != info->method()) return nullptr;
    return new AttachInterceptor(watcher_);
  }

 private:
  AttachWatcher* watcher_;
};

AttachWatcher::AttachWatcher(std::function<void(bool)> on_change)
    : on_change_(std::move(on_change)), factory_(std::make_unique<Factory>(this)) {}

AttachWatcher::~AttachWatcher() = default;

void AttachWatcher::Install() {
  grpc::experimental::RegisterGlobalClientInterceptorFactory(factory_.get());
}

void AttachWatcher::Set(bool attached) {
  {
    absl::MutexLock lock(&mu_);
    if (attached_ == attached) return;
    attached_ = attached;
  }
  on_change_(attached);
}

}  // namespace pagoda::worker
