// Runner: executes IterationPlans on a Backend and samples.
//
// Order within a plan: frees, page copies (copy on write), then the batch.
// State per live sequence: its block table (grown by each plan's new_pages), its sampling
// parameters and logit_bias (sent on first sight), its last sampled token, which a
// feed_last_sampled step takes as input (the scheduler sent that plan before it saw the token:
// overlap), and for sequences with penalties its TokenHistory (worker/sampling/token_history.h),
// seeded from the first sight's `history` and fed by every later step's input tokens. The scheduler
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
#include "worker/sampling/token_history.h"

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
    std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by token id
    TokenHistory history;                               // tracked only with penalties
    int32_t last_sampled = -1;  // fed back by feed_last_sampled steps (overlap)
    int32_t fed_token = -1;     // storage the batch's token span points at
  };
  // Applies frees and page deltas and builds the batch; `samples` gets the sampling
  // parameters and index of each sampling step, in plan order.
  absl::Status Prepare(const pagoda::worker::v1::IterationPlan& plan, std::vector<SeqInput>* batch,
                       std::vector<SampleInput>* samples);

  // Creates the state of a sequence seen for the first time (or again after a free).
  absl::Status FirstSight(const pagoda::worker::v1::SequenceStep& step);
  // Records the step's input tokens (fed_token when feed_last_sampled) in s's history, when
  // it has penalties.
  absl::Status RecordHistory(const pagoda::worker::v1::SequenceStep& step, SeqState& s);
  // Appends the adjustments of sequence `s`'s next sample to adjustments_; false when none.
  bool BuildAdjustments(const SeqState& s);

  // Validates and executes the plan's page copies.
  absl::Status CopyPages(const pagoda::worker::v1::IterationPlan& plan);

  std::unique_ptr<Backend> backend_;
  std::vector<PageCopy> copies_;  // scratch
  absl::flat_hash_map<uint64_t, SeqState> seqs_;
  std::vector<int32_t> tokens_;  // sampled tokens of the current plan, reused across plans
  std::vector<SampledLogprobs> logprobs_;     // their logprobs, when some step asked
  std::vector<LogitAdjustment> adjustments_;  // every sample's adjustments, back to back
  std::function<void(const StepTiming&)> observer_;
};

}  // namespace pagoda::worker
