// Runner: executes IterationPlans on a Backend and samples.
//
// Order within a plan: swap_out (pages -> host swap slots), page copies (copy on write), frees,
// swap_in (slots -> pages), then the batch. Every swap is checked against the arena and the
// swap space before the first one runs; their time is the result's swap_seconds.
// State per live sequence: its block table (grown by each plan's new_pages), its sampling
// parameters and logit_bias (sent on first sight), its last sampled token, which a
// feed_last_sampled step takes as input (the scheduler sent that plan before it saw the token:
// overlap), and for sequences with penalties its TokenHistory (worker/sampling/token_history.h),
// seeded from the first sight's `history` and fed by every later step's input tokens; for
// constrained sequences (SamplingParams.constraint) a grammar::TokenMatcher fed the same way
// with the generated tokens (positions >= prompt_tokens), whose mask of allowed tokens goes with
// each of the sequence's samples. A sample's matcher is fed its new tokens and its mask filled
// by the MaskFiller (the runner's thread and helper threads, a row at a time): during the
// forward pass when the backend overlaps them (Backend::OverlapsMasks), else before it. Either
// way a mask is a function of its matcher alone, so the sampled tokens do not depend on the
// threads. Grammars are compiled once per distinct text and kept, with their mask caches, until
// kMaxGrammars are cached (then the cache starts afresh). The scheduler owns the page ids; the
// runner only checks them. A plan that cannot be executed yields a result with `error` set,
// never a crash.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/grammar/token_matcher.h"
#include "pagoda/worker/v1/worker_link.pb.h"
#include "worker/backend/backend.h"
#include "worker/runner/mask_filler.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/token_history.h"

namespace pagoda::worker {

// What one Execute() took (for metrics; the runner itself keeps no statistics).
struct StepTiming {
  double step_seconds = 0;        // all of Execute: plan bookkeeping, forward pass, sampling
  double forward_seconds = 0;     // the backend's ForwardSample: forward pass and sampling
  double sampling_seconds = 0;    // writing the sampled tokens into the result
  int32_t tokens = 0;             // input tokens in the batch
  double swap_seconds = 0;        // swap_out and swap_in copies (inside step_seconds)
  int32_t pages_swapped_out = 0;  // copies done, also when the plan then failed
  int32_t pages_swapped_in = 0;
  bool ok = true;  // false when the plan could not be executed (the result has `error`)
  // The forward pass and sampling by part, from backends that time them (has_parts).
  bool has_parts = false;
  ForwardPartTotals parts;
};

class Runner {
 public:
  // Threads that fill constrained samples' masks besides the runner's own (MaskFiller).
  static int DefaultMaskThreads();
  explicit Runner(std::unique_ptr<Backend> backend, int mask_threads = DefaultMaskThreads());

  // Called at the end of every Execute(), on the thread that called it. Set before the first.
  void SetStepObserver(std::function<void(const StepTiming&)> observer) {
    observer_ = std::move(observer);
  }

  pagoda::worker::v1::IterationResult Execute(const pagoda::worker::v1::IterationPlan& plan);
  // Measures the time to copy one page out to the swap space and back in (0 without swap space)
  // on scratch: call before the first plan. It copies a few pages [0, n) out to slots [0, n)
  // and back, which leaves the pages as they were and overwrites the slots.
  absl::Status MeasureSwap();
  double swap_seconds_per_page() const { return swap_seconds_per_page_; }  // MeasureSwap's
  // Forgets every sequence (after the link to the scheduler was re-established).
  void Reset() { seqs_.clear(); }
  // The vocabulary constrained samples are masked with (the scheduler's Accepted message). A
  // constrained sequence arriving before one was set fails its plan.
  void SetVocabulary(const pagoda::worker::v1::Vocabulary& vocabulary);

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
    // Constrained sequences only: the matcher and the next position it takes.
    std::optional<grammar::TokenMatcher> matcher;
    std::vector<int32_t> end_tokens;
    int32_t prompt_tokens = 0;
    int32_t matched_to = 0;
    // Generated tokens (position, id) not yet fed to the matcher: FeedAndFill feeds them, on a
    // mask filler's thread, before it fills the sequence's next mask.
    std::vector<std::pair<int32_t, int32_t>> unmatched;
    bool constraint_broken = false;  // a token it refused arrived: only end tokens remain
  };
  // A constrained sample of the current plan: its sequence and its row of masks_.
  struct MaskRow {
    uint64_t seq_id;
    SeqState* seq;
    std::span<uint32_t> mask;
  };
  static constexpr size_t kMaxGrammars = 256;
  // Applies frees and page deltas and builds the batch; `samples` gets the sampling
  // parameters and index of each sampling step, in plan order, and mask_rows_ the constrained
  // samples, whose masks are still to be filled.
  absl::Status Prepare(const pagoda::worker::v1::IterationPlan& plan, std::vector<SeqInput>* batch,
                       std::vector<SampleInput>* samples);

  // Creates the state of a sequence seen for the first time (or again after a free).
  absl::Status FirstSight(const pagoda::worker::v1::SequenceStep& step);
  // Records the step's input tokens (fed_token when feed_last_sampled) in s's history, when
  // it has penalties.
  absl::Status RecordHistory(const pagoda::worker::v1::SequenceStep& step, SeqState& s);
  // Queues for a constrained sequence's matcher the tokens at positions [start, start + size)
  // that are generated ones it has not seen.
  static void Match(SeqState& s, int32_t start, std::span<const int32_t> tokens);
  // Feeds the row's matcher its queued tokens, then writes its mask (the end tokens alone once
  // the constraint is broken). Runs on the mask filler's threads, one row per call.
  static void FeedAndFill(const MaskRow& row);
  // The compiled grammar of `gbnf` over vocabulary_ (its mask cache included), from the cache
  // or compiled now.
  absl::StatusOr<std::shared_ptr<grammar::CompiledConstraint>> ConstraintFor(
      const std::string& gbnf);
  // Appends the adjustments of sequence `s`'s next sample to adjustments_; false when none.
  bool BuildAdjustments(const SeqState& s);

  // Swaps, frees and page copies, in the plan's order, before its steps.
  absl::Status ApplyEdits(const pagoda::worker::v1::IterationPlan& plan);
  // Checks every swap of the plan against the arena and the swap space.
  absl::Status ValidateSwaps(const pagoda::worker::v1::IterationPlan& plan) const;
  // Executes one swap list (out: pages -> slots), counted and timed in swapped_.
  absl::Status Swap(const google::protobuf::RepeatedPtrField<pagoda::worker::v1::SwapCopy>& list,
                    bool out);
  // Validates and executes the plan's page copies.
  absl::Status CopyPages(const pagoda::worker::v1::IterationPlan& plan);
  // Calls the observer, if any, with `timing` and the plan's swaps.
  void Observe(StepTiming timing) const;

  std::unique_ptr<Backend> backend_;
  std::vector<PageCopy> copies_;  // scratch
  std::vector<SwapCopy> swaps_;   // scratch
  struct SwapStats {
    double seconds = 0;
    int32_t out = 0, in = 0;  // pages
  } swapped_;                 // of the current plan
  double swap_seconds_per_page_ = 0;
  absl::flat_hash_map<uint64_t, SeqState> seqs_;
  std::vector<int32_t> tokens_;  // sampled tokens of the current plan, reused across plans
  std::vector<SampledLogprobs> logprobs_;     // their logprobs, when some step asked
  std::vector<LogitAdjustment> adjustments_;  // every sample's adjustments, back to back
  std::vector<uint32_t> masks_;               // constrained samples' masks, back to back
  std::vector<MaskRow> mask_rows_;            // the current plan's constrained samples
  MaskFiller mask_filler_;  // runs FeedAndFill for mask_rows_ during (or before) the forward pass
  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  absl::flat_hash_map<std::string, std::shared_ptr<grammar::CompiledConstraint>> constraints_;
  std::function<void(const StepTiming&)> observer_;
};

}  // namespace pagoda::worker
