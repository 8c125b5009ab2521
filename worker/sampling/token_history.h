// TokenHistory: what a sequence's penalties need to know about its tokens, kept by the worker.
//
// The repetition penalty looks at every token of the sequence (prompt and generated), the
// presence and frequency penalties at the generated ones only (OpenAI's and vLLM's meanings).
// The worker records every input token of a sequence at its position as plans feed it (prefill
// chunks, decode tokens, the scheduler's `history` on first sight for the positions the worker
// does not compute itself: prefix-cache hits, a fork's shared prompt, a recomputation after a
// preemption or on another worker). A position < prompt_tokens is prompt, any later one was
// generated. When a token is sampled at position p, every position < p has been fed (the
// previous sample is the input of the step that samples the next), so the history is exact and
// depends only on the sequence's tokens: equal on every worker, batch and recomputation.
//
// Invariant: positions are recorded in order, each once (Record checks it).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "worker/sampling/logit_adjustment.h"
#include "worker/sampling/sampler.h"

namespace pagoda::worker {

class TokenHistory {
 public:
  TokenHistory() = default;
  // `prompt_tokens`: positions below it are prompt. `tracked`: false when the sequence has no
  // penalties (then Record only advances the position).
  TokenHistory(int32_t prompt_tokens, bool tracked)
      : prompt_tokens_(prompt_tokens), tracked_(tracked) {}

  // Records `tokens` at positions [start_pos, start_pos + size). FailedPrecondition when
  // start_pos is not the next unrecorded position.
  absl::Status Record(int32_t start_pos, std::span<const int32_t> tokens);
  int32_t next_position() const { return next_; }

  // Appends to `out` one adjustment per token that has a bias (`bias`: sorted by token id,
  // each once) or occurs in the history (for the penalties of `p`).
  void Adjustments(const SamplingParams& p, std::span<const std::pair<int32_t, float>> bias,
                   std::vector<LogitAdjustment>* out) const;

 private:
  struct Counts {
    uint32_t generated = 0;
    bool in_prompt = false;
  };
  int32_t prompt_tokens_ = 0;
  bool tracked_ = false;
  int32_t next_ = 0;
  absl::flat_hash_map<int32_t, Counts> counts_;
};

}  // namespace pagoda::worker
