// LinkService: the scheduler's end of pagoda.worker.v1.WorkerLink/Attach.
//
// One handler thread per attached worker: it validates the Register message (the model
// fingerprint must equal the scheduler's), attaches the worker to the Engine, then reads
// results until the stream ends, and detaches the worker. Plans are written by the Engine
// through a StreamChannel; the channel's mutex keeps writes from outliving the handler.
#pragma once

#include <string>

#include "pagoda/worker/v1/worker_link.grpc.pb.h"
#include "scheduler/service/engine.h"

namespace pagoda::scheduler {

struct LinkOptions {
  std::string model_fingerprint;  // workers must present the same
};

class LinkService final : public pagoda::worker::v1::WorkerLink::Service {
 public:
  LinkService(Engine* engine, LinkOptions options);

  grpc::Status Attach(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<pagoda::worker::v1::SchedulerMessage,
                                               pagoda::worker::v1::WorkerMessage>* stream) override;

 private:
  grpc::Status ValidateRegister(const pagoda::worker::v1::Register& reg) const;

  Engine* engine_;
  const LinkOptions options_;
};

}  // namespace pagoda::scheduler
