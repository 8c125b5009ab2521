// Sequence: the scheduler core's record of one request while it is waiting or running.
//
// `tokens` = prompt + generated tokens whose values are known. The worker has KV for the first
// `num_computed` positions (confirmed by results) and has been asked for `num_scheduled`
// (>= num_computed; the difference is in plans still in flight). With overlap a sample may be
// in flight: `pending_samples` tokens after tokens.size() are being sampled. While a sample is
// pending the sequence has at most one unscheduled input: that very token, which the worker
// feeds itself (feed_last_sampled).
// `epoch` changes at every preemption so results from plans sent before it are ignored.
#pragma once

#include <optional>
#include <vector>

#include "scheduler/core/request_queue.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

enum class SeqState { kWaiting, kPrefilling, kDecoding, kPreempted };
const char* SeqStateName(SeqState state);

struct Sequence {
  NewRequest request;
  double arrival = 0;
  std::vector<int32_t> tokens;
  int32_t num_prompt = 0;
  SeqState state = SeqState::kWaiting;

  std::optional<WorkerId> worker;  // set while running
  bool worker_knows = false;       // first_sight was sent to `worker`
  // The block table itself is KvCacheManager's.
  int32_t pages_sent = 0;  // leading pages of the block table the worker has been told about
  int32_t num_computed = 0;
  int32_t num_scheduled = 0;
  int32_t pending_samples = 0;
  uint32_t epoch = 0;

  // n > 1: completions 1..n-1 wait (in no queue) until completion 0, their parent, has computed
  // the prompt, then fork from its pages; if the parent goes first, they queue as usual.
  RequestId fork_parent = 0;             // set while waiting to fork
  std::vector<RequestId> fork_children;  // on the parent, until it forks them
  std::optional<PageCopy> pending_copy;  // a fork's copy of the partial page, for the next plan
  int32_t cached_tokens = 0;             // prompt tokens hit in the prefix cache at first admission
  int32_t preemptions = 0;               // total
  int32_t preempted_in_row = 0;          // since the last generated token
  RequestTimings timings;
  TenantId tenant = 0;  // RequestQueue's id of request.tenant
  // Swap preemption: the worker whose swap space holds the KV of positions
  // [0, swapped_positions); the sequence resumes there without recomputing them.
  std::optional<WorkerId> swapped_on;
  int32_t swapped_positions = 0;
  // The iteration of the plan that brings KV the sequence counts as computed (its swap-in, or
  // a fork's copy of its partial page): until that plan has gone out, its pages cannot be
  // swapped out (the plan's swap-outs run before its copies and swap-ins).
  uint64_t kv_arrives_in = 0;

  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - num_prompt; }
  // Tokens the worker still has to take as input, counting a pending sample.
  int32_t unscheduled() const {
    return static_cast<int32_t>(tokens.size()) + pending_samples - num_scheduled;
  }
  Priority priority() const { return request.priority; }
  RequestQueue::Entry queue_entry() const {
    return {request.id, request.priority, arrival, tenant};
  }
};

}  // namespace pagoda::scheduler
