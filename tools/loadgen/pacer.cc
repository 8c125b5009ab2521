#include "tools/loadgen/pacer.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda::loadgen {

std::string LoadShapeName(LoadShape shape) {
  switch (shape) {
    case LoadShape::kClosed:
      return "closed";
    case LoadShape::kStaticBatch:
      return "static-batch";
    case LoadShape::kPoisson:
      return "poisson";
    case LoadShape::kBurst:
      return "burst";
  }
  return "?";
}

Pacer::Pacer(const PacerOptions& options)
    : options_(options), rng_(MixSeed(options.seed, 0x417272697661ULL)) {}

bool Pacer::Exhausted(double now_s) const {
  if (options_.duration_s > 0) return now_s >= options_.duration_s;
  return started_ >= options_.num_requests;
}

PacerDecision Pacer::Next(double now_s, int in_flight) {
  if (Exhausted(now_s)) return {PacerDecision::kDone};
  switch (options_.shape) {
    case LoadShape::kClosed:
      return NextClosed(in_flight);
    case LoadShape::kStaticBatch:
      return NextStatic(in_flight);
    case LoadShape::kPoisson:
    case LoadShape::kBurst:
      return NextOpen(now_s, in_flight);
  }
  return {PacerDecision::kDone};
}

PacerDecision Pacer::NextClosed(int in_flight) const {
  if (in_flight < options_.concurrency) return {PacerDecision::kStart};
  return {PacerDecision::kWaitForCompletion};
}

PacerDecision Pacer::NextStatic(int in_flight) {
  if (wave_left_ > 0) return {PacerDecision::kStart};
  if (in_flight > 0) return {PacerDecision::kWaitForCompletion};
  // The whole previous wave has finished: open the next one.
  ++waves_;
  wave_left_ = options_.concurrency;
  return {PacerDecision::kStart};
}

PacerDecision Pacer::NextOpen(double now_s, int in_flight) const {
  if (options_.duration_s > 0 && next_arrival_s_ >= options_.duration_s) {
    return {PacerDecision::kDone};
  }
  if (now_s < next_arrival_s_) return {PacerDecision::kWaitUntil, next_arrival_s_};
  if (options_.max_in_flight > 0 && in_flight >= options_.max_in_flight) {
    return {PacerDecision::kWaitForCompletion};
  }
  return {PacerDecision::kStart};
}

void Pacer::OnStarted() {
  ++started_;
  if (options_.shape == LoadShape::kStaticBatch) {
    if (wave_left_ <= 0) {
      std::fprintf(stderr, "pagoda-bench: OnStarted without a kStart decision (wave is full)\n");
      std::abort();
    }
    --wave_left_;
  }
  // Arrival times are a fixed schedule: a late start does not push later arrivals back.
  if (options_.shape == LoadShape::kPoisson) {
    next_arrival_s_ += Exponential(rng_, 1.0 / options_.request_rate);
  }
}

}  // namespace pagoda::loadgen
