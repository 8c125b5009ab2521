// llama.cpp's server as the reference of a forward pass over the quantized test files
// (../shared/models/quant/llama_cpp_top5.json): a teacher-forced run of any backend compared with
// llama.cpp's top-5 log-probabilities at every generated position. Used by the CPU backend's
// tests (quantized_model_test) and the CUDA backend's (cuda_backend_gpu_test).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_assertions.h"
#include "worker/backend/backend.h"

namespace pagoda::testing {

using worker::Backend;
using worker::SeqInput;

// llama.cpp multiplies quantized weights with activations it rounds to 8 bits. Pagoda's CPU
// backend does too on the tables with integer products (the default there), with its own
// rounding, and keeps them float32 elsewhere or when asked; the CUDA backend keeps them in the
// dtype. Either way log-probabilities differ by a few hundredths (quant/README.md): every
// compared value within kMaxLogProbGap, and their mean gap within kMeanLogProbGap. Measured on
// the CPU (with the F16 KV cache, as llama.cpp's): F32 0.0014 max; quantized files 0.065-0.098
// max, 0.013-0.024 mean, with either activations.
constexpr double kMaxLogProbGap = 0.12;
constexpr double kMeanLogProbGap = 0.03;

// log-softmax of one row of logits.
inline std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(l - mx);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - mx - std::log(sum);
  return out;
}

// The llama.cpp runs generated exactly 12 tokens: its server ignored EOS when choosing (yet
// reports it among the top 5 of the full softmax), so greedy choices here skip it too.
constexpr int kEos = 2;
inline int32_t Greedy(const std::vector<double>& lp) {
  int32_t best = kEos == 0 ? 1 : 0;
  for (int32_t i = 0; i < static_cast<int32_t>(lp.size()); ++i) {
    if (i != kEos && lp[i] > lp[best]) best = i;
  }
  return best;
}

struct Gaps {
  double max = 0;
  double sum = 0;
  int count = 0;
};

// Feeds one token at `*pos` and replaces `lp` with the next log-probabilities.
inline void Feed(Backend& backend, int32_t token, int32_t* pos, const std::vector<int32_t>& pages,
                 std::vector<double>* lp) {
  std::vector<float> logits;
  SeqInput in{{&token, 1}, (*pos)++, pages, true};
  ASSERT_OK(backend.Forward({&in, 1}, &logits));
  *lp = LogSoftmax(logits);
}

// Teacher-forced run over llama.cpp's tokens, comparing its top-5 log-probabilities at each step.
// llama.cpp's server reports no step for a token whose text is an incomplete UTF-8 sequence (a
// byte token 0x80-0xFF, ids 131-258 in this vocabulary) yet feeds it back: where our greedy token
// is such a byte and not the reported one, it is fed too. Where llama.cpp may have picked a
// hidden byte that we did not (one within the tolerance of our choice) and the next step
// disagrees, the contexts have parted, and the run is compared no further.
// `backend` is a fresh one with at least 8 pages of 16 positions; every compared
// log-probability's gap is added to *gaps.
inline void CompareWithLlamaCpp(Backend& backend, const nlohmann::json& run, Gaps* gaps) {
  const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> pages(8);
  std::iota(pages.begin(), pages.end(), 0);
  std::vector<float> logits;
  SeqInput in{prompt, 0, pages, true};
  ASSERT_OK(backend.Forward({&in, 1}, &logits));
  std::vector<double> lp = LogSoftmax(logits);
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (const nlohmann::json& step : run["steps"]) {
    const int chosen = step["chosen"].get<int>();
    // Could llama.cpp have picked a hidden byte token here (one within the tolerance of ours)?
    const double best = lp[Greedy(lp)];
    const bool may_hide = std::any_of(lp.begin() + 131, lp.begin() + 259,
                                      [&](double v) { return v > best - 2 * kMaxLogProbGap; });
    bool hidden = false;
    for (int i = 0; i < 3; ++i) {
      const int32_t ours = Greedy(lp);
      if (ours == chosen || ours < 131 || ours > 258) break;
      Feed(backend, ours, &pos, pages, &lp);
      hidden = true;
    }
    const auto& top = step["top"];
    double theirs = 0;  // llama.cpp's log-probability of its choice
    for (const auto& pair : top) {
      if (pair[0].get<int>() == chosen) theirs = pair[1].get<double>();
    }
    if ((hidden || may_hide) && std::fabs(lp[chosen] - theirs) > kMaxLogProbGap) {
      return;
    }
    for (const auto& pair : top) {
      const double gap = std::fabs(lp[pair[0].get<int>()] - pair[1].get<double>());
      gaps->max = std::max(gaps->max, gap);
      gaps->sum += gap;
      ++gaps->count;
    }
    // Where llama.cpp's choice is clear, ours is the same token.
    std::vector<double> best_two;  // llama.cpp's two best log-probabilities other than EOS
    for (const auto& pair : top) {
      if (pair[0].get<int>() != kEos) best_two.push_back(pair[1].get<double>());
    }
    if (best_two[0] - best_two[1] > kMaxLogProbGap) {
      EXPECT_EQ(Greedy(lp), chosen) << "llama.cpp's top 5: " << top.dump();
    }
    Feed(backend, chosen, &pos, pages, &lp);
  }
}

}  // namespace pagoda::testing
