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

}  // namespace pagoda::scheduler
