#include "scheduler/core/scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>

#include "tests/scheduler/core/scheduler_fixture.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

using testing::Answer;
using testing::Drain;
using testing::FakeArena;
using testing::kEos;
using testing::Options;
using testing::Outcome;
using testing::PrefixRequest;
using testing::Request;
using testing::RunAlone;
using testing::ScriptedToken;
using testing::Worker;

TEST(SchedulerTest, RejectsWhatCanNeverFit) {
  Scheduler s(Options());
  EXPECT_EQ(s.AddRequest(Request(1, 0, 4), 0).code(), absl::StatusCode::kInvalidArgument);
  absl::Status st = s.AddRequest(Request(2, 200, 100), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("context of 256"), std::string::npos) << st;
  s.AddWorker(1, Worker(4));
  st = s.AddRequest(Request(3, 20, 10), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("largest: 16 tokens"), std::string::npos) << st;
}

TEST(SchedulerTest, ChunkedPrefillThenDecodeToLength) {
  Scheduler s(Options(/*budget=*/16, /*chunk=*/8));
  s.AddWorker(1, Worker(16));
  ASSERT_OK(s.AddRequest(Request(7, 20, 3), 0));
  std::vector<int32_t> chunks;
  std::vector<int32_t> tokens;
  bool finished = false;
  for (int iter = 0; iter < 20 && !finished; ++iter) {
    auto plan = s.Schedule(1, iter);
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->steps.size(), 1u);
    EXPECT_EQ(plan->steps[0].first_sight, iter == 0);
    chunks.push_back(static_cast<int32_t>(plan->steps[0].tokens.size()));
    ASSERT_OK(s.OnResult(1, plan->iteration, Answer(*plan), iter));
    for (const Event& e : s.TakeEvents()) {
      if (e.kind == Event::Kind::kToken) tokens.push_back(e.token);
      if (e.kind == Event::Kind::kFinished) {
        finished = true;
        EXPECT_EQ(e.reason, FinishReason::kLength);
        EXPECT_EQ(e.completion_tokens, 3);
      }
    }
    ASSERT_OK(s.CheckInvariants());
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(chunks, (std::vector<int32_t>{8, 8, 4, 1, 1}));
  EXPECT_EQ(tokens,
            (std::vector<int32_t>{ScriptedToken(7, 0), ScriptedToken(7, 1), ScriptedToken(7, 2)}));
  EXPECT_EQ(s.kv_usage(1).held, 0);
  ASSERT_OK(s.AddRequest(Request(8, 2, 1), 30));
  auto plan = s.Schedule(1, 30);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->free_seq_ids, (std::vector<RequestId>{7}));
}

// The first plan's chunk of a 600-token prompt under `o`, on a worker that registers a budget
// of `budget` tokens and prefers chunks of `preferred` (0: no preference).
int32_t FirstChunk(const SchedulerOptions& o, int32_t preferred, int32_t budget = 128) {
  Scheduler s(o);
  WorkerInfo info = Worker(64, 16);
  info.max_batch_tokens = budget;
  info.max_prefill_chunk = preferred;
  s.AddWorker(1, info);
  EXPECT_OK(s.AddRequest(Request(1, 600, 4), 0));
  const auto plan = s.Schedule(1, 0);
  if (!plan.has_value() || plan->steps.size() != 1) return -1;
  const auto chunk = static_cast<int32_t>(plan->steps[0].tokens.size());
  EXPECT_EQ(s.PlanLimits(1).second, chunk);
  return chunk;
}

TEST(SchedulerTest, ZeroBudgetAndChunkTakeTheWorkersOwn) {
  SchedulerOptions o = Options(/*budget=*/0, /*chunk=*/0);
  o.context_length = 1024;
  EXPECT_EQ(FirstChunk(o, 96), 96);        // the worker's preference
  EXPECT_EQ(FirstChunk(o, 0, 1024), 512);  // none: kDefaultPrefillChunk
  EXPECT_EQ(FirstChunk(o, 0), 128);        // ... cut by the worker's budget
  EXPECT_EQ(FirstChunk(o, 4096), 128);     // a preference past the budget is cut too
  o.max_prefill_chunk = 40;                // the option overrides the worker
  EXPECT_EQ(FirstChunk(o, 96), 40);
  o.max_batch_tokens = 64;  // and caps the worker's budget
  o.max_prefill_chunk = 0;
  EXPECT_EQ(FirstChunk(o, 96), 64);
  o.max_batch_tokens = 4096;  // never past the worker's own
  EXPECT_EQ(FirstChunk(o, 0), 128);
  EXPECT_EQ(Scheduler(o).PlanLimits(7), (std::pair<int32_t, int32_t>{0, 0}));
}

TEST(SchedulerTest, EosStopTokenAndContextFinishWithTheirReasons) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(64));
  NewRequest b = Request(2, 3, 10);
  b.stop_token_ids = {77};
  ASSERT_OK(s.AddRequest(Request(1, 3, 10), 0));
  ASSERT_OK(s.AddRequest(b, 0));
  ASSERT_OK(s.AddRequest(Request(3, 3, 10), 0));
  auto plan = s.Schedule(1, 0);
  ASSERT_EQ(plan->steps.size(), 3u);
  ASSERT_OK(s.OnResult(1, plan->iteration, {{1, kEos}, {2, 77}}, 1));
  std::map<RequestId, FinishReason> reasons;
  for (const Event& e : s.TakeEvents()) {
    if (e.kind == Event::Kind::kFinished) reasons[e.id] = e.reason;
  }
  EXPECT_EQ(reasons[1], FinishReason::kEos);
  EXPECT_EQ(reasons[2], FinishReason::kStop);
  EXPECT_EQ(reasons[3], FinishReason::kError) << "the scripted result skipped it";
  // max_tokens 0: up to the model context (256).
  Scheduler t(Options());
  t.AddWorker(1, Worker(64));
  ASSERT_OK(t.AddRequest(Request(3, 250, 0), 0));
  Outcome out;
  double now = 0;
  Drain(t, 1, out, now);
  EXPECT_EQ(out.finished[3].reason, FinishReason::kContext);
  EXPECT_EQ(out.tokens[3].size(), 6u);
}

TEST(SchedulerTest, EndOfTurnAndMessageTokensFinishLikeEos) {
  SchedulerOptions o = Options();
  o.more_eos_ids = {5, 6};  // e.g. <|eot_id|>, <|eom_id|>
  Scheduler s(o);
  s.AddWorker(1, Worker(64));
  NewRequest ignoring = Request(4, 3, 10);
  ignoring.ignore_eos = true;
  for (RequestId id : {1, 2, 3}) ASSERT_OK(s.AddRequest(Request(id, 3, 10), 0));
  ASSERT_OK(s.AddRequest(ignoring, 0));
  auto plan = s.Schedule(1, 0);
  ASSERT_EQ(plan->steps.size(), 4u);
  ASSERT_OK(s.OnResult(1, plan->iteration, {{1, 5}, {2, 6}, {3, 7}, {4, 5}}, 1));
  std::map<RequestId, FinishReason> reasons;
  for (const Event& e : s.TakeEvents()) {
    if (e.kind == Event::Kind::kFinished) reasons[e.id] = e.reason;
  }
  EXPECT_EQ(reasons.size(), 2u);
  EXPECT_EQ(reasons[1], FinishReason::kEos);
  EXPECT_EQ(reasons[2], FinishReason::kEos);
  EXPECT_FALSE(reasons.contains(3));
  EXPECT_FALSE(reasons.contains(4)) << "ignore_eos covers EOT and EOM too";
}

TEST(SchedulerTest, FinishFreesPagesEvenWithPlanInFlight) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(8));
  ASSERT_OK(s.AddRequest(Request(1, 10, 10), 0));
  auto plan = s.Schedule(1, 0);
  ASSERT_TRUE(plan.has_value());
  s.Finish(1, FinishReason::kCancelled, "client", 0.5);
  EXPECT_EQ(s.kv_usage(1).held, 0);
  auto events = s.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, FinishReason::kCancelled);
  ASSERT_OK(s.OnResult(1, plan->iteration, Answer(*plan), 1));
  EXPECT_TRUE(s.TakeEvents().empty());
  auto next = s.Schedule(1, 1);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->free_seq_ids, (std::vector<RequestId>{1}));
}

TEST(SchedulerTest, WorkerLossRequeuesAndResumesByRecompute) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(16));
  ASSERT_OK(s.AddRequest(Request(1, 5, 4), 0));
  for (int i = 0; i < 2; ++i) {
    auto plan = s.Schedule(1, i);
    ASSERT_OK(s.OnResult(1, plan->iteration, Answer(*plan), i));
  }
  s.RemoveWorker(1);
  EXPECT_EQ(s.num_waiting(), 1u);
  s.AddWorker(2, Worker(16));
  auto plan = s.Schedule(2, 3);
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].tokens.size(), 7u) << "prompt (5) + two generated, recomputed";
  EXPECT_TRUE(plan->steps[0].first_sight);
  EXPECT_EQ(plan->steps[0].sample_index, 2);
}

TEST(SchedulerTest, OverlapFeedsTheLastSampleAndLagsStops) {
  Scheduler s(Options(64, 32, /*in_flight=*/2));
  s.AddWorker(1, Worker(16));
  ASSERT_OK(s.AddRequest(Request(1, 5, 3), 0));
  auto p1 = s.Schedule(1, 0);
  auto p2 = s.Schedule(1, 0);
  ASSERT_TRUE(p1 && p2);
  EXPECT_FALSE(s.Schedule(1, 0).has_value()) << "two plans in flight at most";
  ASSERT_EQ(p2->steps.size(), 1u);
  EXPECT_TRUE(p2->steps[0].feed_last_sampled);
  EXPECT_TRUE(p2->steps[0].tokens.empty());
  EXPECT_EQ(p2->steps[0].start_pos, 5);
  EXPECT_EQ(p2->steps[0].sample_index, 1);
  Outcome out;
  double now = 1;
  ASSERT_OK(s.OnResult(1, p1->iteration, Answer(*p1), now));
  auto p3 = s.Schedule(1, now);
  ASSERT_TRUE(p3.has_value());
  EXPECT_EQ(p3->steps[0].sample_index, 2);
  EXPECT_FALSE(s.Schedule(1, now).has_value()) << "max_tokens reached by what is in flight";
  ASSERT_OK(s.OnResult(1, p2->iteration, Answer(*p2), now));
  ASSERT_OK(s.OnResult(1, p3->iteration, Answer(*p3), now));
  for (Event& e : s.TakeEvents()) {
    if (e.kind == Event::Kind::kToken) {
      out.tokens[e.id].push_back(e.token);
    } else {
      out.finished[e.id] = e;
    }
  }
  EXPECT_EQ(out.tokens[1],
            (std::vector<int32_t>{ScriptedToken(1, 0), ScriptedToken(1, 1), ScriptedToken(1, 2)}));
  EXPECT_EQ(out.finished[1].reason, FinishReason::kLength);
  EXPECT_EQ(s.kv_usage(1).held, 0);
}

// A pool too small for everyone at once: sequences are preempted and recomputed, and every
// request still streams exactly the tokens an unconstrained run gives.
TEST(SchedulerTest, PreemptionUnderKvPressureKeepsOutputsExact) {
  Outcome big, small;
  for (auto* out : {&big, &small}) {
    Scheduler s(Options(64, 16, 2));
    s.AddWorker(1, Worker(out == &big ? 256 : 12));
    for (RequestId id = 1; id <= 6; ++id) {
      ASSERT_OK(s.AddRequest(Request(id, 6 + 3 * id, 16), 0));
    }
    double now = 0;
    Drain(s, 1, *out, now);
    if (out == &small) {
      EXPECT_GT(s.total_preemptions(), 0);
      EXPECT_LE(s.max_preempted_in_row(), 3);
    }
  }
  EXPECT_EQ(small.tokens, big.tokens);
  for (RequestId id = 1; id <= 6; ++id) {
    EXPECT_EQ(small.finished[id].reason, FinishReason::kLength);
    EXPECT_EQ(small.tokens[id].size(), 16u);
  }
}

TEST(SchedulerTest, HigherClassPreemptsLowerWhenItCannotBeAdmitted) {
  SchedulerOptions o = Options();
  o.max_running = 1;
  Scheduler s(o);
  s.AddWorker(1, Worker(64));
  ASSERT_OK(s.AddRequest(Request(1, 4, 50, Priority::kLow), 0));
  auto p = s.Schedule(1, 0);
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 0));
  ASSERT_OK(s.AddRequest(Request(2, 4, 5, Priority::kHigh), 1));
  p = s.Schedule(1, 1);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 1u);
  EXPECT_EQ(p->steps[0].seq_id, 2u);
  EXPECT_EQ(s.state(1), SeqState::kPreempted);
  EXPECT_EQ(p->free_seq_ids, (std::vector<RequestId>{1}));
}

// A running prefill short of pages takes the pages there are instead of preempting a sequence
// of its own class; one of a higher class still preempts a lower one for its whole chunk.
// 12 pages of 4: request 1 (prompt 40) prefills in chunks of 16 beside request 2 (prompt 8,
// 3 tokens). At its third chunk request 1 needs 2 pages and 1 is free.
TEST(SchedulerTest, PrefillChunkShrinksToFreePagesBeforePreemptingItsClass) {
  for (Priority second : {Priority::kNormal, Priority::kLow}) {
    SCOPED_TRACE(static_cast<int>(second));
    Scheduler s(Options(/*budget=*/64, /*chunk=*/16));
    s.AddWorker(1, Worker(12));
    ASSERT_OK(s.AddRequest(Request(1, 40, 2), 0));
    NewRequest other = Request(2, 8, 3, second);
    other.prompt.assign(8, 60);  // shares no page with request 1
    ASSERT_OK(s.AddRequest(other, 0));
    Outcome out;
    std::vector<int32_t> chunks_of_1;
    double now = 0;
    for (int i = 0; i < 50 && s.HasWork(); ++i, ++now) {
      auto p = s.Schedule(1, now);
      ASSERT_TRUE(p.has_value());
      for (const PlanStep& step : p->steps) {
        if (step.seq_id == 1 && step.start_pos < 40) {  // its prompt's chunks
          chunks_of_1.push_back(static_cast<int32_t>(step.tokens.size()));
        }
      }
      ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
      out.Collect(s);
      ASSERT_OK(s.CheckInvariants());
    }
    ASSERT_FALSE(s.HasWork());
    if (second == Priority::kNormal) {
      EXPECT_EQ(s.total_preemptions(), 0);
      EXPECT_EQ(chunks_of_1, (std::vector<int32_t>{16, 16, 4, 4}))
          << "the third chunk ends where the free page ends; the rest follows request 2's end";
    } else {
      EXPECT_EQ(s.total_preemptions(), 1) << "the lower class yields its pages";
      EXPECT_EQ(chunks_of_1, (std::vector<int32_t>{16, 16, 8}));
    }
    for (RequestId id : {1, 2}) {
      ASSERT_TRUE(out.finished.count(id));
      EXPECT_EQ(out.finished[id].reason, FinishReason::kLength);
    }
    EXPECT_EQ(out.tokens[1], (std::vector<int32_t>{ScriptedToken(1, 0), ScriptedToken(1, 1)}));
    EXPECT_EQ(out.tokens[2], (std::vector<int32_t>{ScriptedToken(2, 0), ScriptedToken(2, 1),
                                                   ScriptedToken(2, 2)}));
  }
}

// A preempted sequence resumes from its own cached pages; a new request takes unreferenced
// cached pages (evicting them) before anything running is preempted.
TEST(SchedulerTest, PreemptedSequenceReHitsItsPagesAndEvictionComesFirst) {
  SchedulerOptions o = Options();
  o.max_running = 1;
  Scheduler s(o);
  s.AddWorker(1, Worker(8));
  ASSERT_OK(s.AddRequest(Request(1, 12, 6, Priority::kLow), 0));
  double now = 0;
  for (int i = 0; i < 3; ++i) {  // prefill, then two decodes
    auto p = s.Schedule(1, now);
    ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  }
  ASSERT_OK(s.AddRequest(Request(2, 4, 2, Priority::kHigh), now));
  Outcome out;
  auto p = s.Schedule(1, now);
  ASSERT_EQ(s.state(1), SeqState::kPreempted);
  EXPECT_EQ(s.kv_usage(1).parked, 3) << "request 1's computed full pages stay cached";
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  p = s.Schedule(1, ++now);  // request 2 decodes and finishes
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  p = s.Schedule(1, ++now);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 1u);
  EXPECT_EQ(p->steps[0].seq_id, 1u);
  EXPECT_TRUE(p->steps[0].first_sight);
  EXPECT_EQ(p->steps[0].start_pos, 12) << "resumed on its own 3 cached pages";
  EXPECT_EQ(p->steps[0].tokens.size(), 3u) << "recomputes only the 3 generated tokens";
  EXPECT_EQ(p->steps[0].new_pages.size(), 4u);
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  Drain(s, 1, out, now);
  EXPECT_EQ(out.finished[1].cached_tokens, 0) << "its first admission hit nothing";
  EXPECT_EQ(out.finished[1].completion_tokens, 6);

  // Eviction before preemption: 6 of 8 pages parked, one request running, and a second one
  // needing 4 pages takes cached pages instead of preempting the first.
  o.max_running = 2;
  Scheduler t(o);
  t.AddWorker(1, Worker(8));
  now = 0;
  Outcome ignored;
  ASSERT_OK(t.AddRequest(Request(1, 24, 1), now));
  Drain(t, 1, ignored, now);
  EXPECT_EQ(t.kv_usage(1).parked, 6);
  NewRequest other = Request(2, 7, 20);
  other.prompt.assign(7, 60);
  ASSERT_OK(t.AddRequest(other, now));
  p = t.Schedule(1, now);
  ASSERT_OK(t.OnResult(1, p->iteration, Answer(*p), now));
  NewRequest third = Request(3, 16, 1);
  third.prompt.assign(16, 70);
  ASSERT_OK(t.AddRequest(third, now));
  p = t.Schedule(1, now);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(t.total_preemptions(), 0);
  EXPECT_EQ(t.state(2), SeqState::kDecoding);
  EXPECT_EQ(t.kv_usage(1).held, 2 + 4);
  ASSERT_OK(t.CheckInvariants());
}

// n > 1: completion 0 computes the prompt once; the others fork from its pages (shared whole
// pages, a copy of the partial one), compute the last prompt token themselves and sample with
// seeds seed + i.
TEST(SchedulerTest, CompletionsShareThePromptAndCopyThePartialPage) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(16));
  NewRequest r = Request(10, 10, 3);
  r.n = 3;
  r.sampling.seed = 100;
  ASSERT_OK(s.AddRequest(r, 0));
  auto p = s.Schedule(1, 0);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 1u) << "only completion 0 computes the prompt";
  EXPECT_EQ(p->steps[0].tokens.size(), 10u);
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 1));
  p = s.Schedule(1, 1);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 3u);
  ASSERT_EQ(p->page_copies.size(), 2u);
  for (int i = 1; i <= 2; ++i) {
    const PlanStep& step = p->steps[i];
    EXPECT_EQ(step.seq_id, 10u + i);
    EXPECT_TRUE(step.first_sight);
    EXPECT_EQ(step.start_pos, 9);
    EXPECT_EQ(step.tokens, (std::vector<int32_t>{19}));
    EXPECT_EQ(step.sample_index, 0);
    EXPECT_EQ(step.sampling.seed, 100u + i);
    ASSERT_EQ(step.new_pages.size(), 3u);
    EXPECT_EQ(step.new_pages[0], 0) << "shared with completion 0";
    EXPECT_EQ(step.new_pages[1], 1);
    EXPECT_EQ(p->page_copies[i - 1].src, 2) << "completion 0's partial page";
    EXPECT_EQ(p->page_copies[i - 1].dst, step.new_pages[2]);
  }
  EXPECT_EQ(s.pool(1)->ref_count(0), 3);
  EXPECT_EQ(s.pool(1)->ref_count(1), 3);
  EXPECT_EQ(s.pool(1)->ref_count(2), 1);
  ASSERT_OK(s.CheckInvariants());
  Outcome out;
  double now = 2;
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  for (Event& e : s.TakeEvents()) {
    if (e.kind == Event::Kind::kToken) out.tokens[e.id].push_back(e.token);
  }
  Drain(s, 1, out, now);
  for (RequestId id = 10; id <= 12; ++id) {
    EXPECT_EQ(out.finished[id].reason, FinishReason::kLength);
    EXPECT_EQ(out.tokens[id], (std::vector<int32_t>{ScriptedToken(id, 0), ScriptedToken(id, 1),
                                                    ScriptedToken(id, 2)}));
  }
  EXPECT_EQ(s.kv_usage(1).held, 0);
}

TEST(SchedulerTest, CompletionLimitsAreInvalidArgument) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(16));  // 64 tokens
  NewRequest r = Request(1, 10, 10);
  r.n = 17;
  absl::Status st = s.AddRequest(r, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n must be in [1, 16]"), std::string::npos) << st;
  r.n = 4;  // 4 x 5 pages > 16
  st = s.AddRequest(r, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n (4) x"), std::string::npos) << st;
  EXPECT_NE(st.message().find("largest: 64 tokens"), std::string::npos) << st;
  r.n = 3;
  EXPECT_OK(s.AddRequest(r, 0));
  EXPECT_EQ(s.AddRequest(Request(3, 4, 4), 0).code(), absl::StatusCode::kAlreadyExists)
      << "ids 1..3 belong to the three completions";
}

// Two requests with the same long prefix arrive together: the second waits while the first
// computes the prefix, then reuses it instead of computing it a second time.
TEST(SchedulerTest, AdmissionWaitsForAPrefixBeingComputed) {
  Scheduler s(Options(/*budget=*/256, /*chunk=*/256));
  s.AddWorker(1, Worker(64));
  ASSERT_OK(s.AddRequest(PrefixRequest(1, 32, 4), 0));
  ASSERT_OK(s.AddRequest(PrefixRequest(2, 32, 4), 0));
  auto p = s.Schedule(1, 0);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 1u) << "request 2 waits for request 1's prefix pages";
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 1));
  p = s.Schedule(1, 1);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 2u);
  EXPECT_EQ(p->steps[1].seq_id, 2u);
  EXPECT_EQ(p->steps[1].start_pos, 32) << "the prefix came from the cache";
  Outcome out;
  double now = 2;
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), now));
  Drain(s, 1, out, now);
  EXPECT_EQ(out.finished[2].cached_tokens, 32);
}

// Aging: a low request under a steady stream of critical arrivals is admitted within the
// bound (3 aging intervals for low → critical, plus the queue ahead of it).
TEST(SchedulerTest, AgingBoundsTheWaitOfLowPriority) {
  SchedulerOptions o = Options();
  o.max_running = 1;
  o.aging_interval = 5;
  Scheduler s(o);
  s.AddWorker(1, Worker(64));
  ASSERT_OK(s.AddRequest(Request(1, 4, 1, Priority::kLow), 0));
  RequestId next = 100;
  double admitted = -1;
  std::deque<Plan> flight;
  for (double now = 0; now < 200 && admitted < 0; now += 1) {
    ASSERT_OK(s.AddRequest(Request(next++, 4, 1, Priority::kCritical), now));
    auto plan = s.Schedule(1, now);
    if (!plan) continue;
    for (const PlanStep& step : plan->steps) {
      if (step.seq_id == 1) admitted = now;
    }
    ASSERT_OK(s.OnResult(1, plan->iteration, Answer(*plan), now));
    s.TakeEvents();
  }
  ASSERT_GE(admitted, 0) << "the low request starved";
  EXPECT_LE(admitted, 3 * 5 + 1);
}

TEST(SchedulerTest, QueueLimitsGiveResourceExhausted) {
  SchedulerOptions o = Options();
  o.max_queued_requests = 2;
  o.max_queued_prompt_tokens = 30;
  Scheduler s(o);
  ASSERT_OK(s.AddRequest(Request(1, 10, 4), 0));
  absl::Status st = s.AddRequest(Request(2, 25, 4), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("10 prompt tokens waiting"), std::string::npos) << st;
  ASSERT_OK(s.AddRequest(Request(3, 10, 4), 0));
  st = s.AddRequest(Request(4, 1, 4), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("2 requests waiting (limit 2)"), std::string::npos) << st;
}

TEST(SchedulerTest, DeadlinesDropQueuedAndRunningRequests) {
  SchedulerOptions o = Options();
  o.max_running = 1;
  Scheduler s(o);
  s.AddWorker(1, Worker(16));
  NewRequest running = Request(1, 4, 40);
  running.deadline = 5;
  NewRequest queued = Request(2, 4, 40);
  queued.deadline = 3;
  ASSERT_OK(s.AddRequest(running, 0));
  ASSERT_OK(s.AddRequest(queued, 0));
  auto p = s.Schedule(1, 0);
  ASSERT_EQ(p->steps.size(), 1u) << "max_running 1 keeps request 2 queued";
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 1));
  s.TakeEvents();
  EXPECT_GT(s.kv_usage(1).held, 0);

  p = s.Schedule(1, 4);  // past the queued request's deadline only
  ASSERT_TRUE(p.has_value());
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 4));
  std::vector<Event> events = s.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id, 2u);
  EXPECT_EQ(events[0].reason, FinishReason::kDeadline);
  EXPECT_EQ(events[1].kind, Event::Kind::kToken);

  s.Schedule(1, 6);  // past the running request's deadline
  events = s.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, 1u);
  EXPECT_EQ(events[0].reason, FinishReason::kDeadline);
  EXPECT_EQ(s.kv_usage(1).held, 0);
  EXPECT_FALSE(s.HasWork());
}

// Prompts from a few families that share prefixes of every length, so the prefix cache hits.
NewRequest SharingRequest(std::mt19937& rng, RequestId id, int32_t max_prompt, int32_t max_new) {
  NewRequest r = Request(id, 1 + rng() % max_prompt, 1 + rng() % max_new,
                         static_cast<Priority>(rng() % kNumPriorities));
  const int32_t family = rng() % 3;
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    r.prompt[i] = 10 + static_cast<int32_t>((i * (family + 1) + family) % 90);
  }
  if (rng() % 4 == 0) r.cache_salt = rng() % 2 ? "tenant-a" : "tenant-b";
  if (rng() % 5 == 0) r.n = 1 + static_cast<int32_t>(rng() % 4);
  static const char* const kTenants[] = {"default", "a", "b", "heavy"};
  r.tenant = kTenants[rng() % 4];
  return r;
}

// Random arrivals of mixed sizes, classes and tenants sharing prefixes, cancellations,
// deadlines, worker churn (1 to 3 workers; one dies now and then with its plans in flight, and
// its swap space with it) and scripted results with overlap, against pools down to barely
// enough for one request, with the prefix cache on (and off in every fourth round), fair share
// on or off, preemption by recompute, swap (swap spaces from none to plenty) or cost, and
// sometimes predicted-wait admission. Invariants (the scheduler's, the queue's and the
// KvCacheManager's, swap included) are checked after every operation; a fake KV arena with a
// swap space checks every position a step reads holds its own sequence's token; every request
// finishes with exactly the scripted tokens; the pools end free or cached and the swap spaces
// free.
TEST(SchedulerTest, RandomizedInvariants) {
  // Four seeds of 16 rounds each. The scheduler's hash maps iterate in an order that changes
  // from run to run, so a rare path is met in some runs only: more rounds meet it more often.
  constexpr uint32_t kSeeds[] = {1234, 9, 21, 34};
  std::mt19937 rng;
  int64_t total_ops = 0, total_preemptions = 0, total_hits = 0, total_completions = 0;
  int64_t total_copies = 0, total_swaps = 0, total_predicted_refusals = 0;
  for (int round = 0; round < 16 * std::ssize(kSeeds); ++round) {
    if (round % 16 == 0) rng.seed(kSeeds[round / 16]);
    SchedulerOptions o = Options(/*budget=*/1 + rng() % 64, /*chunk=*/1 + rng() % 32,
                                 /*in_flight=*/1 + rng() % 2);
    o.max_running = 1 + rng() % 8;
    o.aging_interval = rng() % 2 ? 50 : 0;
    o.enable_prefix_caching = round % 4 != 3;
    o.fairness = rng() % 3 == 0 ? Fairness::kNone : Fairness::kVtc;
    o.tenant_weights = {{"a", 1.0}, {"b", 2.0}, {"heavy", 0.5}};
    o.preemption_mode = static_cast<PreemptionMode>(round % 3);
    // Limits among the predicted waits of this load (steps of 10-30 ms), so that some
    // requests are refused and others admitted.
    if (round % 5 == 4) o.max_predicted_wait = 0.1 + 0.02 * (rng() % 10);
    Scheduler s(o);
    const int32_t page_size = 1 + rng() % 8;
    const int32_t max_prompt = 40, max_new = 24;
    // Barely enough for the largest request, up to a few times that.
    const int32_t min_pages = (max_prompt + max_new + page_size - 1) / page_size;
    const int32_t pages = min_pages + (round % 3 == 0 ? 0 : rng() % (2 * min_pages));
    const int num_workers = 1 + round % 3;
    // None, a few pages (swaps fall back to recompute), or room for everything.
    const int32_t swap_pages = std::vector<int32_t>{0, 3, 4 * pages}[rng() % 3];
    WorkerId next_worker = 0;
    std::map<WorkerId, std::deque<Plan>> flights;  // live workers and their plans in flight
    std::map<WorkerId, FakeArena> arenas;
    auto add_worker = [&] {
      WorkerInfo info = Worker(pages, page_size);
      info.num_swap_pages = swap_pages;
      info.swap_seconds_per_page = rng() % 2 ? 0.0 : 0.001 * (1 + rng() % 10);
      s.AddWorker(++next_worker, info);
      flights[next_worker];
      arenas.emplace(next_worker, FakeArena(pages, page_size, swap_pages));
    };
    for (int i = 0; i < num_workers; ++i) add_worker();
    std::map<RequestId, std::vector<int32_t>> tokens;
    std::map<RequestId, std::vector<int32_t>> prompts;
    std::map<RequestId, Event> finished;
    std::map<RequestId, int32_t> max_tokens;
    auto expected = [&](RequestId id, int32_t pos) {
      const std::vector<int32_t>& prompt = prompts.at(id);
      return pos < static_cast<int32_t>(prompt.size())
                 ? prompt[pos]
                 : ScriptedToken(id, pos - static_cast<int32_t>(prompt.size()));
    };
    int next_id = 1;
    auto busy = [&] {
      for (const auto& [w, f] : flights) {
        if (!f.empty()) return true;
      }
      return s.HasWork();
    };
    for (int op = 0; op < 1000 || busy(); ++op, ++total_ops) {
      ASSERT_LT(op, 200000) << "work never drains";
      const double now = op;
      const int dice = rng() % 20;
      if (op < 1000 && dice < 5) {
        NewRequest r = SharingRequest(rng, next_id, max_prompt, max_new);
        next_id += r.n;
        if (rng() % 10 == 0) r.deadline = now + rng() % 200;
        const absl::Status added = s.AddRequest(r, now);
        const bool ok = added.ok();
        if (!ok && added.GetPayload(kRetryAfterPayload)) ++total_predicted_refusals;
        for (RequestId c = r.id; c < r.id + r.n; ++c) {
          max_tokens[c] = r.max_tokens;
          prompts[c] = r.prompt;
          if (ok) tokens[c];
        }
        total_completions += r.n > 1 && ok ? r.n : 0;
      } else if (op < 1000 && dice == 5 && next_id > 1) {
        s.Finish(1 + rng() % (next_id - 1), FinishReason::kCancelled, "test", now);
      } else if (op < 1000 && dice == 6 && rng() % 20 == 0) {
        // A worker dies with its plans in flight; a fresh one replaces it.
        auto victim = std::next(flights.begin(), rng() % flights.size());
        s.RemoveWorker(victim->first);
        arenas.erase(victim->first);
        flights.erase(victim);
        add_worker();
      }
      for (auto& [w, flight] : flights) {
        while (auto plan = s.Schedule(w, now)) {
          ASSERT_LE(plan->num_tokens, o.max_batch_tokens);
          total_copies += static_cast<int64_t>(plan->page_copies.size());
          flight.push_back(std::move(*plan));
        }
      }
      auto answering = std::next(flights.begin(), rng() % flights.size());
      if (std::deque<Plan>& flight = answering->second; !flight.empty() && rng() % 3 != 0) {
        const std::string wrong = arenas.at(answering->first).Execute(flight.front(), expected);
        ASSERT_EQ(wrong, "") << "round " << round << " op " << op;
        // Step times that grow with the tokens, so the step model sees some spread.
        const StepTimes times{0.01 + 0.0001 * flight.front().num_tokens * (1 + rng() % 3),
                              0.0005 * static_cast<double>(flight.front().swap_out.size() +
                                                           flight.front().swap_in.size())};
        ASSERT_OK(s.OnResult(answering->first, flight.front().iteration, Answer(flight.front()),
                             now, times));
        flight.pop_front();
      }
      for (const Event& e : s.TakeEvents()) {
        if (e.kind == Event::Kind::kToken) {
          tokens[e.id].push_back(e.token);
        } else {
          finished[e.id] = e;
        }
      }
      ASSERT_OK(s.CheckInvariants()) << "at op " << op;
    }
    for (const auto& [id, got] : tokens) {
      ASSERT_TRUE(finished.count(id)) << "request " << id << " never finished";
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], ScriptedToken(id, static_cast<int32_t>(i))) << "request " << id;
      }
      if (finished[id].reason == FinishReason::kLength) {
        EXPECT_EQ(got.size(), static_cast<size_t>(max_tokens[id]));
      }
      EXPECT_LE(finished[id].cached_tokens, finished[id].prompt_tokens);
      EXPECT_LT(finished[id].cached_tokens, finished[id].prompt_tokens) << "last token computed";
      if (!o.enable_prefix_caching) {
        EXPECT_EQ(finished[id].cached_tokens, 0);
      }
    }
    for (const auto& [w, flight] : flights) {
      const KvUsage u = s.kv_usage(w);
      EXPECT_EQ(u.held, 0);
      EXPECT_EQ(u.free + u.parked, pages);
      if (!o.enable_prefix_caching) {
        EXPECT_EQ(u.free, pages);
      }
      EXPECT_EQ(s.kv().free_swap_slots(w), swap_pages);
    }
    if (o.preemption_mode == PreemptionMode::kRecompute || swap_pages == 0) {
      EXPECT_EQ(s.preemptions(PreemptionMode::kSwap), 0);
    }
    total_swaps += s.preemptions(PreemptionMode::kSwap);
    if (s.forced_preemptions() == 0) {
      EXPECT_LE(s.max_preempted_in_row(), o.max_preemptions_in_row);
    }
    total_preemptions += s.total_preemptions();
    total_hits += s.kv().hit_tokens();
    if (!o.enable_prefix_caching) {
      EXPECT_EQ(s.kv().hit_tokens(), 0);
    }
  }
  EXPECT_GE(total_ops, 40000);
  EXPECT_GT(total_preemptions, 0) << "the small pools must force preemptions";
  EXPECT_GT(total_hits, 0) << "shared prefixes must hit the cache";
  EXPECT_GT(total_completions, 0);
  EXPECT_GT(total_copies, 0) << "forks of partial pages must copy them";
  EXPECT_GT(total_swaps, 0) << "swap spaces must take preempted sequences";
  EXPECT_GT(total_predicted_refusals, 0) << "predicted-wait admission must refuse some";
}

// Placement rule 3 (ties): equal cost goes to the most free KV, then the lowest id; a worker the
// whole request could never fit on never gets it.
TEST(SchedulerTest, PlacementTiesGoToMostFreeKvThenLowestId) {
  Scheduler s(Options());
  s.AddWorker(1, Worker(16));
  s.AddWorker(2, Worker(32));
  s.AddWorker(3, Worker(8));  // 32 tokens: too small for request 1 (prompt 30 + 10)
  ASSERT_OK(s.AddRequest(Request(1, 30, 10), 0));
  EXPECT_FALSE(s.Schedule(1, 0).has_value()) << "worker 2 has more free KV";
  EXPECT_FALSE(s.Schedule(3, 0).has_value()) << "request 1 does not fit on worker 3";
  ASSERT_TRUE(s.Schedule(2, 0).has_value());
  Scheduler t(Options());
  t.AddWorker(1, Worker(16));
  t.AddWorker(2, Worker(16));
  ASSERT_OK(t.AddRequest(Request(1, 4, 4), 0));
  EXPECT_FALSE(t.Schedule(2, 0).has_value()) << "a tie goes to the lowest id";
  ASSERT_TRUE(t.Schedule(1, 0).has_value());
}

// Rule 2 (cost): a worker holding the prompt's prefix computes fewer tokens and wins, as long as
// its backlog plus running sequences do not outweigh what the cache saves.
TEST(SchedulerTest, PlacementPrefersTheWorkerWithTheCachedPrefix) {
  Scheduler s(Options(/*budget=*/64, /*chunk=*/64));
  s.AddWorker(2, Worker(64));
  double now = 0;
  // Request 1 runs alone on worker 2, caching its 40-token prefix.
  RunAlone(s, 2, PrefixRequest(1, 40, 4), now);
  EXPECT_GT(s.kv_usage(2).parked, 0);
  s.AddWorker(1, Worker(64));
  ASSERT_OK(s.AddRequest(PrefixRequest(2, 40, 4), now));
  EXPECT_FALSE(s.Schedule(1, now).has_value()) << "worker 2 has the prefix cached";
  auto p = s.Schedule(2, now);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->steps[0].start_pos, 40) << "the cached prefix is not recomputed";
  // Worker 2 now runs request 2 (16 tokens of decode weight): a request with nothing cached
  // anywhere goes to the idle worker 1.
  ASSERT_OK(s.AddRequest(Request(3, 8, 2), now));
  EXPECT_FALSE(s.Schedule(2, now).has_value());
  EXPECT_TRUE(s.Schedule(1, now).has_value());
}

// Rule 2 (load): the cached worker's backlog outweighs the saving, so the next sharer computes
// the prefix on the idle worker.
TEST(SchedulerTest, PlacementWeighsBacklogAgainstCachedTokens) {
  Scheduler s(Options(/*budget=*/8, /*chunk=*/8));
  s.AddWorker(2, Worker(128));
  double now = 0;
  RunAlone(s, 2, PrefixRequest(1, 16, 4), now);
  // A long prompt (a 200-token backlog) now runs on worker 2, in 8-token chunks.
  ASSERT_OK(s.AddRequest(Request(9, 200, 2), now));
  ASSERT_TRUE(s.Schedule(2, now).has_value());
  s.AddWorker(1, Worker(128));
  ASSERT_OK(s.AddRequest(PrefixRequest(2, 16, 4), now));
  EXPECT_FALSE(s.Schedule(2, now).has_value()) << "plan in flight on worker 2, and it is busy";
  auto p = s.Schedule(1, now);
  ASSERT_TRUE(p.has_value()) << "20 tokens on idle worker 1 beat 4 + ~200 backlog on worker 2";
  EXPECT_EQ(p->steps[0].seq_id, 2u);
  EXPECT_EQ(p->steps[0].start_pos, 0);
}

// Rule 1 (fits now): a cheaper worker without a free running slot loses to one that has it.
TEST(SchedulerTest, PlacementPrefersAWorkerThatFitsNow) {
  SchedulerOptions o = Options();
  o.max_running = 1;
  Scheduler s(o);
  s.AddWorker(1, Worker(64));
  s.AddWorker(2, Worker(64));
  double now = 0;
  RunAlone(s, 1, PrefixRequest(1, 32, 4), now);
  ASSERT_OK(s.AddRequest(Request(5, 4, 30), now));
  ASSERT_TRUE(s.Schedule(1, now).has_value()) << "worker 1 wins the tie; its slot is now taken";
  ASSERT_OK(s.AddRequest(PrefixRequest(2, 32, 4), now));
  EXPECT_FALSE(s.Schedule(1, now).has_value());
  auto p = s.Schedule(2, now);
  ASSERT_TRUE(p.has_value()) << "worker 1 has the prefix but no free slot";
  EXPECT_EQ(p->steps[0].seq_id, 2u);
}

// Many requests sharing a prefix, all queued at once on three workers: they spread out.
TEST(SchedulerTest, SharedPrefixRequestsDoNotPileOntoOneWorker) {
  Scheduler s(Options(/*budget=*/256, /*chunk=*/256));
  for (WorkerId w = 1; w <= 3; ++w) s.AddWorker(w, Worker(256));
  double now = 0;
  RunAlone(s, 1, PrefixRequest(100, 64, 8), now);
  for (RequestId id = 1; id <= 30; ++id) {
    ASSERT_OK(s.AddRequest(PrefixRequest(id, 64, 8), now));
  }
  std::map<WorkerId, int> placed;
  std::map<WorkerId, std::deque<Plan>> flight;
  for (int round = 0; round < 20 && s.num_waiting() > 0; ++round) {
    for (WorkerId w = 1; w <= 3; ++w) {
      if (auto p = s.Schedule(w, now)) {
        for (const PlanStep& step : p->steps) placed[w] += step.first_sight;
        flight[w].push_back(std::move(*p));
      }
    }
    for (auto& [w, f] : flight) {
      if (f.empty()) continue;
      ASSERT_OK(s.OnResult(w, f.front().iteration, Answer(f.front()), now));
      f.pop_front();
    }
    ASSERT_OK(s.CheckInvariants());
  }
  EXPECT_EQ(placed[1] + placed[2] + placed[3], 30);
  for (WorkerId w = 1; w <= 3; ++w) EXPECT_GE(placed[w], 5) << "worker " << w;
  EXPECT_GT(placed[1], placed[2]) << "the worker with the prefix cached takes more";
}

// A burst (at least one waiting request per worker): each worker takes its fair share of the
// burst in its first plan, instead of one request per plan (the one with the most free KV
// changes after every admission).
TEST(SchedulerTest, BurstIsSharedAmongWorkersInOnePlanEach) {
  Scheduler s(Options(/*budget=*/256));
  for (WorkerId w = 1; w <= 4; ++w) s.AddWorker(w, Worker(64));
  for (RequestId id = 1; id <= 16; ++id) ASSERT_OK(s.AddRequest(Request(id, 4, 4), 0));
  std::set<RequestId> admitted;
  for (WorkerId w = 1; w <= 4; ++w) {
    auto p = s.Schedule(w, 0);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->steps.size(), 4u) << "worker " << w;
    for (const PlanStep& step : p->steps) admitted.insert(step.seq_id);
  }
  EXPECT_EQ(admitted.size(), 16u);
  EXPECT_EQ(s.num_waiting(), 0u);
}

// Burst sharing respects placement by cache hits: a worker under its fair share does not take
// a burst request whose prefix another worker holds; the cache holder takes it, its fair share
// at least in one plan.
TEST(SchedulerTest, BurstSharingLeavesACachedPrefixToItsWorker) {
  Scheduler s(Options(/*budget=*/256, /*chunk=*/256));
  s.AddWorker(1, Worker(64));
  double now = 0;
  RunAlone(s, 1, PrefixRequest(100, 32, 4), now);
  s.AddWorker(2, Worker(64));
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_OK(s.AddRequest(PrefixRequest(id, 32, 4), now));
  }
  EXPECT_FALSE(s.Schedule(2, now).has_value()) << "worker 1 holds the burst's prefix";
  auto p = s.Schedule(1, now);
  ASSERT_TRUE(p.has_value());
  ASSERT_FALSE(p->steps.empty());
  EXPECT_EQ(p->steps[0].start_pos, 32) << "the cached prefix is not recomputed";
  EXPECT_GE(p->steps.size(), 2u) << "worker 1 takes at least its fair share at once";
  ASSERT_OK(s.CheckInvariants());
}

}  // namespace
}  // namespace pagoda::scheduler
