// Worker health: a grpc.health.v1 endpoint of its own (--health-listen), and the watcher that
// tells it whether the worker is attached to the scheduler.
//
// Services, by name:
//  * "" (readiness): SERVING while the worker is attached to the scheduler, which happens only
//    after its model is loaded; NOT_SERVING while it (re)connects and once it stops;
//  * "liveness": SERVING from Start() until Shutdown(), attached or not, so that a scheduler
//    restart does not get every worker restarted (and its weights reloaded).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class Server;
}

namespace pagoda::worker {

class HealthServer {
 public:
  HealthServer();
  ~HealthServer();

  // Serves on `address` (HOST:PORT; port 0 picks a free one); returns the bound port.
  absl::StatusOr<int> Start(const std::string& address);
  // Readiness (""); before Start() it only records the value.
  void SetReady(bool ready);
  // Everything NOT_SERVING, then stops the server without waiting for open health watches.
  void Shutdown();

 private:
  absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
};

// Watches this process's WorkerLink/Attach calls and reports each change of "attached": true
// when the scheduler's Accepted message arrives, false when the call's stream ends.
//
// Why an interceptor: LinkClient has no attach callback, and its calls are the only client
// calls a worker makes, so a process-wide client interceptor observes exactly its protocol.
// Install() must run once, before any gRPC call; the watcher must outlive every gRPC call.
class AttachWatcher {
 public:
  explicit AttachWatcher(std::function<void(bool attached)> on_change);
  ~AttachWatcher();

  void Install();
  // Called by the interceptor on the link's thread.
  void Set(bool attached);

 private:
  class Factory;

  const std::function<void(bool)> on_change_;
  std::unique_ptr<Factory> factory_;
  absl::Mutex mu_;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pagoda::worker
