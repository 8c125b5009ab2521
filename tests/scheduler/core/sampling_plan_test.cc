// What the core tells the worker for penalties and logprobs: sampling parameters on first sight
// only, and, with penalties, the prompt length and every token before the step's start.
#include <gtest/gtest.h>

#include "scheduler/core/scheduler.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

SchedulerOptions Options() {
  SchedulerOptions o;
  o.max_batch_tokens = 64;
  o.max_running = 8;
  o.max_prefill_chunk = 32;
  o.context_length = 256;
  o.eos_id = 2;
  o.max_plans_in_flight = 1;
  return o;
}

NewRequest Request(RequestId id, int32_t prompt_len, int32_t max_tokens) {
  NewRequest r;
  r.id = id;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.max_tokens = max_tokens;
  return r;
}

std::vector<SampledToken> Answer(const Plan& plan) {
  std::vector<SampledToken> out;
  for (const PlanStep& s : plan.steps) {
    if (!s.sample) continue;
    SampledToken t{s.seq_id, 100 + s.sample_index, TokenLogprob{-0.5f, {{100, -0.5f}}}};
    out.push_back(t);
  }
  return out;
}

TEST(SamplingPlanTest, ForkedCompletionsGetThePromptAsHistory) {
  Scheduler s(Options());
  s.AddWorker(1, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 1024});
  NewRequest r = Request(10, 10, 3);
  r.n = 2;
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.logit_bias = {{5, 1.0f}};
  ASSERT_OK(s.AddRequest(r, 0));
  auto p = s.Schedule(1, 0);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 1u);
  EXPECT_TRUE(p->steps[0].first_sight);
  EXPECT_EQ(p->steps[0].prompt_tokens, 10);
  EXPECT_TRUE(p->steps[0].history.empty()) << "starts at position 0";
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 1));
  p = s.Schedule(1, 1);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->steps.size(), 2u);
  EXPECT_FALSE(p->steps[0].first_sight);
  EXPECT_TRUE(p->steps[0].sampling.logit_bias.empty()) << "sampling goes on first sight only";
  const PlanStep& child = p->steps[1];
  EXPECT_TRUE(child.first_sight);
  EXPECT_EQ(child.start_pos, 9);
  EXPECT_EQ(child.prompt_tokens, 10);
  EXPECT_EQ(child.history, (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(child.sampling.logit_bias, r.sampling.logit_bias);
}

TEST(SamplingPlanTest, NoHistoryWithoutPenaltiesAndLogprobsReachTheEvents) {
  Scheduler s(Options());
  s.AddWorker(1, {.num_pages = 16, .page_size = 4, .max_batch_tokens = 1024});
  NewRequest r = Request(10, 6, 2);
  r.sampling.logit_bias = {{5, 1.0f}};
  r.sampling.logprobs = true;
  ASSERT_OK(s.AddRequest(r, 0));
  auto p = s.Schedule(1, 0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->steps[0].prompt_tokens, 0);
  EXPECT_TRUE(p->steps[0].history.empty());
  EXPECT_TRUE(p->steps[0].sampling.logprobs);
  ASSERT_OK(s.OnResult(1, p->iteration, Answer(*p), 1));
  std::vector<Event> events = s.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].logprob.has_value());
  EXPECT_EQ(*events[0].logprob, (TokenLogprob{-0.5f, {{100, -0.5f}}}));
}

}  // namespace
}  // namespace pagoda::scheduler
