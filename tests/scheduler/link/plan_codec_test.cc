// The link's codec carries every sampling field to the worker and logprobs back.
#include "scheduler/link/plan_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace pagoda::scheduler {
namespace {

namespace wv1 = pagoda::worker::v1;

TEST(PlanCodecTest, FirstSightCarriesSamplingAndHistory) {
  Plan plan;
  plan.iteration = 7;
  PlanStep& a = plan.steps.emplace_back();
  a.seq_id = 3;
  a.start_pos = 2;
  a.tokens = {9};
  a.sample = true;
  a.first_sight = true;
  a.sampling = {.temperature = 0.5f,
                .top_k = 4,
                .top_p = 0.9f,
                .seed = 11,
                .min_p = 0.1f,
                .presence_penalty = 0.2f,
                .frequency_penalty = -0.3f,
                .repetition_penalty = 1.2f,
                .logit_bias = {{1, -2.0f}, {8, 100.0f}},
                .logprobs = true,
                .top_logprobs = 5,
                .constraint = nullptr};
  a.sampling.constraint = std::make_shared<Constraint>(
      Constraint{.grammar = "root ::= \"x\"\n", .end_token_ids = {2, 7}});
  a.prompt_tokens = 2;
  a.history = {4, 5};
  PlanStep& b = plan.steps.emplace_back();  // not first sight: no sampling, no history
  b.seq_id = 4;
  b.feed_last_sampled = true;
  b.sample = true;
  wv1::IterationPlan out;
  EncodePlan(plan, &out);
  ASSERT_EQ(out.steps_size(), 2);
  const wv1::SamplingParams& sp = out.steps(0).sampling();
  EXPECT_FLOAT_EQ(sp.min_p(), 0.1f);
  EXPECT_FLOAT_EQ(sp.presence_penalty(), 0.2f);
  EXPECT_FLOAT_EQ(sp.frequency_penalty(), -0.3f);
  EXPECT_FLOAT_EQ(sp.repetition_penalty(), 1.2f);
  ASSERT_EQ(sp.logit_bias_size(), 2);
  EXPECT_EQ(sp.logit_bias(1).token_id(), 8);
  EXPECT_FLOAT_EQ(sp.logit_bias(1).bias(), 100.0f);
  EXPECT_TRUE(sp.logprobs());
  EXPECT_EQ(sp.top_logprobs(), 5u);
  EXPECT_EQ(sp.constraint().grammar(), "root ::= \"x\"\n");
  EXPECT_EQ(std::vector<int32_t>(sp.constraint().end_token_ids().begin(),
                                 sp.constraint().end_token_ids().end()),
            (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(out.steps(0).prompt_tokens(), 2u);
  EXPECT_EQ(std::vector<int32_t>(out.steps(0).history().begin(), out.steps(0).history().end()),
            (std::vector<int32_t>{4, 5}));
  EXPECT_FALSE(out.steps(1).has_sampling());
  EXPECT_EQ(out.steps(1).history_size(), 0);
}

TEST(PlanCodecTest, ResultsCarryLogprobsOnlyWhenSet) {
  wv1::IterationResult result;
  auto* with = result.add_sampled();
  with->set_seq_id(1);
  with->set_token_id(5);
  with->set_logprob(0.0f);  // certain: still present
  auto* top = with->add_top();
  top->set_token_id(5);
  top->set_logprob(0.0f);
  auto* without = result.add_sampled();
  without->set_seq_id(2);
  without->set_token_id(6);
  const std::vector<SampledToken> got = DecodeSampled(result);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_TRUE(got[0].logprob.has_value());
  EXPECT_EQ(*got[0].logprob, (TokenLogprob{0.0f, {{5, 0.0f}}}));
  EXPECT_EQ(got[1].token, 6);
  EXPECT_FALSE(got[1].logprob.has_value());
}

// Swaps travel in their own lists, in the core's order; the worker runs them around the frees.
TEST(PlanCodecTest, SwapsCarryPagesAndSlotsInOrder) {
  Plan plan;
  plan.iteration = 9;
  plan.swap_out = {{.page = 5, .slot = 0}, {.page = 6, .slot = 1}};
  plan.free_seq_ids = {3};
  plan.swap_in = {{.page = 5, .slot = 7}};
  plan.page_copies = {{.src = 1, .dst = 2}};
  wv1::IterationPlan out;
  EncodePlan(plan, &out);
  ASSERT_EQ(out.swap_out_size(), 2);
  EXPECT_EQ(out.swap_out(0).page(), 5u);
  EXPECT_EQ(out.swap_out(0).slot(), 0u);
  EXPECT_EQ(out.swap_out(1).page(), 6u);
  EXPECT_EQ(out.swap_out(1).slot(), 1u);
  ASSERT_EQ(out.swap_in_size(), 1);
  EXPECT_EQ(out.swap_in(0).page(), 5u);
  EXPECT_EQ(out.swap_in(0).slot(), 7u);
  EXPECT_EQ(out.free_seq_ids_size(), 1);
  EXPECT_EQ(out.page_copies_size(), 1);
  wv1::IterationPlan none;
  EncodePlan(Plan{}, &none);
  EXPECT_EQ(none.swap_out_size(), 0);
  EXPECT_EQ(none.swap_in_size(), 0);
}

// forward_seconds is the forward pass plus sampling; broken values count as unmeasured (0).
TEST(PlanCodecTest, StepTimesAddSamplingToTheForwardPass) {
  wv1::IterationResult result;
  result.set_forward_seconds(0.020);
  result.set_sample_seconds(0.001);
  result.set_swap_seconds(0.004);
  StepTimes times = DecodeStepTimes(result);
  EXPECT_DOUBLE_EQ(times.forward_seconds, 0.021);
  EXPECT_DOUBLE_EQ(times.swap_seconds, 0.004);
  result.set_forward_seconds(-1);
  result.set_sample_seconds(std::nan(""));
  result.set_swap_seconds(std::numeric_limits<double>::infinity());
  times = DecodeStepTimes(result);
  EXPECT_EQ(times.forward_seconds, 0);
  EXPECT_EQ(times.swap_seconds, 0);
  EXPECT_EQ(DecodeStepTimes(wv1::IterationResult()).forward_seconds, 0);
}

}  // namespace
}  // namespace pagoda::scheduler
