// The GPU twins of the CPU sampler's first and last steps (worker/sampling/sampler.h): logit
// adjustments (logit_bias and penalties) before sampling, and logprobs beside it.
//
//  * LaunchAdjustLogits: logits[row][token] = AdjustLogit(logits[row][token], adj) for each
//    entry (worker/sampling/logit_adjustment.h), one thread per entry; a (row, token) pair
//    appears at most once, so the result does not depend on thread order and equals the CPU's
//    bit for bit.
//  * LaunchMaskLogits (constrained decoding, SampleInput::allowed): logits[rows[i]][t] = -inf
//    for every token t whose bit is clear in masks[i] (bit t % 32 of word t / 32), one thread
//    per (mask, token); it runs before the adjustments, as on the CPU.
//  * LaunchLogprobs: for rows with top_logprobs >= 0 (others are skipped), with
//    T = temperature > 0 ? temperature : 1 and m = the row's largest logit (NaN read as -inf):
//    log_norm[row] = log(sum_i exp((l_i - m) / T)), and the top_logprobs (<= kMaxTopLogprobs,
//    clamped to vocab) largest logits, descending (lower id first on ties), as ids and
//    logprobs (l - m) / T - log_norm. It must run before LaunchSample, which overwrites the
//    logits; the sampled token's logprob is then LaunchSample's out_logprob_unnormalized (its
//    (l - m) / T) minus log_norm. One block per row, fixed-order reductions: deterministic.
//    Float arithmetic: within about 1e-5 of the CPU's double computation for unit-scale logits.
// Launchers never allocate or synchronize.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/kernel_args.h"
#include "worker/sampling/logit_adjustment.h"

namespace pagoda::worker::cuda {

struct AdjustLogitsEntry {
  int32_t row = 0;
  LogitAdjustment adj;
};

struct AdjustLogitsParams {
  float* logits;                     // [rows][vocab] (device)
  const AdjustLogitsEntry* entries;  // [count] (device); rows and tokens in range
  int count = 0;
  int vocab = 0;
};
absl::Status LaunchAdjustLogits(const AdjustLogitsParams& p, cudaStream_t stream);

struct MaskLogitsParams {
  float* logits;          // [rows][vocab] (device)
  const int32_t* rows;    // [count] logit row of each mask (device), each in range
  const uint32_t* masks;  // [count][words] (device)
  int count = 0;
  int vocab = 0;
  int words = 0;  // >= (vocab + 31) / 32
};
absl::Status LaunchMaskLogits(const MaskLogitsParams& p, cudaStream_t stream);

struct LogprobsParams {
  const float* logits;            // [rows][vocab] adjusted logits (device)
  const SampleRowParams* params;  // [rows]: temperature and top_logprobs (device)
  float* log_norm;                // [rows] (device)
  int32_t* top_ids;               // [rows][kMaxLogprobsTop] (device)
  float* top_logprobs;            // [rows][kMaxLogprobsTop] (device)
  int rows = 0;
  int vocab = 0;
};
inline constexpr int kMaxLogprobsTop = 20;  // == worker::kMaxTopLogprobs
absl::Status LaunchLogprobs(const LogprobsParams& p, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
