// Runner: executes IterationPlans on a Backend and samples.
//
// Order within a plan: frees, page copies (copy on write), then the batch.
// State per live sequence: its block table (grown by each plan's new_pages), its sampling
// parameters (sent on first sight) and its last sampled token, which a feed_last_sampled step
// takes as input (the scheduler sent that plan before it saw the token: overlap). The scheduler
// owns the page ids; the runner only checks them. A plan that cannot be executed yields a result
// with `error` set, never a crash.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pagoda/worker/v1/worker_link.pb.h"
#include "worker/backend/backend.h"
#include "worker/sampling/sampler.h"

namespace pagoda::worker {

// What one Execute() took (for metrics; the runner itself keeps no statistics).
struct StepTiming {
  double step_seconds = 0;  // all of Execute: plan bookkeeping, forward pass, sampling
  double forward_seconds = 0;
  double sampling_seconds = 0;
  int32_t tokens = 0;  // input tokens in the batch
  bool ok = true;      // false when the plan could not be executed (the result has `error`)
};

class Runner {
 public:
  explicit Runner(std::unique_ptr<Backend> backend);

  // Called at the end of every Execute(), on the thread that called it. Set before the first.
  void SetStepObserver(std::function<void(const StepTiming&)> observer) {
    observer_ = std::move(observer);
  }

  pagoda::worker::v1::IterationResult Execute(const pagoda::worker::v1::IterationPlan& plan);
  // Forgets every sequence (after the link to the scheduler was re-established).
  void Reset() { seqs_.clear(); }

  size_t num_sequences() const { return seqs_.size(); }
  Backend& backend() { return *backend_; }

 private:
  struct SeqState {
    std::vector<int32_t> pages;  // block table
    SamplingParams sampling;
    int32_t last_sampled = -1;  // fed back by feed_last_sampled steps (overlap)
    int32_t fed_token = -1;     // storage the batch's token span points at
  };
  // Applies frees and page deltas and builds the batch; `samples` gets the sampling
  // parameters and index of each sampling step, in plan order.
  absl::Status Prepare(const pagoda::worker::v1::IterationPlan& plan, std::vector<SeqInput>* batch,
                       std::vector<SampleInput>* samples);

  // Validates and executes the plan's page copies.
  absl::Status CopyPages(const pagoda::worker::v1::IterationPlan& plan);

  std::unique_ptr<Backend> backend_;
  std::vector<PageCopy> copies_;  // scratch
  absl::flat_hash_map<uint64_t, SeqState> seqs_;
  std::vector<int32_t> tokens_;  // sampled tokens of the current plan, reused across plans
  std::function<void(const StepTiming&)> observer_;
};

}  // namespace pagoda::worker
