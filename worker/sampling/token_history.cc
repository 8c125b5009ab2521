#include "worker/sampling/token_history.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pagoda::worker {
namespace {

const float* FindBias(std::span<const std::pair<int32_t, float>> bias, int32_t token) {
  auto it =
      std::lower_bound(bias.begin(), bias.end(), token,
                       [](const std::pair<int32_t, float>& b, int32_t t) { return b.first < t; });
  return it != bias.end() && it->first == token ? &it->second : nullptr;
}

}  // namespace

absl::Status TokenHistory::Record(int32_t start_pos, std::span<const int32_t> tokens) {
  if (start_pos != next_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "tokens at position %d, but the sequence's history ends at position %d", start_pos, next_));
  }
  next_ += static_cast<int32_t>(tokens.size());
  if (!tracked_) return absl::OkStatus();
  for (size_t i = 0; i < tokens.size(); ++i) {
    Counts& c = counts_[tokens[i]];
    if (start_pos + static_cast<int32_t>(i) < prompt_tokens_) {
      c.in_prompt = true;
    } else {
      ++c.generated;
    }
  }
  return absl::OkStatus();
}

void TokenHistory::Adjustments(const SamplingParams& p,
                               std::span<const std::pair<int32_t, float>> bias,
                               std::vector<LogitAdjustment>* out) const {
  const bool penalties = tracked_ && p.has_penalties();
  if (penalties) {
    for (const auto& [token, c] : counts_) {
      LogitAdjustment a;
      a.token = token;
      if (const float* b = FindBias(bias, token)) a.bias = *b;
      a.repetition = p.repetition_penalty;
      if (c.generated > 0) {
        a.subtract = p.frequency_penalty * static_cast<float>(c.generated) + p.presence_penalty;
      }
      out->push_back(a);
    }
  }
  for (const auto& [token, b] : bias) {
    if (penalties && counts_.contains(token)) continue;  // merged above
    LogitAdjustment a;
    a.token = token;
    a.bias = b;
    out->push_back(a);
  }
}

}  // namespace pagoda::worker
