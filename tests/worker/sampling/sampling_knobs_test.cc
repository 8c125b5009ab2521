// The sampling surface beyond temperature/top-k/top-p, against a straightforward reference
// written here: logit_bias and penalties (TokenHistory + ApplyAdjustments), min-p, the order
// of operations, determinism by seed, and logprobs (sums, ordering, temperature, greedy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tests/support/status_assertions.h"
#include "worker/sampling/logit_adjustment.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/token_history.h"

namespace pagoda::worker {
namespace {

// The reference: every step spelled out, in the documented order, in double.
struct Reference {
  std::map<int32_t, float> bias;
  std::vector<int32_t> prompt, generated;
  float presence = 0, frequency = 0, repetition = 1;
  float temperature = 1;
  int top_k = 0;
  float top_p = 1, min_p = 0;

  std::vector<double> Adjusted(const std::vector<float>& logits) const {
    std::vector<double> l(logits.begin(), logits.end());
    for (const auto& [t, b] : bias) l[t] += b;
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(generated.begin(), generated.end());
    for (int32_t t : seen) l[t] = l[t] > 0 ? l[t] / repetition : l[t] * repetition;
    std::map<int32_t, int> count;
    for (int32_t t : generated) ++count[t];
    for (const auto& [t, c] : count) l[t] -= frequency * c + presence;
    return l;
  }
  // Probability of each token after truncation (0 outside the kept set).
  std::vector<double> Kept(const std::vector<float>& logits) const {
    const std::vector<double> l = Adjusted(logits);
    const double m = *std::max_element(l.begin(), l.end());
    std::vector<double> p(l.size());
    for (size_t i = 0; i < l.size(); ++i) p[i] = std::exp((l[i] - m) / temperature);
    std::vector<int> order(l.size());
    for (size_t i = 0; i < l.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    size_t keep = top_k > 0 ? std::min<size_t>(top_k, l.size()) : l.size();
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[order[i]];
    if (top_p > 0 && top_p < 1) {
      double mass = 0;
      size_t n = 0;
      while (n < keep && mass < top_p * total) mass += p[order[n++]];
      keep = n;
    }
    size_t n = 1;
    while (n < keep && p[order[n]] >= min_p * p[order[0]]) ++n;
    keep = n;
    std::vector<double> kept(l.size(), 0.0);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[order[i]];
    for (size_t i = 0; i < keep; ++i) kept[order[i]] = p[order[i]] / sum;
    return kept;
  }
};

// What the worker does: history from prompt + generated, adjustments, then Sample.
struct Worker {
  SamplingParams params;
  std::vector<std::pair<int32_t, float>> bias;

  std::vector<float> Adjusted(const Reference& ref, std::vector<float> logits) {
    TokenHistory history(static_cast<int32_t>(ref.prompt.size()), params.has_penalties());
    EXPECT_OK(history.Record(0, ref.prompt));
    EXPECT_OK(history.Record(static_cast<int32_t>(ref.prompt.size()), ref.generated));
    std::vector<LogitAdjustment> adj;
    history.Adjustments(params, bias, &adj);
    std::set<int32_t> tokens;
    for (const LogitAdjustment& a : adj) EXPECT_TRUE(tokens.insert(a.token).second) << a.token;
    ApplyAdjustments(logits, adj);
    return logits;
  }
};

Worker WorkerFor(const Reference& ref) {
  Worker w;
  w.params.temperature = ref.temperature;
  w.params.top_k = ref.top_k;
  w.params.top_p = ref.top_p;
  w.params.min_p = ref.min_p;
  w.params.presence_penalty = ref.presence;
  w.params.frequency_penalty = ref.frequency;
  w.params.repetition_penalty = ref.repetition;
  for (const auto& [t, b] : ref.bias) w.bias.emplace_back(t, b);
  return w;
}

std::vector<float> RandomLogits(std::mt19937& rng, int n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Draws `n` tokens and compares frequencies with the reference's kept distribution.
void CheckDraws(const Reference& ref, const std::vector<float>& logits, int n) {
  Worker w = WorkerFor(ref);
  const std::vector<float> adjusted = w.Adjusted(ref, logits);
  const std::vector<double> kept = ref.Kept(logits);
  std::vector<double> freq(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    w.params.seed = 77;
    freq[Sample(adjusted, w.params, static_cast<uint64_t>(i))] += 1.0 / n;
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kept[i] == 0) {
      EXPECT_EQ(freq[i], 0) << "token " << i << " is outside the kept set";
    } else {
      EXPECT_NEAR(freq[i], kept[i], 5 * std::sqrt(kept[i] * (1 - kept[i]) / n) + 2.0 / n)
          << "token " << i;
    }
  }
}

TEST(SamplingKnobs, AdjustmentsMatchTheReferenceExactly) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = RandomLogits(rng, 64, 3.0f);
    Reference ref;
    std::uniform_int_distribution<int> any(0, 63);
    for (int i = 0; i < 10; ++i) ref.prompt.push_back(any(rng));
    for (int i = 0; i < 12; ++i) ref.generated.push_back(any(rng) % 16);  // repeats
    for (int i = 0; i < 5; ++i) ref.bias[any(rng)] = static_cast<float>(any(rng) - 32);
    ref.presence = trial % 3 == 0 ? 0.0f : 0.5f;
    ref.frequency = trial % 2 ? 0.0f : -0.75f;
    ref.repetition = trial % 5 == 0 ? 1.0f : 1.3f;
    const std::vector<float> got = WorkerFor(ref).Adjusted(ref, logits);
    const std::vector<double> want = ref.Adjusted(logits);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "trial " << trial << " " << i;
    }
  }
}

TEST(SamplingKnobs, OrderIsBiasThenRepetitionThenFrequencyAndPresence) {
  // Token 0: logit 1, bias -2 -> -1 (negative), repetition 2 -> -2 (multiplied), generated
  // twice: frequency 0.5 * 2 + presence 0.25 -> -3.25. Bias after the penalty would give -1.5.
  Reference ref;
  ref.bias[0] = -2;
  ref.generated = {0, 0};
  ref.repetition = 2;
  ref.frequency = 0.5f;
  ref.presence = 0.25f;
  const std::vector<float> got = WorkerFor(ref).Adjusted(ref, {1.0f, 0.0f});
  EXPECT_FLOAT_EQ(got[0], -3.25f);
  EXPECT_FLOAT_EQ(got[1], 0.0f);
}

TEST(SamplingKnobs, PresenceAndFrequencySeeOnlyGeneratedTokensRepetitionSeesBoth) {
  Reference ref;
  ref.prompt = {1, 2};
  ref.generated = {2, 3, 3};
  ref.presence = 1;
  ref.frequency = 0.5f;
  const std::vector<float> logits = {2, 2, 2, 2, -2};
  std::vector<float> got = WorkerFor(ref).Adjusted(ref, logits);
  EXPECT_EQ(got, (std::vector<float>{2, 2, 0.5f, 0, -2}));  // 2: once, 3: twice
  ref.presence = ref.frequency = 0;
  ref.repetition = 4;
  got = WorkerFor(ref).Adjusted(ref, logits);
  EXPECT_EQ(got, (std::vector<float>{2, 0.5f, 0.5f, 0.5f, -2}));  // 4 never occurred
}

TEST(SamplingKnobs, GreedyAppliesBiasAndPenalties) {
  const std::vector<float> logits = {0.5f, 3.0f, 1.0f};
  Reference ref;
  ref.temperature = 0;
  ref.bias[2] = 100;  // forces token 2
  Worker w = WorkerFor(ref);
  EXPECT_EQ(Sample(w.Adjusted(ref, logits), w.params, 0), 2);
  ref.bias.clear();
  ref.generated = {1};
  ref.presence = 2;
  ref.frequency = 1;  // 3 - 3 = 0 < 0.5 and 1
  w = WorkerFor(ref);
  EXPECT_EQ(Sample(w.Adjusted(ref, logits), w.params, 0), 2);
}

TEST(SamplingKnobs, MinPKeepsTokensAboveTheFractionOfTheTop) {
  // Probabilities (T = 1) proportional to e^l: the top has 1, the others e^-0.5, e^-1, e^-3.
  const std::vector<float> logits = {3.0f, 2.5f, 2.0f, 0.0f};
  Reference ref;
  ref.min_p = 0.5f;  // keeps e^-0.5 = .61, drops e^-1 = .37
  CheckDraws(ref, logits, 4000);
  std::set<int32_t> seen;
  Worker w = WorkerFor(ref);
  for (uint64_t i = 0; i < 500; ++i) seen.insert(Sample(logits, w.params, i));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(SamplingKnobs, EveryKnobTogetherFollowsTheReferenceDistribution) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<float> logits = RandomLogits(rng, 24, 1.5f);
    Reference ref;
    ref.prompt = {1, 5, 7};
    ref.generated = {3, 3, 9};
    ref.bias[4] = 2.5f;
    ref.bias[5] = -1;
    ref.repetition = 1.2f;
    ref.frequency = 0.3f;
    ref.presence = 0.2f;
    ref.temperature = 0.8f + 0.3f * trial;
    ref.top_k = trial % 2 ? 12 : 0;
    ref.top_p = trial >= 2 ? 0.9f : 1.0f;
    ref.min_p = 0.05f * trial;
    SCOPED_TRACE(trial);
    CheckDraws(ref, logits, 6000);
  }
}

TEST(SamplingKnobs, SameSeedSameTokensDifferentSeedDifferent) {
  std::mt19937 rng(3);
  const std::vector<float> logits = RandomLogits(rng, 100, 2.0f);
  SamplingParams p{.temperature = 1.0f, .top_k = 40, .top_p = 0.95f, .seed = 5, .min_p = 0.01f};
  SamplingParams q = p;
  q.seed = 6;
  int differ = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(Sample(logits, p, i), Sample(logits, p, i));
    differ += Sample(logits, p, i) != Sample(logits, q, i);
  }
  EXPECT_GT(differ, 50);
}

TEST(SamplingKnobs, TokenHistoryRecordsPositionsInOrder) {
  TokenHistory h(3, true);
  EXPECT_OK(h.Record(0, std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(h.Record(3, std::vector<int32_t>{4}).ok());  // position 2 skipped
  EXPECT_FALSE(h.Record(1, std::vector<int32_t>{4}).ok());  // position 1 twice
  EXPECT_OK(h.Record(2, std::vector<int32_t>{3, 4}));
  EXPECT_EQ(h.next_position(), 4);
}

// Reference logprobs: log_softmax(adjusted / T), T = 1 when greedy.
std::vector<double> RefLogprobs(const std::vector<float>& l, float temperature) {
  const double t = temperature > 0 ? temperature : 1;
  const double m = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (float x : l) z += std::exp((x - m) / t);
  std::vector<double> out;
  for (float x : l) out.push_back((x - m) / t - std::log(z));
  return out;
}

TEST(SamplingKnobs, LogprobsAreTheLogSoftmaxAtTemperature) {
  std::mt19937 rng(4);
  for (float temperature : {0.0f, 0.5f, 1.0f, 2.0f}) {
    const std::vector<float> logits = RandomLogits(rng, 1000, 3.0f);
    const std::vector<double> want = RefLogprobs(logits, temperature);
    SamplingParams p{.temperature = temperature, .seed = 9};
    p.top_logprobs = kMaxTopLogprobs;
    const int32_t token = Sample(logits, p, 3);
    SampledLogprobs got;
    ComputeLogprobs(logits, temperature, token, p.top_logprobs, &got);
    EXPECT_NEAR(got.logprob, want[token], 1e-5);
    ASSERT_EQ(got.num_top, kMaxTopLogprobs);
    std::vector<int> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return want[a] > want[b]; });
    for (int k = 0; k < got.num_top; ++k) {
      EXPECT_EQ(got.top_ids[k], order[k]) << "rank " << k;
      EXPECT_NEAR(got.top_logprobs[k], want[order[k]], 1e-5);
      if (k > 0) {
        EXPECT_LE(got.top_logprobs[k], got.top_logprobs[k - 1]);
      }
    }
    if (temperature == 0) {  // greedy: the top entry
      EXPECT_EQ(token, order[0]);
    }
  }
}

TEST(SamplingKnobs, LogprobsOfTheWholeVocabularySumToOneTiesByLowerId) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, -1.0f, 2.0f, 0.0f};
  SampledLogprobs got;
  ComputeLogprobs(logits, 0.7f, 3, 20, &got);
  ASSERT_EQ(got.num_top, 6);  // clamped to the vocabulary
  double sum = 0;
  for (int k = 0; k < got.num_top; ++k) sum += std::exp(got.top_logprobs[k]);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(std::vector<int32_t>(got.top_ids.begin(), got.top_ids.begin() + 6),
            (std::vector<int32_t>{1, 2, 4, 0, 5, 3}));
  EXPECT_EQ(got.top_logprobs[5], got.logprob);  // token 3 ranks last
  ComputeLogprobs(logits, 1.0f, 1, 0, &got);
  EXPECT_EQ(got.num_top, 0);
}

}  // namespace
}  // namespace pagoda::worker
