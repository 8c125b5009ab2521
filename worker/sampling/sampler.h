// Token sampling from one row of logits.
//
// Contract: Sample() is a pure function of (logits, params, sample_index): no hidden state, no
// global RNG. The uniform draw comes from a counter-based generator keyed by (seed,
// sample_index), so the same seed reproduces the same text, and a sequence resumed on another
// worker (recomputed from its prompt and generated tokens) draws the same numbers for the same
// indices. Callers use sample_index = number of tokens generated so far for the sequence.
//  * temperature <= 0: greedy argmax, lowest id on ties.
//  * otherwise softmax(logits / temperature), then top-k (0 = off), then top-p nucleus (the
//    smallest prefix of the descending distribution with mass >= top_p; top_p >= 1 or <= 0 =
//    off), renormalized, then one draw. Ties in probability order by lower id first.
// Logits must be non-empty; NaN logits are treated as -infinity.
#pragma once

#include <cstdint>
#include <span>

namespace pagoda::worker {

struct SamplingParams {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
};

int32_t Sample(std::span<const float> logits, const SamplingParams& p, uint64_t sample_index);

// Uniform double in [0, 1) derived deterministically from (seed, index) (splitmix64 mixing).
double CounterUniform(uint64_t seed, uint64_t index);

}  // namespace pagoda::worker
