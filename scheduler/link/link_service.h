// LinkService: the scheduler's end of pagoda.worker.v1.WorkerLink/Attach, on gRPC's callback
// API: no thread per worker for the stream, and no blocking I/O anywhere.
//
// Each Attach is one reactor (a Link). It validates the Register message (the model fingerprint
// must equal the scheduler's; its swap space, num_swap_pages and swap_seconds_per_page, goes
// into WorkerInfo), takes a worker id from the Engine, queues the Accepted message,
// then attaches the worker: Accepted is first in the link's write queue, so it precedes every
// plan without any write happening under the engine's lock. Results are handed to the Engine
// from the read reaction, with the worker's timings (forward + sampling, swaps: StepTimes); plans
// come back through the Link's WorkerChannel side, which only queues and starts the next write when
// none is in flight (one write at a time, in order). A read that fails (the worker left, the stream
// broke or was cancelled) detaches the worker.
//
// With a link token, an Attach without the right one ends UNAUTHENTICATED before anything is
// read. With a worker timeout, a watchdog cancels a link that has been silent (no result and
// no heartbeat) for that long: the read fails and the worker is detached as if its stream had
// broken, so a hung or partitioned worker loses its sequences to the others.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "pagoda/worker/v1/worker_link.grpc.pb.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

struct LinkOptions {
  std::string model_fingerprint;                         // workers must present the same
  std::string link_token;                                // empty: no authentication
  absl::Duration worker_timeout = absl::ZeroDuration();  // zero: no heartbeat watch
  // Sent in every Accepted: the token bytes workers mask constrained samples with.
  std::shared_ptr<const pagoda::worker::v1::Vocabulary> vocabulary;
};

class LinkService final : public pagoda::worker::v1::WorkerLink::CallbackService {
 public:
  LinkService(Engine* engine, LinkOptions options);

  grpc::ServerBidiReactor<pagoda::worker::v1::WorkerMessage, pagoda::worker::v1::SchedulerMessage>*
  Attach(grpc::CallbackServerContext* context) override;

 private:
  class Link;

  grpc::Status ValidateRegister(const pagoda::worker::v1::Register& reg) const;
  grpc::Status Authenticate(const grpc::CallbackServerContext& context) const;

  Engine* engine_;
  const LinkOptions options_;
};

}  // namespace pagoda::scheduler
