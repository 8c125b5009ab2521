// RequestStream: a RequestSink that a thread waits on (tests and in-process callers).
//
// The engine pushes tokens and, last, the finish event; Wait() returns what arrived. Wake()
// ends a wait with nothing new. Thread-safe; shared by std::shared_ptr so either side may go
// away first. The gRPC service does not use it: its calls are their own sinks.
#pragma once

#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/core/types.h"
#include "scheduler/engine/request_sink.h"

namespace pagoda::scheduler {

class RequestStream final : public RequestSink {
 public:
  struct Update {
    std::vector<int32_t> tokens;         // new tokens, in order
    std::vector<TokenLogprob> logprobs;  // theirs, when the request asked for logprobs
    std::optional<Event> finished;       // set once, after the last token
  };

  bool OnToken(int32_t token, const TokenLogprob* logprob) override;
  bool OnFinished(Event event) override;
  void Flush() override {}  // waiters are woken by the pushes themselves
  void Wake();
  // Waits up to `timeout` for news or a Wake(); returns what arrived since the last call (maybe
  // nothing).
  Update Wait(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  Update pending_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pagoda::scheduler
