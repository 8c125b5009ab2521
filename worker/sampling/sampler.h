// Token sampling from one row of logits, and the log-probabilities of what was sampled.
//
// The order of operations on a row (the CUDA sampler, worker/backend/cuda/sampling, follows it):
//  1. logit_bias, then 2. the penalties (repetition, then frequency and presence): the caller
//     applies both with ApplyAdjustments (logit_adjustment.h) from the sequence's TokenHistory
//     (token_history.h); greedy rows get them too;
//  3. temperature: temperature <= 0 is greedy, argmax of the adjusted logits, lowest id on ties
//     (so is top_k == 1); otherwise p_i = softmax(l / temperature);
//  4. top-k (0 = off): keep the k most probable tokens;
//  5. top-p (nucleus; <= 0 or >= 1 = off): keep the smallest prefix of the descending
//     distribution whose mass is >= top_p of what top-k kept;
//  6. min-p (0 = off): keep the tokens with p >= min_p * p_max;
//  7. one draw from what is kept, renormalized. Ties in probability order by lower id first.
// Logprobs (ComputeLogprobs) come from the distribution of step 3 before any truncation:
// log_softmax(l / T) of the adjusted logits, with T = temperature, or 1 when greedy.
//
// Contract: Sample() is a pure function of (logits, params, sample_index): no hidden state, no
// global RNG. The uniform draw comes from a counter-based generator keyed by (seed,
// sample_index), so the same seed reproduces the same text, and a sequence resumed on another
// worker (recomputed from its prompt and generated tokens) draws the same numbers for the same
// indices. Callers use sample_index = number of tokens generated so far for the sequence.
// Logits must be non-empty; NaN logits are treated as -infinity.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "worker/sampling/logit_adjustment.h"

namespace pagoda::worker {

// Most alternatives a token's logprobs carry (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

struct SamplingParams {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
  float min_p = 0;  // 0 = off; in [0, 1]
  // Penalties, applied through LogitAdjustment lists built by TokenHistory.
  float presence_penalty = 0;    // subtracted once from every generated token's logit
  float frequency_penalty = 0;   // subtracted per occurrence among the generated tokens
  float repetition_penalty = 1;  // prompt and generated tokens: l > 0 ? l / r : l * r; 1 = off
  // -1: no logprobs; 0..kMaxTopLogprobs: the sampled token's logprob and this many
  // alternatives.
  int top_logprobs = -1;

  bool has_penalties() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
};

// The sampled token's log-probability and the most probable alternatives, descending by
// logit (ties: lower id first).
struct SampledLogprobs {
  float logprob = 0;
  int32_t num_top = 0;
  std::array<int32_t, kMaxTopLogprobs> top_ids{};
  std::array<float, kMaxTopLogprobs> top_logprobs{};
};

// Constrained decoding: sets the logits of the tokens `allowed` does not allow to -infinity.
// `allowed` is a mask (bit t % 32 of word t / 32 set when token t is allowed); ids past its
// bits are not allowed either. A no-op when `allowed` is empty (every token allowed).
void ApplyMask(std::span<float> logits, std::span<const uint32_t> allowed);

// Applies every adjustment to `logits` (one row, [vocab]); tokens must be in range (checked by
// whoever built the list: TokenHistory from validated ids).
void ApplyAdjustments(std::span<float> logits, std::span<const LogitAdjustment> adjustments);

int32_t Sample(std::span<const float> logits, const SamplingParams& p, uint64_t sample_index);

// Fills `out` for `token` and the `top` (<= kMaxTopLogprobs, clamped to the vocabulary) most
// probable tokens of log_softmax(logits / T), T = temperature > 0 ? temperature : 1.
// Computed in double; NaN logits count as -infinity.
void ComputeLogprobs(std::span<const float> logits, float temperature, int32_t token, int top,
                     SampledLogprobs* out);

// Uniform double in [0, 1) derived deterministically from (seed, index) (splitmix64 mixing).
double CounterUniform(uint64_t seed, uint64_t index);

}  // namespace pagoda::worker
