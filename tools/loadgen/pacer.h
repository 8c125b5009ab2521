// Pacer: decides when the next request of a run may start (sans-IO: time comes in as an
// argument, so tests replay it without a server or a clock).
//
// Load shapes:
//  * closed loop: `concurrency` streams; a stream sends its next request as soon as its previous
//    one finishes, so exactly `concurrency` requests are in flight until the tail.
//  * static batch: waves of `concurrency` requests; the next wave starts only when every request
//    of the current wave has finished (everyone waits for the slowest), the way a server without
//    continuous batching would run a fixed batch. With `pad_waves` (the runner's part) every
//    request of a wave also generates the wave's longest output: a fixed-shape batch computes its
//    finished rows until the whole batch ends, and those padding tokens are not counted.
//  * Poisson: open loop; arrivals at exponential gaps of mean 1 / request_rate from t = 0,
//    independent of how fast the server answers (max_in_flight > 0 caps requests in flight; a
//    late arrival then starts when a slot frees).
//  * burst: open loop; every request arrives at t = 0 (capped by max_in_flight too).
//
// A run ends after `num_requests` starts or, when duration_s > 0, at the first decision at or
// after duration_s (then num_requests is ignored). The caller waits for requests in flight.
#pragma once

#include <cstdint>
#include <string>

#include "tools/loadgen/workload.h"

namespace pagoda::loadgen {

enum class LoadShape { kClosed, kStaticBatch, kPoisson, kBurst };

std::string LoadShapeName(LoadShape shape);

struct PacerOptions {
  LoadShape shape = LoadShape::kClosed;
  int concurrency = 1;      // kClosed and kStaticBatch: streams / wave size (>= 1)
  int max_in_flight = 0;    // kPoisson and kBurst: cap on requests in flight; 0 = none
  double request_rate = 0;  // kPoisson: mean arrivals per second (> 0)
  int num_requests = 100;   // starts in the run (when duration_s == 0)
  double duration_s = 0;    // > 0: start requests until this many seconds have passed
  uint64_t seed = 0;        // kPoisson: the arrival gaps
  bool pad_waves = true;    // kStaticBatch: finished rows keep computing until the wave ends
};

struct PacerDecision {
  enum Kind {
    kStart,              // start one request now, then call OnStarted
    kWaitForCompletion,  // ask again when a request in flight finishes
    kWaitUntil,          // ask again at `until_s` (or when a request finishes)
    kDone,               // start nothing more
  };
  Kind kind = kDone;
  double until_s = 0;
};

class Pacer {
 public:
  explicit Pacer(const PacerOptions& options);

  // What to do at `now_s` (seconds since the run began) with `in_flight` requests outstanding.
  PacerDecision Next(double now_s, int in_flight);
  // The caller started a request (after a kStart decision).
  void OnStarted();

  int started() const { return started_; }
  // Waves opened so far (kStaticBatch).
  int waves() const { return waves_; }

 private:
  bool Exhausted(double now_s) const;
  PacerDecision NextClosed(int in_flight) const;
  PacerDecision NextStatic(int in_flight);
  PacerDecision NextOpen(double now_s, int in_flight) const;

  PacerOptions options_;
  Rng rng_;
  int started_ = 0;
  int waves_ = 0;
  int wave_left_ = 0;          // kStaticBatch: starts left in the current wave
  double next_arrival_s_ = 0;  // kPoisson and kBurst
};

}  // namespace pagoda::loadgen
