// Preemption by swap: outputs stay exact in every mode, the cost model picks the cheaper way,
// and swapped KV dies with its worker.
#include <gtest/gtest.h>

#include <deque>

#include "scheduler/core/scheduler.h"
#include "tests/scheduler/core/scheduler_fixture.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

using testing::Answer;
using testing::FakeArena;
using testing::Options;
using testing::Outcome;
using testing::Request;
using testing::Worker;

// Drives one worker through a FakeArena with a swap space (so a swapped-in page holding a
// wrong token fails the run), with step times `seconds_per_token` per input token.
void DrainChecked(Scheduler& s, FakeArena& arena, const std::map<RequestId, NewRequest>& reqs,
                  Outcome& out, double seconds_per_token = 0.001) {
  auto expected = [&](RequestId id, int32_t pos) {
    const std::vector<int32_t>& prompt = reqs.at(id).prompt;
    return pos < static_cast<int32_t>(prompt.size())
               ? prompt[pos]
               : testing::ScriptedToken(id, pos - static_cast<int32_t>(prompt.size()));
  };
  std::deque<Plan> flight;
  double now = 0;
  for (int i = 0; i < 20000 && (s.HasWork() || !flight.empty()); ++i) {
    while (auto plan = s.Schedule(1, now)) flight.push_back(std::move(*plan));
    ASSERT_FALSE(flight.empty()) << "work left but no plan";
    const Plan& plan = flight.front();
    ASSERT_EQ(arena.Execute(plan, expected), "");
    const StepTimes times{0.002 + seconds_per_token * plan.num_tokens,
                          1e-5 * static_cast<double>(plan.swap_out.size() + plan.swap_in.size())};
    ASSERT_OK(s.OnResult(1, plan.iteration, Answer(plan), now, times));
    flight.pop_front();
    now += times.forward_seconds;
    out.Collect(s);
    ASSERT_OK(s.CheckInvariants());
  }
}

struct PressureRun {
  Outcome out;
  int64_t swaps = 0, recomputes = 0, swapped_out = 0, swapped_in = 0;
};

PressureRun RunUnderPressure(PreemptionMode mode, int32_t pages, int32_t swap_pages,
                             double seconds_per_token = 0.001) {
  SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/16, /*in_flight=*/2);
  o.preemption_mode = mode;
  Scheduler s(o);
  WorkerInfo info = Worker(pages);
  info.num_swap_pages = swap_pages;
  info.swap_seconds_per_page = 1e-5;
  s.AddWorker(1, info);
  FakeArena arena(pages, info.page_size, swap_pages);
  std::map<RequestId, NewRequest> reqs;
  for (RequestId id = 1; id <= 8; ++id) {
    reqs[id] = Request(id, 10 + 5 * static_cast<int32_t>(id), 24);
    EXPECT_OK(s.AddRequest(reqs[id], 0));
  }
  PressureRun run;
  DrainChecked(s, arena, reqs, run.out, seconds_per_token);
  run.swaps = s.preemptions(PreemptionMode::kSwap);
  run.recomputes = s.preemptions(PreemptionMode::kRecompute);
  run.swapped_out = s.swapped_out_pages();
  run.swapped_in = s.swapped_in_pages();
  EXPECT_EQ(s.kv().free_swap_slots(1), swap_pages) << "every swap slot comes back";
  EXPECT_EQ(s.kv_usage(1).held, 0);
  return run;
}

TEST(SwapPreemptionTest, OutputsAreExactInEveryMode) {
  const PressureRun reference = RunUnderPressure(PreemptionMode::kRecompute, /*pages=*/512, 0);
  EXPECT_EQ(reference.swaps + reference.recomputes, 0);
  for (PreemptionMode mode :
       {PreemptionMode::kRecompute, PreemptionMode::kSwap, PreemptionMode::kAuto}) {
    const PressureRun run = RunUnderPressure(mode, /*pages=*/24, /*swap_pages=*/256);
    EXPECT_EQ(run.out.tokens, reference.out.tokens) << PreemptionModeName(mode);
    EXPECT_GT(run.swaps + run.recomputes, 0) << "the small pool must preempt";
    for (const auto& [id, e] : run.out.finished) {
      EXPECT_EQ(e.reason, FinishReason::kLength) << id;
    }
    if (mode == PreemptionMode::kRecompute) {
      EXPECT_EQ(run.swaps, 0);
      EXPECT_EQ(run.swapped_out, 0);
    } else {
      EXPECT_GT(run.swaps, 0) << PreemptionModeName(mode);
      EXPECT_EQ(run.swapped_out, run.swapped_in + 0) << "every page out comes back in";
    }
  }
}

TEST(SwapPreemptionTest, SwapWithoutSpaceRecomputes) {
  const PressureRun run = RunUnderPressure(PreemptionMode::kSwap, /*pages=*/24, /*swap_pages=*/0);
  EXPECT_EQ(run.swaps, 0);
  EXPECT_GT(run.recomputes, 0);
}

TEST(SwapPreemptionTest, SwapWithTooFewSlotsFallsBackToRecompute) {
  const PressureRun run = RunUnderPressure(PreemptionMode::kSwap, /*pages=*/24, /*swap_pages=*/3);
  EXPECT_GT(run.recomputes, 0);
}

// Auto compares recomputing the tokens (the measured per-token and fixed step costs, the
// quadratic attention) with copying the pages out and in.
TEST(SwapPreemptionTest, AutoChoosesTheCheaperWay) {
  // Tokens cost 1 ms each and a page 10 us: swap.
  const PressureRun swap =
      RunUnderPressure(PreemptionMode::kAuto, 24, 256, /*seconds_per_token=*/1e-3);
  EXPECT_GT(swap.swaps, 0);
  EXPECT_EQ(swap.recomputes, 0);
  // Tokens cost nothing beyond a 2 ms step shared by 64 tokens (31 us each), a page 10 us:
  // pages of 4 tokens (125 us to recompute) still swap. Make the page dear instead.
  SchedulerOptions o = Options(64, 16, 2);
  Scheduler s(o);
  WorkerInfo info = Worker(24);
  info.num_swap_pages = 256;
  info.swap_seconds_per_page = 1.0;  // a second a page: never worth it
  s.AddWorker(1, info);
  std::map<RequestId, NewRequest> reqs;
  for (RequestId id = 1; id <= 8; ++id) {
    reqs[id] = Request(id, 10 + 5 * static_cast<int32_t>(id), 24);
    ASSERT_OK(s.AddRequest(reqs[id], 0));
  }
  FakeArena arena(24, info.page_size, 256);
  Outcome out;
  DrainChecked(s, arena, reqs, out);
  EXPECT_GT(s.preemptions(PreemptionMode::kRecompute), 0);
  EXPECT_EQ(s.preemptions(PreemptionMode::kSwap), 0);
}

// One running slot and a swap space of 16 pages on worker 1: a low request computes 10
// positions, then a high one arrives and preempts it. Returns the high request's first plan.
std::optional<Plan> HighPreemptsLowBySwap(Scheduler& s) {
  WorkerInfo info = Worker(64);
  info.num_swap_pages = 16;
  s.AddWorker(1, info);
  EXPECT_OK(s.AddRequest(Request(1, 10, 50, Priority::kLow), 0));
  auto p = s.Schedule(1, 0);
  EXPECT_OK(s.OnResult(1, p->iteration, Answer(*p), 0));  // 10 positions computed
  EXPECT_OK(s.AddRequest(Request(2, 4, 5, Priority::kHigh), 1));
  return s.Schedule(1, 1);
}

SchedulerOptions OneSlotSwap() {
  SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/64);
  o.max_running = 1;
  o.preemption_mode = PreemptionMode::kSwap;
  return o;
}

TEST(SwapPreemptionTest, PlansCarrySwapsInTheWorkersOrder) {
  Scheduler s(OneSlotSwap());
  std::optional<Plan> p = HighPreemptsLowBySwap(s);
  ASSERT_TRUE(p.has_value());
  // Request 1 had KV for positions [0, 10): 3 pages of 4 out, in this plan, before anything.
  ASSERT_EQ(p->swap_out.size(), 3u);
  EXPECT_TRUE(p->swap_in.empty());
  EXPECT_EQ(p->free_seq_ids, (std::vector<RequestId>{1}));
  EXPECT_EQ(s.state(1), SeqState::kPreempted);
  EXPECT_EQ(s.kv().free_swap_slots(1), 13);
  // Request 2 runs to its end; request 1 comes back by swap-in, starting at position 10.
  std::optional<Plan> back;
  for (int i = 0; i < 20 && !back; ++i) {
    ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 2 + i));
    p = s.Schedule(1, 2 + i);
    if (p && !p->swap_in.empty()) back = p;
  }
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->swap_in.size(), 3u);
  ASSERT_EQ(back->steps.size(), 1u);
  EXPECT_EQ(back->steps[0].seq_id, 1u);
  EXPECT_EQ(back->steps[0].start_pos, 10);
  EXPECT_TRUE(back->steps[0].first_sight);
  EXPECT_EQ(back->steps[0].new_pages.size(), 3u);
  EXPECT_EQ(s.swapped_in_pages(), 3);
}

TEST(SwapPreemptionTest, SwappedSequencesRecomputeWhenTheirWorkerDies) {
  Scheduler s(OneSlotSwap());
  std::optional<Plan> p = HighPreemptsLowBySwap(s);
  ASSERT_TRUE(p.has_value());
  ASSERT_FALSE(p->swap_out.empty());
  s.AddWorker(2, Worker(64));
  s.RemoveWorker(1);
  ASSERT_OK(s.CheckInvariants());
  // Both now go to worker 2, request 1 without its 10 swapped positions (it may hit the page
  // it shares with request 2 in worker 2's cache, no more).
  bool seen = false;
  for (int i = 0; i < 40 && s.HasWork(); ++i) {
    p = s.Schedule(2, 2 + i);
    if (!p) break;
    for (const PlanStep& step : p->steps) {
      if (step.seq_id == 1 && step.first_sight) {
        EXPECT_LE(step.start_pos, 4);
        seen = true;
      }
    }
    EXPECT_TRUE(p->swap_in.empty());
    ASSERT_OK(s.OnResult(2, p->iteration, Answer(*p), 2 + i));
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace pagoda::scheduler
