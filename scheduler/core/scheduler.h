// Scheduler: continuous (iteration-level) batching over the attached workers.
//
// Sans-IO and single-threaded: no gRPC, threads, clock or randomness. The service feeds it
// requests, cancellations, worker attach/detach and iteration results, passing `now` (seconds)
// as an argument, and drains Events after every call.
//
// Each iteration a running sequence takes its next input tokens: one (a decode) when only the
// last token is missing, otherwise a prefill chunk; it samples when its input reaches the end.
// Plans are built decodes first, then running prefills, then admissions, within the token
// budget, the running cap and the per-sequence chunk cap.
//
// KV: the KvCacheManager owns every page, block table and the prefix cache; the scheduler asks
// it for pages and never edits a table. On admission a sequence starts after its longest cached
// run of full pages (prompt + generated tokens, so a resumed sequence re-hits its own pages);
// pages are then taken lazily as positions need them, and the manager evicts unreferenced cached
// pages (LRU) before it ever says no. Only then does the scheduler preempt a victim (lowest
// class, then latest arrival): its pages are released (the computed full ones stay cached) and
// it goes back to the head of its class, keeping its tokens; on resume it recomputes what is no
// longer cached. A higher-class request that cannot otherwise be admitted preempts lower-class
// running sequences the same way. Full pages join the cache when a result confirms their KV.
//
// Placement (several workers): the queue head goes to the best worker, ranked in order by:
//  1. fits now: a free running slot and room for its uncached tokens in free + parked pages;
//  2. the lowest cost = uncached tokens (what it would compute there) + the worker's backlog
//     (tokens its running sequences still have to compute) + kDecodeCostTokens per running
//     sequence;
//  3. the most free KV (tokens in free + parked pages), then the lowest worker id.
// Workers the whole request could never fit on are skipped. Cached tokens lower the cost of the
// workers holding them, while each admission raises its worker's backlog: requests sharing a
// prefix gather where it is cached until that worker's queue outweighs recomputing the prefix
// elsewhere, so they do not all pile onto one worker. Other workers leave the head queued.
// Burst: with at least one waiting request per worker, ranking alone would admit one request
// per plan (each admission raises its worker's cost). So a worker under its fair share of
// everything running and waiting also takes the head when the whole request fits its available
// pages beyond its hit (no preemption) and no worker the request fits on holds more of its
// prefix: burst sharing never takes a request away from the cache holding it.
//
// n > 1: completion 0 is admitted as usual; completions 1..n-1 wait outside the queue until it
// has computed the prompt, then fork: whole prompt pages are shared (ref counts), the partial
// last page is copied into a page of their own (a PageCopy in their first plan: copy on write),
// and each computes the last prompt token itself to sample its first token with its own seed.
// A completion that cannot fork (no slot or page; the parent finished first) queues like any
// request, recomputing what the prefix cache does not hold.
//
// Overlap: up to `max_plans_in_flight` plans per worker. A decode whose input is the token
// sampled by a plan still in flight says feed_last_sampled; stop checks then lag one plan.
//
// Invariants (CheckInvariants, run after every step by the randomized tests): the
// KvCacheManager's (see kv_cache_manager.h), and
//  * a running sequence's table covers exactly its scheduled positions;
//  * waiting + running + waiting to fork == live sequences; a waiting sequence has no table;
//  * when nothing is queued or running, every page is free or cached.
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/core/block_pool.h"
#include "scheduler/core/kv_cache_manager.h"
#include "scheduler/core/request_queue.h"
#include "scheduler/core/sequence.h"
#include "scheduler/core/types.h"
#include "scheduler/core/worker_state.h"

namespace pagoda::scheduler {

// Order of admission within a priority class (see RequestQueue).
enum class Fairness { kNone, kVtc };
// How a preempted sequence gives its KV back (see Preemption above).
enum class PreemptionMode { kAuto, kRecompute, kSwap };
const char* PreemptionModeName(PreemptionMode mode);

// Payload of the RESOURCE_EXHAUSTED statuses of predicted-wait admission: whole seconds (ASCII
// digits, >= 1) after which the same request would likely be admitted.
inline constexpr char kRetryAfterPayload[] = "pagoda.dev/retry-after-s";

// Prefill tokens per sequence per iteration for a worker that states no preference.
inline constexpr int32_t kDefaultPrefillChunk = 512;

struct SchedulerOptions {
  // Input tokens per iteration per worker, at most the worker's own; 0: the worker's.
  int32_t max_batch_tokens = 0;
  int32_t max_running = 256;  // sequences running per worker
  // Prefill tokens per sequence per iteration; 0: the worker's preference (the CUDA worker's
  // whole budget), else kDefaultPrefillChunk.
  int32_t max_prefill_chunk = 0;
  int32_t context_length = 0;                  // the model's; prompt + max_tokens must fit
  int32_t eos_id = -1;                         // the model's end-of-sequence token
  int32_t max_queued_requests = 4096;          // beyond: RESOURCE_EXHAUSTED
  int64_t max_queued_prompt_tokens = 1 << 22;  // beyond: RESOURCE_EXHAUSTED
  double aging_interval = 10.0;  // seconds of waiting that raise a request one class; <= 0 off
  int32_t max_preemptions_in_row = 3;  // then a sequence is not a victim until it generates
  int32_t max_plans_in_flight = 2;     // 1 = no overlap
  bool enable_prefix_caching = true;   // reuse the KV of full pages across requests
  // More tokens that end a generation like eos_id (finish reason kEos): the model's end-of-turn
  // and end-of-message tokens (Llama 3's <|eot_id|>, <|eom_id|>; Qwen's <|endoftext|>).
  std::vector<int32_t> more_eos_ids;
  // Fair share between tenants: kVtc admits, within a class, the backlogged tenant with the
  // lowest virtual counter first; kNone admits by arrival.
  Fairness fairness = Fairness::kVtc;
  absl::flat_hash_map<std::string, double> tenant_weights;  // > 0; absent tenants weigh 1
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  // > 0: AddRequest refuses (RESOURCE_EXHAUSTED, kRetryAfterPayload) a request whose predicted
  // time to first token is longer, or longer than its deadline is away.
  double max_predicted_wait = 0;
};

// A tenant's account (fair share and metrics).
struct TenantStats {
  std::string name;
  double weight = 1;
  double virtual_counter = 0;  // weighted service (see RequestQueue)
  int64_t served_tokens = 0;   // uncached prompt tokens + output tokens, unweighted
  int32_t queued = 0;          // requests waiting
  int32_t running = 0;         // sequences running
};

// Fair share: the service a tenant is charged (RequestQueue::Charge), per uncached prompt token
// at its request's first admission and per output token as it is sampled. Output tokens cost
// more, as in the VTC paper: each takes a step of its own.
inline constexpr double kPromptTokenCost = 1;
inline constexpr double kOutputTokenCost = 2;

// Placement weighs a running sequence as this many prompt tokens still to compute.
inline constexpr int64_t kDecodeCostTokens = 16;

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);
  ~Scheduler();

  // Queues a request. INVALID_ARGUMENT when it can never run (empty prompt, prompt +
  // max_tokens beyond the context, more KV than any attached worker has); RESOURCE_EXHAUSTED
  // when the queue limits are reached.
  absl::Status AddRequest(NewRequest request, double now);
  // Ends a request wherever it is, freeing its pages; emits kFinished with `reason`
  // (kCancelled, kStopString, kDeadline, ...). Unknown or finished ids are ignored.
  void Finish(RequestId id, FinishReason reason, const std::string& message, double now);

  void AddWorker(WorkerId id, const WorkerInfo& info);
  // The input tokens a plan for worker `id` carries at most, and the most prefill tokens of one
  // sequence in it (the options where set, else what the worker registered); {0, 0} if unknown.
  std::pair<int32_t, int32_t> PlanLimits(WorkerId id) const;
  // Forgets a worker; its sequences go back to the head of their classes and are recomputed.
  void RemoveWorker(WorkerId id);

  // The next plan for `worker`, or nullopt when it has nothing to do or enough plans in
  // flight. Also drops requests whose deadline has passed.
  std::optional<Plan> Schedule(WorkerId worker, double now);
  // Applies the result of the worker's oldest plan in flight.
  // `times` feeds the step-time model behind predicted waits and preemption costs.
  absl::Status OnResult(WorkerId worker, uint64_t iteration,
                        const std::vector<SampledToken>& sampled, double now,
                        const StepTimes& times = {});
  // Predicted seconds from `now` until the first token of `request` if it were queued now.
  double PredictFirstToken(const NewRequest& request, double now);
  // The worker could not execute its oldest plan in flight: its sequences fail.
  void OnPlanFailed(WorkerId worker, const std::string& error, double now);

  std::vector<Event> TakeEvents();

  // Introspection.
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const;
  size_t num_preempted() const;
  size_t num_workers() const { return workers_.size(); }
  int64_t total_preemptions() const { return total_preemptions_; }
  // Preemptions carried out as kRecompute or kSwap.
  int64_t preemptions(PreemptionMode mode) const;
  int64_t swapped_out_pages() const { return swapped_out_pages_; }
  int64_t swapped_in_pages() const { return swapped_in_pages_; }
  // Preemptions made to give a tenant its fair share of the running slots.
  int64_t fair_share_preemptions() const { return fair_share_preemptions_; }
  std::vector<TenantStats> tenant_stats() const;
  // Preemptions past max_preemptions_in_row, made only to break a stall (see Schedule).
  int64_t forced_preemptions() const { return forced_preemptions_; }
  // The most times one sequence was preempted in a row, over the scheduler's life.
  int32_t max_preempted_in_row() const { return max_preempted_in_row_; }
  bool HasWork() const { return !seqs_.empty(); }
  const BlockPool* pool(WorkerId worker) const { return kv_.pool(worker); }
  // Page accounting of an attached worker (free + cached-unreferenced + held).
  KvUsage kv_usage(WorkerId worker) const { return kv_.usage(worker); }
  const KvCacheManager& kv() const { return kv_; }
  std::optional<SeqState> state(RequestId id) const;
  // Checks every invariant; returns a description of the first violation, or OK.
  absl::Status CheckInvariants() const;

 private:
  struct Budget {
    int32_t tokens;  // input tokens the plan being built may still take
  };

  WorkerState* FindWorker(WorkerId id);
  Sequence* FindSeq(RequestId id);
  void ExpireDeadlines(double now);
  void ScheduleRunning(WorkerState& w, Plan& plan, Budget& budget, bool decodes);
  void AdmitWaiting(WorkerState& w, Plan& plan, Budget& budget, double now);
  bool IsPlacedOn(const WorkerState& w, Sequence& s);
  bool HasRoomToAdmit(const WorkerState& w, Sequence& s, const Budget& budget);
  // Placement key of `s` on `w` (greater is better; see Placement above).
  std::tuple<bool, int64_t, int64_t, int64_t> PlacementKey(const WorkerState& w, Sequence& s);
  // Burst sharing (see Placement above): `w` may take `s` without being its best worker.
  bool HasBurstShare(const WorkerState& w, Sequence& s);
  bool AddStep(WorkerState& w, Sequence& s, Plan& plan, Budget& budget, bool may_preempt);
  // Pages for the next `chunk` positions of `s`: by eviction, by preempting a lower class, by
  // shrinking a prefill chunk to the pages available, then by preempting within the class.
  // False when `s` gets no step (it may have been preempted itself).
  bool EnsurePages(WorkerState& w, Sequence& s, int32_t& chunk, bool may_preempt);
  Sequence* PickVictim(WorkerState& w, int below_class, double now);
  // Victim order: lowest class, then most-served tenant (fair share), then latest arrival.
  bool VictimBefore(const Sequence& a, const Sequence& b) const;
  // Fair share: a running sequence of a tenant over its share of `w`'s slots, for `head`.
  Sequence* PickFairShareVictim(WorkerState& w, const Sequence& head, int head_class, double now);
  // Preemption by swap, when the mode and the costs say so and slots are free.
  bool TrySwapOut(Sequence& s);
  bool SwapIsCheaper(const WorkerState& w, int32_t positions) const;
  // Admission of a swapped-out sequence on its worker: its pages come back.
  void SwapIn(WorkerState& w, Sequence& s);
  // Predicted-wait admission (scheduler_prediction.cc).
  absl::Status AdmitByPrediction(Sequence& s, double now);
  std::vector<const Sequence*> QueuedAhead(const NewRequest& r, double now) const;
  double ServiceCost(const NewRequest& r) const;
  double ExpectedOutputTokens(const NewRequest& r) const;
  void ObserveOutputLength(int32_t tokens);
  void BuildSteps(WorkerState& w, Plan& plan, Budget& budget, double now);
  void Preempt(Sequence& s);
  // n > 1: the parent computed the prompt; its waiting completions fork from its pages.
  void ForkChildren(Sequence& parent, double now);
  // The parent leaves first: its unforked completions queue as ordinary sequences.
  void ReleaseChildren(Sequence& parent);
  void ApplySample(Sequence& s, const SampledToken& sampled, double now);
  void FinishSeq(Sequence& s, FinishReason reason, const std::string& message, double now);
  void ReleaseFromWorker(Sequence& s);
  int32_t MaxPositions(const Sequence& s) const;
  int32_t DecodeLimit(const Sequence& s) const;
  // Input tokens one plan for `w` may carry (>= 1), and the most prefill tokens of one sequence
  // in it (at most the former): the options where set, else what the worker registered.
  int32_t BatchBudget(const WorkerState& w) const;
  int32_t PrefillChunk(const WorkerState& w) const;

  SchedulerOptions options_;
  KvCacheManager kv_;
  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> seqs_;  // waiting or running
  absl::flat_hash_map<WorkerId, std::unique_ptr<WorkerState>> workers_;
  RequestQueue waiting_;
  int64_t queued_prompt_tokens_ = 0;
  // No live sequence has an earlier deadline (it may be earlier than the earliest, never later):
  // Schedule scans for expired sequences only once `now` reaches it.
  double next_deadline_ = std::numeric_limits<double>::infinity();
  int64_t total_preemptions_ = 0;
  int64_t swap_preemptions_ = 0;
  int64_t fair_share_preemptions_ = 0;
  double mean_output_tokens_ = 0;  // decayed mean output length of finished requests
  int64_t finished_observed_ = 0;
  int64_t swapped_out_pages_ = 0;
  int64_t swapped_in_pages_ = 0;
  int64_t forced_preemptions_ = 0;
  int32_t max_preempted_in_row_ = 0;
  std::vector<Event> events_;
  std::vector<Sequence*> scratch_running_;  // ScheduleRunning's copy, kept for its capacity
  // The plan Schedule is building, so that Preempt can take a victim's step back out of it.
  struct Building {
    Plan* plan = nullptr;
    Budget* budget = nullptr;
  } building_;
};

}  // namespace pagoda::scheduler
