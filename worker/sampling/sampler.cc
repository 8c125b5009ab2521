#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

namespace pagoda::worker {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The first largest logit; NaN ranks below everything (0 when every logit is NaN).
int32_t Argmax(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return std::max(best, 0);
}

// The largest logit, NaN skipped (-inf when all are NaN). Eight running maxima, which the
// compiler keeps in one vector register, instead of one chain through 150k logits: a maximum
// does not depend on the order it is taken in (+0 and -0 may trade places, which no caller
// can see: both subtract the same from every logit).
float MaxLogit(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  float lanes[kLanes];
  std::fill(std::begin(lanes), std::end(lanes), -INFINITY);
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      lanes[j] = logits[i + j] > lanes[j] ? logits[i + j] : lanes[j];
    }
  }
  float max = -INFINITY;
  for (; i < logits.size(); ++i) max = logits[i] > max ? logits[i] : max;
  for (float l : lanes) max = l > max ? l : max;
  return max;
}

struct Candidate {
  float prob;
  int32_t id;
};

// Orders by probability descending, then id ascending (a strict, deterministic order).
bool Before(const Candidate& a, const Candidate& b) {
  return a.prob != b.prob ? a.prob > b.prob : a.id < b.id;
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t index) {
  const uint64_t bits =
      Mix64(Mix64(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

int32_t Sample(std::span<const float> logits, const SamplingParams& p, uint64_t sample_index) {
  if (logits.empty()) return 0;
  if (!(p.temperature > 0) || p.top_k == 1) return Argmax(logits);
  // Softmax with temperature, computed in double for a stable, order-independent cut-off.
  const float max_logit = MaxLogit(logits);
  if (!std::isfinite(max_logit)) return Argmax(logits);
  // Only tokens of non-zero probability are candidates. A masked (-inf) or NaN logit, or one
  // whose exp underflows, adds zero to every sum below, sorts after every other token and is
  // never drawn, so leaving it out changes no result; and a grammar mask that allows a few
  // hundred of a 150k vocabulary then costs a few hundred exps, not 150k.
  std::vector<Candidate> cands;
  cands.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!(l > -INFINITY)) continue;  // -inf or NaN
    const float prob = std::exp((l - max_logit) / p.temperature);
    if (prob > 0) cands.push_back({prob, static_cast<int32_t>(i)});
  }
  size_t keep = cands.size();
  const bool nucleus = p.top_p > 0 && p.top_p < 1;
  const bool min_p = p.min_p > 0;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < logits.size()) {
    // Sorted even when no more than top_k tokens are left: the draw walks them by probability.
    keep = std::min(keep, static_cast<size_t>(p.top_k));
    std::partial_sort(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep), cands.end(),
                      Before);
  } else if (nucleus || min_p) {
    std::sort(cands.begin(), cands.end(), Before);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += cands[i].prob;
  if (nucleus) {
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < p.top_p * total) mass += cands[n++].prob;
    keep = std::max<size_t>(n, 1);
    total = mass > 0 ? mass : cands[0].prob;
  }
  if (min_p) {
    // cands[0] is the most probable token, p = 1 exactly: the floor is min_p itself.
    size_t n = 1;
    double mass = cands[0].prob;
    while (n < keep && cands[n].prob >= p.min_p * cands[0].prob) mass += cands[n++].prob;
    keep = n;
    total = mass;
  }
  const double target = CounterUniform(p.seed, sample_index) * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += cands[i].prob;
    if (target < acc) return cands[i].id;
  }
  // Rounding left target at the very top: return the last candidate with non-zero mass.
  for (size_t i = keep; i-- > 0;) {
    if (cands[i].prob > 0) return cands[i].id;
  }
  return cands[0].id;
}

void ApplyMask(std::span<float> logits, std::span<const uint32_t> allowed) {
  if (allowed.empty()) return;
  const size_t n = std::min(logits.size(), allowed.size() * 32);
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  // A word at a time: most words of a grammar's mask are all off (or all on).
  for (size_t begin = 0; begin < n; begin += 32) {
    const uint32_t bits = allowed[begin / 32];
    if (bits == ~0u) continue;
    const size_t end = std::min(n, begin + 32);
    if (bits == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(begin),
                logits.begin() + static_cast<std::ptrdiff_t>(end), kOff);
      continue;
    }
    for (size_t t = begin; t < end; ++t) {
      if ((bits >> (t - begin) & 1u) == 0) logits[t] = kOff;
    }
  }
  std::fill(logits.begin() + static_cast<std::ptrdiff_t>(n), logits.end(), kOff);
}

void ApplyAdjustments(std::span<float> logits, std::span<const LogitAdjustment> adjustments) {
  for (const LogitAdjustment& a : adjustments) {
    float& l = logits[static_cast<size_t>(a.token)];
    l = AdjustLogit(l, a);
  }
}

void ComputeLogprobs(std::span<const float> logits, float temperature, int32_t token, int top,
                     SampledLogprobs* out) {
  const double t = temperature > 0 ? temperature : 1.0;
  auto value = [&](size_t i) {
    return std::isnan(logits[i]) ? -INFINITY : static_cast<double>(logits[i]);
  };
  double max_logit = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) max_logit = std::max(max_logit, value(i));
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += std::exp((value(i) - max_logit) / t);
  const double log_norm = std::log(sum);
  auto logprob = [&](size_t i) {
    return static_cast<float>((value(i) - max_logit) / t - log_norm);
  };
  out->logprob = logprob(static_cast<size_t>(token));
  const size_t k =
      std::min<size_t>(static_cast<size_t>(std::clamp(top, 0, kMaxTopLogprobs)), logits.size());
  out->num_top = static_cast<int32_t>(k);
  if (k == 0) return;
  // Descending by (NaN-free) logit, lower id first on ties: the order of the logprobs.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const double va = value(static_cast<size_t>(a));
                      const double vb = value(static_cast<size_t>(b));
                      return va != vb ? va > vb : a < b;
                    });
  for (size_t i = 0; i < k; ++i) {
    out->top_ids[i] = ids[i];
    out->top_logprobs[i] = logprob(static_cast<size_t>(ids[i]));
  }
}

}  // namespace pagoda::worker
