// LinkService: the scheduler's end of pagoda.worker.v1.WorkerLink/Attach.
//
// One handler thread per attached worker: it validates the Register message (the model
// fingerprint must equal the scheduler's), attaches the worker to the Engine, then reads
// results until the stream ends, and detaches the worker. Plans are written by the Engine
// through a StreamChannel; the channel's mutex keeps writes from outliving the handler.
//
// With a link token, an Attach without the right one ends UNAUTHENTICATED before anything is
// read. With a worker timeout, a watchdog cancels a link that has been silent (no result and
// no heartbeat) for that long: the read fails and the worker is detached as if its stream had
// broken, so a hung or partitioned worker loses its sequences to the others.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "pagoda/worker/v1/worker_link.grpc.pb.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

struct LinkOptions {
  std::string model_fingerprint;                         // workers must present the same
  std::string link_token;                                // empty: no authentication
  absl::Duration worker_timeout = absl::ZeroDuration();  // zero: no heartbeat watch
};

class LinkService final : public pagoda::worker::v1::WorkerLink::Service {
 public:
  LinkService(Engine* engine, LinkOptions options);

  grpc::Status Attach(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<pagoda::worker::v1::SchedulerMessage,
                                               pagoda::worker::v1::WorkerMessage>* stream) override;

 private:
  grpc::Status ValidateRegister(const pagoda::worker::v1::Register& reg) const;
  grpc::Status Authenticate(const grpc::ServerContext& context) const;

  Engine* engine_;
  const LinkOptions options_;
};

}  // namespace pagoda::scheduler
