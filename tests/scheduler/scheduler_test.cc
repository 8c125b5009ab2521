#include "scheduler/core/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace pagoda::scheduler {
namespace {

constexpr int32_t kEos = 2;

SchedulerOptions Options(int32_t budget = 64, int32_t chunk = 32) {
  SchedulerOptions o;
  o.max_batch_tokens = budget;
  o.max_running = 8;
  o.max_prefill_chunk = chunk;
  o.context_length = 256;
  o.eos_id = kEos;
  return o;
}

NewRequest Request(RequestId id, int32_t prompt_len, int32_t max_tokens) {
  NewRequest r;
  r.id = id;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.max_tokens = max_tokens;
  return r;
}

// Answers a plan the way a worker would: token `100 + sample_index` for every sampling step.
std::vector<SampledToken> Answer(const Plan& plan) {
  std::vector<SampledToken> out;
  for (const PlanStep& s : plan.steps) {
    if (s.sample) out.push_back({s.seq_id, 100 + s.sample_index});
  }
  return out;
}

TEST(SchedulerTest, RejectsWhatCanNeverFit) {
  Scheduler s(Options());
  EXPECT_EQ(s.AddRequest(Request(1, 0, 4), 0).code(), absl::StatusCode::kInvalidArgument);
  absl::Status st = s.AddRequest(Request(2, 200, 100), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("context of 256"), std::string::npos) << st;
  s.AddWorker(1, {.num_pages = 4, .page_size = 4, .max_batch_tokens = 64});
  st = s.AddRequest(Request(3, 20, 10), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("largest: 16 tokens"), std::string::npos) << st;
}

TEST(SchedulerTest, ChunkedPrefillThenDecodeToLength) {
  Scheduler s(Options(/*budget=*/16, /*chunk=*/8));
  s.AddWorker(1, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 64});
  ASSERT_TRUE(s.AddRequest(Request(7, 20, 3), 0).ok());
  std::vector<int32_t> chunks;
  std::vector<int32_t> tokens;
  bool finished = false;
  for (int iter = 0; iter < 20 && !finished; ++iter) {
    auto plan = s.Schedule(1, iter);
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->steps.size(), 1u);
    const PlanStep& step = plan->steps[0];
    EXPECT_EQ(step.first_sight, iter == 0);
    chunks.push_back(static_cast<int32_t>(step.tokens.size()));
    ASSERT_TRUE(s.OnResult(1, plan->iteration, Answer(*plan), iter).ok());
    for (const Event& e : s.TakeEvents()) {
      if (e.kind == Event::Kind::kToken) tokens.push_back(e.token);
      if (e.kind == Event::Kind::kFinished) {
        finished = true;
        EXPECT_EQ(e.reason, FinishReason::kLength);
        EXPECT_EQ(e.completion_tokens, 3);
      }
    }
    ASSERT_TRUE(s.CheckInvariants().ok()) << s.CheckInvariants();
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(chunks, (std::vector<int32_t>{8, 8, 4, 1, 1}));
  EXPECT_EQ(tokens, (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(s.pool(1)->num_free(), 16);
  // The worker is told to forget the sequence in the next plan.
  ASSERT_TRUE(s.AddRequest(Request(8, 2, 1), 30).ok());
  auto plan = s.Schedule(1, 30);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->free_seq_ids, (std::vector<RequestId>{7}));
}

TEST(SchedulerTest, EosAndStopTokensFinishWithTheirReason) {
  Scheduler s(Options());
  s.AddWorker(1, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 64});
  NewRequest a = Request(1, 3, 10);
  NewRequest b = Request(2, 3, 10);
  b.stop_token_ids = {77};
  ASSERT_TRUE(s.AddRequest(a, 0).ok());
  ASSERT_TRUE(s.AddRequest(b, 0).ok());
  auto plan = s.Schedule(1, 0);
  ASSERT_EQ(plan->steps.size(), 2u);
  ASSERT_TRUE(s.OnResult(1, plan->iteration, {{1, kEos}, {2, 77}}, 1).ok());
  std::map<RequestId, FinishReason> reasons;
  for (const Event& e : s.TakeEvents()) {
    EXPECT_EQ(e.kind, Event::Kind::kFinished) << "EOS and stop tokens are not streamed";
    reasons[e.id] = e.reason;
  }
  EXPECT_EQ(reasons[1], FinishReason::kEos);
  EXPECT_EQ(reasons[2], FinishReason::kStop);
  EXPECT_FALSE(s.HasWork());
}

TEST(SchedulerTest, CancelFreesPagesEvenWithPlanInFlight) {
  Scheduler s(Options());
  s.AddWorker(1, {.num_pages = 8, .page_size = 4, .max_batch_tokens = 64});
  ASSERT_TRUE(s.AddRequest(Request(1, 10, 10), 0).ok());
  auto plan = s.Schedule(1, 0);
  ASSERT_TRUE(plan.has_value());
  s.Cancel(1, 0.5);
  EXPECT_EQ(s.pool(1)->num_free(), 8);
  auto events = s.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, FinishReason::kCancelled);
  ASSERT_TRUE(s.OnResult(1, plan->iteration, Answer(*plan), 1).ok());
  EXPECT_TRUE(s.TakeEvents().empty());
  auto next = s.Schedule(1, 1);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->free_seq_ids, (std::vector<RequestId>{1}));
  EXPECT_TRUE(next->steps.empty());
}

TEST(SchedulerTest, WorkerLossRequeuesAndResumesByRecompute) {
  Scheduler s(Options());
  s.AddWorker(1, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 64});
  ASSERT_TRUE(s.AddRequest(Request(1, 5, 4), 0).ok());
  for (int i = 0; i < 2; ++i) {
    auto plan = s.Schedule(1, i);
    ASSERT_TRUE(s.OnResult(1, plan->iteration, Answer(*plan), i).ok());
  }
  s.RemoveWorker(1);
  EXPECT_EQ(s.num_waiting(), 1u);
  s.AddWorker(2, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 64});
  auto plan = s.Schedule(2, 3);
  ASSERT_EQ(plan->steps.size(), 1u);
  // Prompt (5) + two generated tokens, all recomputed; the next sample is index 2.
  EXPECT_EQ(plan->steps[0].tokens.size(), 7u);
  EXPECT_TRUE(plan->steps[0].first_sight);
  EXPECT_EQ(plan->steps[0].sample_index, 2);
}

// Random arrivals, cancellations and worker churn against scripted results; invariants are
// checked after every operation and everything must finish with the pools free.
TEST(SchedulerTest, RandomizedInvariants) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    SchedulerOptions o = Options(/*budget=*/1 + rng() % 64, /*chunk=*/1 + rng() % 32);
    o.max_running = 1 + rng() % 8;
    Scheduler s(o);
    const int32_t page_size = 1 + rng() % 8;
    const int32_t pages = 64 / page_size + 1 + rng() % 32;
    s.AddWorker(1, {.num_pages = pages, .page_size = page_size, .max_batch_tokens = 64});
    int next_id = 1;
    int submitted = 0;
    int finished = 0;
    for (int op = 0; op < 1000 || s.HasWork(); ++op) {
      ASSERT_LT(op, 100000) << "work never drains";
      const int dice = rng() % 10;
      if (op < 1000 && dice < 3) {
        absl::Status st = s.AddRequest(Request(next_id++, 1 + rng() % 40, 1 + rng() % 24), op);
        submitted += st.ok();
      } else if (op < 1000 && dice == 3 && next_id > 1) {
        s.Cancel(1 + rng() % (next_id - 1), op);
      }
      if (auto plan = s.Schedule(1, op)) {
        ASSERT_LE(plan->num_tokens, o.max_batch_tokens);
        ASSERT_TRUE(s.OnResult(1, plan->iteration, Answer(*plan), op).ok());
      }
      for (const Event& e : s.TakeEvents()) finished += e.kind == Event::Kind::kFinished;
      ASSERT_TRUE(s.CheckInvariants().ok()) << s.CheckInvariants();
    }
    EXPECT_EQ(finished, submitted);
    EXPECT_EQ(s.pool(1)->num_free(), pages);
    EXPECT_EQ(s.pool(1)->reserved(), 0);
  }
}

}  // namespace
}  // namespace pagoda::scheduler
