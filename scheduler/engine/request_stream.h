// RequestStream: the mailbox between the engine and one Generate handler.
//
// The engine pushes tokens and, last, the finish event; the handler thread waits for them.
// Wake() ends a wait with nothing new, so that the handler looks at its call again (the client
// cancelled, the server is aborting). Thread-safe; shared by std::shared_ptr so either side may
// go away first.
#pragma once

#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class RequestStream {
 public:
  struct Update {
    std::vector<int32_t> tokens;    // new tokens, in order
    std::optional<Event> finished;  // set once, after the last token
  };

  void PushToken(int32_t token);
  void PushFinished(Event event);
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
