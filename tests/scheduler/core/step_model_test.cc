// StepModel: the fit of step times, and its guards against extrapolation.
#include "scheduler/core/step_model.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda::scheduler {
namespace {

TEST(StepModelTest, RecoversALinearCostModel) {
  StepModel m;
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    const double tokens = 1 + rng() % 512, work = (rng() % 1000) / 10.0;
    m.Observe(tokens, work, 0.005 + 2e-5 * tokens + 1e-4 * work);
  }
  const std::array<double, 3> c = m.coefficients();
  EXPECT_NEAR(c[0], 0.005, 1e-4);
  EXPECT_NEAR(c[1], 2e-5, 1e-6);
  EXPECT_NEAR(c[2], 1e-4, 1e-5);
  EXPECT_NEAR(m.StepSeconds(256, 50), 0.005 + 2e-5 * 256 + 1e-4 * 50, 1e-4);
}

TEST(StepModelTest, AFixedStepTimeGivesNoSlopes) {
  StepModel m;
  for (int i = 0; i < 100; ++i) m.Observe(i % 2 ? 4 : 32, i % 3 ? 0.1 : 0.25, 0.02);
  const std::array<double, 3> c = m.coefficients();
  EXPECT_NEAR(c[0], 0.02, 1e-6);
  EXPECT_NEAR(m.StepSeconds(8, 0.05), 0.02, 1e-6);
  EXPECT_NEAR(m.StepSeconds(32, 0.25), 0.02, 1e-6);
}

TEST(StepModelTest, FewStepsPredictTheMeanAndLargeStepsScaleFromTheLargestSeen) {
  StepModel m;
  EXPECT_FALSE(m.has_steps());
  m.Observe(10, 1, 0.01);
  m.Observe(20, 1, 0.03);
  EXPECT_NEAR(m.StepSeconds(1000, 100), 0.02, 1e-3) << "the (decayed) mean until kMinFitSteps";
  for (int i = 0; i < 100; ++i) m.Observe(10 + i % 11, 1, 0.001 * (10 + i % 11));
  // Seen up to 20 tokens at 1 ms a token: 40 tokens are predicted as twice the largest.
  EXPECT_NEAR(m.StepSeconds(40, 1), 2 * m.StepSeconds(20, 1), 1e-9);
}

TEST(StepModelTest, SwapSecondsStartFromThePriorAndFollowTheObservations) {
  StepModel m;
  EXPECT_EQ(m.swap_seconds_per_page(), 0);
  m.SetSwapPrior(1e-4);
  EXPECT_DOUBLE_EQ(m.swap_seconds_per_page(), 1e-4);
  for (int i = 0; i < 200; ++i) m.ObserveSwap(10, 10 * 2e-5);
  EXPECT_NEAR(m.swap_seconds_per_page(), 2e-5, 1e-6);
}

}  // namespace
}  // namespace pagoda::scheduler
