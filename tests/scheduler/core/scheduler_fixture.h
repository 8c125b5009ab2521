// Scripted workers for the scheduler core's tests: options, requests, a worker whose sampled
// tokens are a function of the sequence and sample index only, and a fake KV arena that checks
// every position a step reads holds its own sequence's token.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "scheduler/core/scheduler.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::testing {

inline constexpr int32_t kEos = 2;

inline SchedulerOptions Options(int32_t budget = 64, int32_t chunk = 32, int32_t in_flight = 1) {
  SchedulerOptions o;
  o.max_batch_tokens = budget;
  o.max_running = 8;
  o.max_prefill_chunk = chunk;
  o.context_length = 256;
  o.eos_id = kEos;
  o.max_plans_in_flight = in_flight;
  return o;
}

inline WorkerInfo Worker(int32_t pages, int32_t page_size = 4) {
  return {.num_pages = pages, .page_size = page_size, .max_batch_tokens = 1024};
}

inline NewRequest Request(RequestId id, int32_t prompt_len, int32_t max_tokens,
                          Priority priority = Priority::kNormal) {
  NewRequest r;
  r.id = id;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

// The token a scripted worker samples: a function of the sequence and the sample index only,
// as a real greedy worker's would be, so recomputation after preemption must reproduce it.
inline int32_t ScriptedToken(RequestId id, int32_t index) {
  return 100 + static_cast<int32_t>((id * 7 + index * 3) % 50);
}

inline std::vector<SampledToken> Answer(const Plan& plan) {
  std::vector<SampledToken> out;
  for (const PlanStep& s : plan.steps) {
    if (s.sample) out.push_back({s.seq_id, ScriptedToken(s.seq_id, s.sample_index)});
  }
  return out;
}

// Drives one worker to completion; returns tokens and finish events per request.
struct Outcome {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, Event> finished;

  // Takes the scheduler's events into tokens and finished.
  void Collect(Scheduler& s) {
    for (Event& e : s.TakeEvents()) {
      if (e.kind == Event::Kind::kToken) {
        tokens[e.id].push_back(e.token);
      } else {
        finished[e.id] = e;
      }
    }
  }
};

inline void Drain(Scheduler& s, WorkerId w, Outcome& out, double& now, int max_steps = 10000) {
  std::deque<Plan> flight;
  for (int i = 0; i < max_steps && (s.HasWork() || !flight.empty()); ++i) {
    while (auto plan = s.Schedule(w, now)) flight.push_back(std::move(*plan));
    ASSERT_FALSE(flight.empty()) << "work left but no plan";
    ASSERT_OK(s.OnResult(w, flight.front().iteration, Answer(flight.front()), now));
    flight.pop_front();
    now += 1;
    out.Collect(s);
    ASSERT_OK(s.CheckInvariants());
  }
}

// Runs one request to completion on `worker` (the only one that may take it).
inline void RunAlone(Scheduler& s, WorkerId worker, const NewRequest& r, double& now) {
  ASSERT_OK(s.AddRequest(r, now));
  Outcome out;
  Drain(s, worker, out, now);
  ASSERT_TRUE(out.finished.count(r.id));
}

inline NewRequest PrefixRequest(RequestId id, int32_t shared, int32_t own, int32_t max_tokens = 2) {
  NewRequest r = Request(id, shared + own, max_tokens);
  for (int32_t i = shared; i < shared + own; ++i) r.prompt[i] = 500 + static_cast<int32_t>(id);
  return r;
}

// A scripted worker's KV arena: each slot remembers the token written at its position, so a
// step that reads a position (a prefix-cache hit, a page shared by a preempted sequence's
// successor) can be checked to find exactly the token its own sequence has there.
class FakeArena {
 public:
  FakeArena(int32_t pages, int32_t page_size, int32_t swap_pages = 0)
      : page_size_(page_size), slots_(pages * page_size, -1), swap_(swap_pages * page_size, -1) {}

  // Executes a plan in the worker's order (swap-outs, copies, frees, swap-ins, steps);
  // `expected(id, pos)` is the token of sequence `id` at position `pos`. Returns an error
  // naming the first wrong read or write.
  std::string Execute(const Plan& plan,
                      const std::function<int32_t(RequestId, int32_t)>& expected) {
    for (const SwapCopy& c : plan.swap_out) {
      if (static_cast<size_t>((c.slot + 1) * page_size_) > swap_.size()) return "bad swap slot";
      std::copy_n(slots_.begin() + c.page * page_size_, page_size_,
                  swap_.begin() + c.slot * page_size_);
    }
    for (const PageCopy& copy : plan.page_copies) {
      std::copy_n(slots_.begin() + copy.src * page_size_, page_size_,
                  slots_.begin() + copy.dst * page_size_);
    }
    for (RequestId id : plan.free_seq_ids) tables_.erase(id);
    for (const SwapCopy& c : plan.swap_in) {
      if (static_cast<size_t>((c.slot + 1) * page_size_) > swap_.size()) return "bad swap slot";
      std::copy_n(swap_.begin() + c.slot * page_size_, page_size_,
                  slots_.begin() + c.page * page_size_);
    }
    for (const PlanStep& step : plan.steps) {
      if (step.first_sight) tables_[step.seq_id].clear();
      std::vector<PageId>& table = tables_[step.seq_id];
      table.insert(table.end(), step.new_pages.begin(), step.new_pages.end());
      for (int32_t pos = 0; pos < step.start_pos; ++pos) {
        if (Slot(table, pos) != expected(step.seq_id, pos)) {
          return "seq " + std::to_string(step.seq_id) + " reads a wrong token at position " +
                 std::to_string(pos);
        }
      }
      const int32_t n = step.feed_last_sampled ? 1 : static_cast<int32_t>(step.tokens.size());
      for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = step.start_pos + i;
        const int32_t token = expected(step.seq_id, pos);
        if (!step.feed_last_sampled && step.tokens[i] != token) return "wrong input token";
        if (static_cast<size_t>(pos / page_size_) >= table.size()) return "write past the table";
        slots_[table[pos / page_size_] * page_size_ + pos % page_size_] = token;
      }
    }
    return "";
  }

 private:
  int32_t Slot(const std::vector<PageId>& table, int32_t pos) const {
    if (static_cast<size_t>(pos / page_size_) >= table.size()) return -2;
    return slots_[table[pos / page_size_] * page_size_ + pos % page_size_];
  }

  int32_t page_size_;
  std::vector<int32_t> slots_;
  std::vector<int32_t> swap_;
  std::map<RequestId, std::vector<PageId>> tables_;
};

}  // namespace pagoda::scheduler::testing
