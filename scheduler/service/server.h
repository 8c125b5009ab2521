// SchedulerServer: one gRPC server carrying the public API (pagoda.v1.Generation), the worker
// link (pagoda.worker.v1.WorkerLink), grpc.health.v1.Health and server reflection.
//
// Health is NOT_SERVING until a worker is attached. Start() fails with a clear status when the
// address cannot be bound (gRPC's SO_REUSEPORT is turned off so a port in use is an error).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/core/scheduler.h"
#include "scheduler/service/served_model.h"

namespace pagoda::scheduler {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  SchedulerOptions scheduler;  // context_length and eos_id are filled from the model
};

class SchedulerServer {
 public:
  SchedulerServer(ServerOptions options, ServedModel model);
  ~SchedulerServer();

  absl::Status Start();
  int port() const;  // the bound port (useful with port 0)
  // Stops accepting calls; in-flight calls are cancelled after `grace`.
  void Shutdown(absl::Duration grace);
  void Wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::scheduler
