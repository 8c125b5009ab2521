#include "worker/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 1.5f};

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  EXPECT_EQ(Sample(kLogits, {}, 0), 1);
  EXPECT_EQ(Sample(kLogits, {.temperature = -1}, 5), 1);
  const std::vector<float> one = {3.0f};
  EXPECT_EQ(Sample(one, {.temperature = 1}, 0), 0);
}

TEST(Sampler, GreedySkipsNanLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> first_nan = {nan, 1.0f, 3.0f, nan, 2.0f};
  EXPECT_EQ(Sample(first_nan, SamplingParams{}, 0), 2);
  const std::vector<float> all_nan = {nan, nan, nan};
  EXPECT_EQ(Sample(all_nan, SamplingParams{}, 0), 0);
}

// Constrained decoding: masked-out ids (and ids past the mask) can never be drawn, greedy or
// sampled, and the logprobs are those of the masked distribution.
TEST(Sampler, MaskedTokensAreNeverDrawn) {
  std::vector<float> logits(70);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 11) * 0.3f;
  std::vector<uint32_t> allowed = {0, 0};  // 64 ids; 64..69 lie past the mask
  for (int id : {3, 17, 40, 63}) allowed[id / 32] |= 1u << (id % 32);
  ApplyMask(logits, allowed);
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool on = i == 3 || i == 17 || i == 40 || i == 63;
    EXPECT_EQ(std::isinf(logits[i]) && logits[i] < 0, !on) << i;
  }
  std::set<int32_t> drawn;
  for (uint64_t index = 0; index < 400; ++index) {
    drawn.insert(Sample(logits, {.temperature = 1.5f, .seed = 5}, index));
  }
  EXPECT_EQ(drawn, (std::set<int32_t>{3, 17, 40, 63}));
  SampledLogprobs lp;
  ComputeLogprobs(logits, 1.0f, 17, 4, &lp);
  double mass = 0;
  for (int k = 0; k < lp.num_top; ++k) mass += std::exp(lp.top_logprobs[k]);
  EXPECT_NEAR(mass, 1.0, 1e-6);  // the four allowed ids hold all of it
  std::vector<float> untouched = {1.0f, 2.0f};
  ApplyMask(untouched, {});
  EXPECT_EQ(untouched, (std::vector<float>{1.0f, 2.0f}));
}

// A masked (-inf) or NaN token takes no part in a draw: over a random mask on a random
// vocabulary, every kind of draw returns the token it returns on the vocabulary without the
// masked ids (renumbered in order). Some logits sit far below the rest, so that their
// probabilities underflow to zero at the lower temperatures.
TEST(Sampler, MaskedTokensChangeNoDrawAmongTheOthers) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<SamplingParams> kinds = {
      {.temperature = 1.0f},
      {.temperature = 0.05f},
      {.temperature = 0.7f, .top_k = 40},
      {.temperature = 1.0f, .top_p = 0.9f},
      {.temperature = 1.2f, .min_p = 0.05f},
      {.temperature = 0.8f, .top_k = 20, .top_p = 0.8f},
      {.temperature = 1.0f, .top_k = 5000},  // more than the vocabulary: no cut
  };
  for (int round = 0; round < 20; ++round) {
    std::vector<float> full(1000);
    std::vector<float> kept;
    std::vector<int32_t> id_of;  // kept index -> full id
    for (size_t i = 0; i < full.size(); ++i) {
      full[i] = normal(rng) - (rng() % 8 == 0 ? 150.0f : 0.0f);
      switch (rng() % 5) {
        case 0:
        case 1:
        case 2:
          full[i] = -std::numeric_limits<float>::infinity();
          break;
        case 3:
          if (rng() % 4 == 0) full[i] = nan;
          break;
      }
      if (full[i] > -std::numeric_limits<float>::infinity()) {
        kept.push_back(full[i]);
        id_of.push_back(static_cast<int32_t>(i));
      }
    }
    ASSERT_GT(kept.size(), 100u);  // more than every top_k below the vocabulary's size
    for (SamplingParams p : kinds) {
      for (uint64_t index = 0; index < 25; ++index) {
        p.seed = static_cast<uint64_t>(round);
        const int32_t drawn = Sample(full, p, index);
        EXPECT_EQ(drawn, id_of[static_cast<size_t>(Sample(kept, p, index))])
            << "round " << round << " temperature " << p.temperature << " top_k " << p.top_k
            << " top_p " << p.top_p << " min_p " << p.min_p << " index " << index;
      }
    }
  }
}

TEST(Sampler, SameSeedAndIndexSameToken) {
  for (uint64_t i = 0; i < 100; ++i) {
    SamplingParams p{.temperature = 1.0f, .seed = 42};
    EXPECT_EQ(Sample(kLogits, p, i), Sample(kLogits, p, i));
  }
}

TEST(Sampler, DifferentSeedsDiffer) {
  int differ = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    differ += Sample(kLogits, {.temperature = 1.0f, .seed = 1}, i) !=
              Sample(kLogits, {.temperature = 1.0f, .seed = 2}, i);
  }
  EXPECT_GT(differ, 50);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(Sample(kLogits, {.temperature = 5.0f, .top_k = 1, .seed = i}, i), 1);
    EXPECT_EQ(Sample(kLogits, {.temperature = 5.0f, .top_p = 1e-6f, .seed = i}, i), 1);
  }
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  std::set<int32_t> seen_k, seen_p;
  for (uint64_t i = 0; i < 2000; ++i) {
    seen_k.insert(Sample(kLogits, {.temperature = 1.0f, .top_k = 3, .seed = 3}, i));
    // probs (T=1) ~ .09 .34 .12 .34 .02 .20: top_p 0.7 keeps ids 1, 3 and 5.
    seen_p.insert(Sample(kLogits, {.temperature = 1.0f, .top_p = 0.7f, .seed = 3}, i));
  }
  EXPECT_EQ(seen_k, (std::set<int32_t>{1, 3, 5}));
  EXPECT_EQ(seen_p, (std::set<int32_t>{1, 3, 5}));
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const int n = 20000;
  std::vector<int> counts(kLogits.size(), 0);
  for (uint64_t i = 0; i < n; ++i) ++counts[Sample(kLogits, {.temperature = 1.0f, .seed = 9}, i)];
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double p = std::exp(kLogits[i]) / z;
    EXPECT_NEAR(static_cast<double>(counts[i]) / n, p, 0.015) << "token " << i;
  }
}

TEST(Sampler, CounterUniformInRange) {
  for (uint64_t i = 0; i < 1000; ++i) {
    const double u = CounterUniform(7, i);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_NE(CounterUniform(7, 1), CounterUniform(8, 1));
  EXPECT_NE(CounterUniform(7, 1), CounterUniform(7, 2));
}

}  // namespace
}  // namespace pagoda::worker
