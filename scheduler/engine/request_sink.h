// RequestSink: where the engine delivers one request's tokens and, last, its end.
//
// Contract: OnToken and OnFinished run under the engine's lock, in the order the core emitted
// the events, so they must be quick (append to a buffer), never block, never do I/O and never
// call into the engine. Each returns true when the sink needs a Flush() to deliver what it now
// holds (typically: it held nothing before); the engine then calls Flush() once after releasing
// its lock, on the same thread, after it has handed out the plans built in the same pass.
// Flush() may do I/O (start a gRPC write) and call into the engine (Finish on a stop string).
// Sinks are shared by std::shared_ptr: the engine drops its reference when it delivers the end.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // `logprob`: the token's logprob and alternatives when the request asked for them, else null
  // (valid for the call only).
  virtual bool OnToken(int32_t token, const TokenLogprob* logprob) = 0;
  virtual bool OnFinished(Event event) = 0;
  virtual void Flush() = 0;
};

// A request with n completions served by one call (the gRPC reactor, the HTTP call): completion
// `index`'s sink forwards to the call's OnToken(index, ...), OnFinished(index, ...) and Flush(),
// and keeps the call alive until the engine drops the sink (after that completion's end). The
// call befriends CompletionSink<Call> when those methods are private.
template <class Call>
class CompletionSink final : public RequestSink {
 public:
  CompletionSink(std::shared_ptr<Call> call, int index) : call_(std::move(call)), index_(index) {}
  bool OnToken(int32_t token, const TokenLogprob* logprob) override {
    return call_->OnToken(index_, token, logprob);
  }
  bool OnFinished(Event event) override { return call_->OnFinished(index_, std::move(event)); }
  void Flush() override { call_->Flush(); }

 private:
  const std::shared_ptr<Call> call_;
  const int index_;
};

}  // namespace pagoda::scheduler
