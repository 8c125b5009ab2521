// Scheduler: continuous (iteration-level) batching over the attached workers.
//
// Sans-IO and single-threaded: no gRPC, threads, clock or randomness. The service feeds it
// requests, cancellations, worker attach/detach and iteration results, passing `now` (seconds)
// as an argument, and drains Events after every call.
//
// Model of a sequence: `tokens` = prompt + generated; `num_computed` of them have KV in the
// worker's pages. Each iteration a sequence gets the input tokens[num_computed, ...): one token
// when only the last is missing (a decode), otherwise a prefill chunk; it samples when the chunk
// reaches the end of `tokens`. Resume after a worker loss is the same rule with num_computed = 0.
//
// Invariants (checked by tests after every step):
//  * a page is owned by at most one sequence, and only pages of its own worker;
//  * every running sequence holds a reservation for all the pages it may still need, so a
//    running sequence never waits for a page;
//  * at most one plan is in flight per worker; a plan carries at most the token budget;
//  * when nothing is queued or running, every pool is fully free and unreserved.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/core/block_pool.h"
#include "scheduler/core/request_queue.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

struct SchedulerOptions {
  int32_t max_batch_tokens = 2048;  // input tokens per iteration per worker
  int32_t max_running = 256;        // sequences running per worker
  int32_t max_prefill_chunk = 512;  // prefill tokens per sequence per iteration
  int32_t context_length = 0;       // the model's; prompt + max_tokens must fit
  int32_t eos_id = -1;              // the model's end-of-sequence token
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);
  ~Scheduler();

  // Validates and queues a request. INVALID_ARGUMENT when it can never run (empty prompt,
  // prompt + max_tokens beyond the context, more pages than any attached worker has).
  absl::Status AddRequest(NewRequest request, double now);
  // Removes a request wherever it is, freeing its pages; emits kFinished(kCancelled).
  // Unknown or finished ids are ignored.
  void Cancel(RequestId id, double now, const std::string& why = "cancelled by the client");

  void AddWorker(WorkerId id, const WorkerInfo& info);
  // Forgets a worker; its sequences go back to the head of the queue and are recomputed.
  void RemoveWorker(WorkerId id);

  // The next plan for `worker`, or nullopt when it has nothing to do or a plan in flight.
  std::optional<Plan> Schedule(WorkerId worker, double now);
  // Applies the result of the worker's in-flight plan.
  absl::Status OnResult(WorkerId worker, uint64_t iteration,
                        const std::vector<SampledToken>& sampled, double now);
  // Fails every sequence of the worker's in-flight plan (the worker reported an error).
  void OnPlanFailed(WorkerId worker, const std::string& error, double now);

  std::vector<Event> TakeEvents();

  // Introspection.
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const;
  size_t num_workers() const { return workers_.size(); }
  bool HasWork() const { return !waiting_.empty() || num_running() > 0; }
  // Pool of a worker, or nullptr.
  const BlockPool* pool(WorkerId worker) const;
  // Checks every invariant; returns a description of the first violation, or OK.
  absl::Status CheckInvariants() const;

 private:
  struct Sequence;
  struct Worker;

  Worker* FindWorker(WorkerId id);
  void ScheduleRunning(Worker& w, Plan& plan, int32_t& budget, bool decodes);
  void AdmitWaiting(Worker& w, Plan& plan, int32_t& budget, double now);
  bool AddStep(Worker& w, Sequence& s, Plan& plan, int32_t& budget);
  void ApplySample(Worker& w, Sequence& s, int32_t token, double now);
  void Finish(Sequence& s, FinishReason reason, const std::string& message, double now);
  void ReleaseFromWorker(Sequence& s);
  int32_t PagesNeeded(const Sequence& s, const Worker& w) const;

  SchedulerOptions options_;
  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> seqs_;  // waiting or running
  absl::flat_hash_map<WorkerId, std::unique_ptr<Worker>> workers_;
  RequestQueue waiting_;
  std::vector<Event> events_;
};

}  // namespace pagoda::scheduler
