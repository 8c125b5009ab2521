// Responder: the connection an OpenAI call answers on, as the call sees it (the connection's
// Asio strand and socket behind it; a fake in the tests).
//
// Threads: Post() is thread-safe (the engine's threads use it); everything else runs on the
// connection's strand, where posted tasks and the completion handlers run too.
#pragma once

#include <functional>
#include <string>

namespace pagoda::scheduler::http {

class Responder {
 public:
  virtual ~Responder() = default;
  // Runs `task` later on the strand, never inline.
  virtual void Post(std::function<void()> task) = 0;
  // Writes `bytes`; `done(ok)` runs on the strand once written (ok = false: the peer is gone).
  // One write at a time.
  virtual void Write(std::string bytes, std::function<void(bool)> done) = 0;
  // Until the answer is complete: `gone` runs on the strand if the client disconnects.
  virtual void WatchForDisconnect(std::function<void()> gone) = 0;
  // The answer is complete: reads the next request when `reuse`, else closes the connection.
  virtual void Complete(bool reuse) = 0;
};

}  // namespace pagoda::scheduler::http
