// Workload synthesis: length distributions (deterministic by seed, with the requested mean and
// bounds), prompts (BOS, no special ids, shared prefixes) and the context limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tests/support/status_assertions.h"
#include "tools/loadgen/workload.h"

namespace pagoda::loadgen {
namespace {

constexpr ModelLimits kModel{/*vocab_size=*/600, /*context_length=*/4096, /*bos=*/1, /*eos=*/2};

std::vector<int> Draw(const LengthSpec& spec, uint64_t seed, int n) {
  auto sampler = LengthSampler::Create(spec);
  EXPECT_OK(sampler);
  Rng rng(seed);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler->Sample(rng));
  return out;
}

double Mean(const std::vector<int>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

TEST(LengthTest, FixedIsAlwaysTheMean) {
  for (int n : Draw({LengthDist::kFixed, 77}, 1, 100)) EXPECT_EQ(n, 77);
}

TEST(LengthTest, UniformStaysInBoundsWithTheRequestedMean) {
  LengthSpec spec{LengthDist::kUniform, 100};
  spec.range_ratio = 0.5;
  const std::vector<int> v = Draw(spec, 3, 50000);
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), 50);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 150);
  EXPECT_NEAR(Mean(v), 100, 1.0);
}

TEST(LengthTest, UniformNeverDrawsZero) {
  LengthSpec spec{LengthDist::kUniform, 2};
  spec.range_ratio = 1;
  const std::vector<int> v = Draw(spec, 3, 1000);
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), 1);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 3);
}

TEST(LengthTest, ShareGptHasTheRequestedMeanBoundsAndALongTail) {
  for (int mean : {16, 128, 512}) {
    SCOPED_TRACE(mean);
    LengthSpec spec{LengthDist::kShareGpt, mean};
    const std::vector<int> v = Draw(spec, 11, 100000);
    EXPECT_NEAR(Mean(v), mean, 0.02 * mean);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 1);
    EXPECT_LE(*std::max_element(v.begin(), v.end()), 8 * mean);
    std::vector<int> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    // Long-tailed: the median is well below the mean and the p99 several times the mean.
    EXPECT_LT(sorted[sorted.size() / 2], 0.8 * mean);
    EXPECT_GT(sorted[sorted.size() * 99 / 100], 3.0 * mean);
  }
}

TEST(LengthTest, ShareGptHonorsExplicitBounds) {
  LengthSpec spec{LengthDist::kShareGpt, 100};
  spec.min = 20;
  spec.max = 300;
  spec.sigma = 1.5;
  const std::vector<int> v = Draw(spec, 5, 100000);
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), 20);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 300);
  EXPECT_NEAR(Mean(v), 100, 2.0);
  auto sampler = LengthSampler::Create(spec);
  EXPECT_NEAR(sampler->ExpectedMean(), 100, 1e-6);
}

TEST(LengthTest, ClampedLogNormalMeanMatchesMonteCarlo) {
  const double mu = 4.0, sigma = 1.0, lo = 10, hi = 200;
  Rng rng(9);
  double sum = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    sum += std::clamp(std::exp(mu + sigma * StandardNormal(rng)), lo, hi);
  }
  EXPECT_NEAR(ClampedLogNormalMean(mu, sigma, lo, hi), sum / n, 0.2);
}

TEST(LengthTest, SameSeedSameLengthsOtherSeedOthers) {
  const LengthSpec spec{LengthDist::kShareGpt, 64};
  EXPECT_EQ(Draw(spec, 42, 200), Draw(spec, 42, 200));
  EXPECT_NE(Draw(spec, 42, 200), Draw(spec, 43, 200));
}

TEST(LengthTest, RejectsImpossibleSpecs) {
  EXPECT_FALSE(LengthSampler::Create({LengthDist::kFixed, 0}).ok());
  LengthSpec uniform{LengthDist::kUniform, 10};
  uniform.range_ratio = 1.5;
  EXPECT_FALSE(LengthSampler::Create(uniform).ok());
  LengthSpec sharegpt{LengthDist::kShareGpt, 10};
  sharegpt.max = 10;
  EXPECT_FALSE(LengthSampler::Create(sharegpt).ok());
  EXPECT_FALSE(ParseLengthDist("zipf").ok());
  EXPECT_EQ(*ParseLengthDist("sharegpt"), LengthDist::kShareGpt);
}

TEST(RandomTest, ExponentialAndNormalMoments) {
  Rng rng(1);
  const int n = 200000;
  double e = 0, z = 0, z2 = 0;
  for (int i = 0; i < n; ++i) {
    e += Exponential(rng, 0.25);
    const double x = StandardNormal(rng);
    z += x;
    z2 += x * x;
  }
  EXPECT_NEAR(e / n, 0.25, 0.005);
  EXPECT_NEAR(z / n, 0, 0.01);
  EXPECT_NEAR(z2 / n, 1, 0.02);
}

WorkloadOptions Options(LengthDist input, LengthDist output, uint64_t seed = 0) {
  WorkloadOptions o;
  o.input = {input, 64};
  o.output = {output, 32};
  o.seed = seed;
  return o;
}

TEST(WorkloadTest, RequestsAreAPureFunctionOfSeedAndIndex) {
  auto a = Workload::Create(Options(LengthDist::kShareGpt, LengthDist::kUniform, 7), kModel);
  auto b = Workload::Create(Options(LengthDist::kShareGpt, LengthDist::kUniform, 7), kModel);
  auto c = Workload::Create(Options(LengthDist::kShareGpt, LengthDist::kUniform, 8), kModel);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  // Out of order on purpose: request 5 does not depend on requests 0..4 having been made.
  for (int i : {5, 0, 3, 100000}) {
    const RequestSpec ra = a->Make(i), rb = b->Make(i), rc = c->Make(i);
    EXPECT_EQ(ra.prompt, rb.prompt);
    EXPECT_EQ(ra.output_len, rb.output_len);
    EXPECT_EQ(ra.sampling_seed, rb.sampling_seed);
    EXPECT_NE(ra.prompt, rc.prompt);
  }
  EXPECT_NE(a->Make(1).sampling_seed, a->Make(2).sampling_seed);
}

TEST(WorkloadTest, SaltChangesPromptIdsButNotLengths) {
  auto w = Workload::Create(Options(LengthDist::kUniform, LengthDist::kUniform), kModel);
  ASSERT_OK(w);
  for (int i = 0; i < 20; ++i) {
    const RequestSpec a = w->Make(i, 0), b = w->Make(i, 1);
    EXPECT_EQ(a.prompt.size(), b.prompt.size());
    EXPECT_EQ(a.output_len, b.output_len);
    EXPECT_EQ(a.sampling_seed, b.sampling_seed);
    EXPECT_NE(a.prompt, b.prompt);
  }
}

TEST(WorkloadTest, PromptsStartWithBosAndAvoidSpecialIds) {
  auto w = Workload::Create(Options(LengthDist::kFixed, LengthDist::kFixed), kModel);
  ASSERT_OK(w);
  for (int i = 0; i < 50; ++i) {
    const RequestSpec r = w->Make(i);
    ASSERT_EQ(r.prompt.size(), 64u);
    EXPECT_EQ(r.output_len, 32);
    EXPECT_EQ(r.prompt[0], kModel.bos_token_id);
    for (size_t j = 1; j < r.prompt.size(); ++j) {
      EXPECT_GT(r.prompt[j], 0);
      EXPECT_LT(r.prompt[j], kModel.vocab_size);
      EXPECT_NE(r.prompt[j], kModel.bos_token_id);
      EXPECT_NE(r.prompt[j], kModel.eos_token_id);
    }
  }
}

TEST(WorkloadTest, SharedPrefixGroupsShareTheirPrefixOnly) {
  WorkloadOptions o = Options(LengthDist::kFixed, LengthDist::kFixed);
  o.prompts = PromptKind::kSharedPrefix;
  o.shared_prefix_len = 40;
  o.prefix_groups = 2;
  auto w = Workload::Create(o, kModel);
  ASSERT_OK(w);
  const RequestSpec r0 = w->Make(0), r1 = w->Make(1), r2 = w->Make(2);
  auto prefix = [](const RequestSpec& r) {
    return std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + 40);
  };
  EXPECT_EQ(prefix(r0), prefix(r2));  // group 0
  EXPECT_NE(prefix(r0), prefix(r1));  // group 1
  EXPECT_EQ(r0.prompt[0], kModel.bos_token_id);
  EXPECT_NE(r0.prompt, r2.prompt);  // the suffixes differ
}

TEST(WorkloadTest, SharedPrefixLeavesEachPromptOneIdOfItsOwn) {
  WorkloadOptions o = Options(LengthDist::kFixed, LengthDist::kFixed);
  o.prompts = PromptKind::kSharedPrefix;
  o.shared_prefix_len = 1000;  // longer than the prompt
  auto w = Workload::Create(o, kModel);
  ASSERT_OK(w);
  const RequestSpec a = w->Make(0), b = w->Make(1);
  ASSERT_EQ(a.prompt.size(), 64u);
  EXPECT_TRUE(std::equal(a.prompt.begin(), a.prompt.end() - 1, b.prompt.begin()));
  EXPECT_NE(a.prompt.back(), b.prompt.back());
}

TEST(WorkloadTest, LengthsFitTheContextPromptShortenedFirst) {
  const ModelLimits small{600, 100, 1, 2};
  WorkloadOptions o;
  o.input = {LengthDist::kFixed, 90};
  o.output = {LengthDist::kFixed, 40};
  auto w = Workload::Create(o, small);
  ASSERT_OK(w);
  RequestSpec r = w->Make(0);
  EXPECT_EQ(r.output_len, 40);
  EXPECT_EQ(r.prompt.size(), 60u);
  EXPECT_TRUE(r.clamped);
  o.output = {LengthDist::kFixed, 500};
  w = Workload::Create(o, small);
  r = w->Make(0);
  EXPECT_EQ(r.output_len, 99);
  EXPECT_EQ(r.prompt.size(), 1u);
}

TEST(WorkloadTest, ModelWithoutBos) {
  const ModelLimits no_bos{600, 4096, -1, -1};
  auto w = Workload::Create(Options(LengthDist::kFixed, LengthDist::kFixed), no_bos);
  ASSERT_OK(w);
  const RequestSpec r = w->Make(0);
  EXPECT_EQ(r.prompt.size(), 64u);
  for (int32_t id : r.prompt) EXPECT_GT(id, 0);
}

TEST(WorkloadTest, RejectsTinyModelsAndBadPrefixOptions) {
  EXPECT_FALSE(
      Workload::Create(Options(LengthDist::kFixed, LengthDist::kFixed), ModelLimits{3, 4096, 1, 2})
          .ok());
  WorkloadOptions o = Options(LengthDist::kFixed, LengthDist::kFixed);
  o.prompts = PromptKind::kSharedPrefix;
  o.prefix_groups = 0;
  EXPECT_FALSE(Workload::Create(o, kModel).ok());
}

}  // namespace
}  // namespace pagoda::loadgen

namespace pagoda::loadgen {
namespace {

// Multi-turn: turn t of a conversation resends turn t-1's prompt, a stand-in answer of turn
// t-1's output length, and a new user part; conversations interleave by index.
TEST(WorkloadTest, MultiTurnTurnsResendTheWholeHistory) {
  WorkloadOptions o;
  o.prompts = PromptKind::kMultiTurn;
  o.conversations = 3;
  o.turns = 4;
  o.input = {LengthDist::kUniform, 20};
  o.output = {LengthDist::kUniform, 10};
  auto w = Workload::Create(o, kModel);
  ASSERT_OK(w);
  for (int c = 0; c < 3; ++c) {
    RequestSpec prev = w->Make(c);
    EXPECT_EQ(prev.prompt[0], 1) << "BOS";
    for (int t = 1; t < 4; ++t) {
      RequestSpec turn = w->Make(c + 3 * t);
      ASSERT_GT(turn.prompt.size(), prev.prompt.size() + prev.output_len);
      EXPECT_TRUE(std::equal(prev.prompt.begin(), prev.prompt.end(), turn.prompt.begin()))
          << "conversation " << c << " turn " << t;
      prev = turn;
    }
  }
  EXPECT_NE(w->Make(0).prompt, w->Make(1).prompt) << "conversations differ";
  // After `turns` turns a fresh conversation starts.
  EXPECT_EQ(w->Make(12).prompt.size(), w->Make(12).prompt.size());
  EXPECT_NE(w->Make(12).prompt, w->Make(0).prompt);
  EXPECT_LT(w->Make(12).prompt.size(), w->Make(9).prompt.size());
  o.conversations = 0;
  EXPECT_FALSE(Workload::Create(o, kModel).ok());
  // A long conversation is cut to the context.
  o.conversations = 1;
  o.turns = 50;
  o.input = {LengthDist::kFixed, 100};
  o.output = {LengthDist::kFixed, 100};
  auto long_chat = Workload::Create(o, kModel);
  ASSERT_OK(long_chat);
  RequestSpec last = long_chat->Make(49);
  EXPECT_TRUE(last.clamped);
  EXPECT_EQ(static_cast<int>(last.prompt.size()) + last.output_len, 4096);
}

}  // namespace
}  // namespace pagoda::loadgen
