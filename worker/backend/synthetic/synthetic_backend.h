// SyntheticBackend: a worker backend that computes no model, for measuring and testing the
// scheduler and the worker link at GPU rates on any machine (pagoda-worker --backend synthetic).
//
// Contract:
//  * It answers every Forward/ForwardSample after a fixed step time (options.step), whatever
//    the batch holds, as a GPU whose decode steps are bound by reading the weights would.
//  * Its "KV arena" holds the token id written at each page slot, nothing else: Forward writes
//    each new token at its position's page slot, and a sampled token is SyntheticNextToken() of
//    the tokens read back from the sequence's pages for positions [0, last new position]. So the
//    output is a function of the sequence's tokens and position only (batch-invariant, equal
//    after a preemption and recompute), and a wrong page table changes the output: a test that
//    compares the streamed tokens with SyntheticNextToken() over prompt + output checks the
//    scheduler's batching, page tables and routing end to end.
//  * Reading a slot that no Forward wrote is InvalidArgument naming the entry and position.
//  * CopyPages copies each page's slots (the token ids, unwritten ones included) in order, as
//    the KV of a real backend would be copied (n > 1: copy on write of a shared partial page).
//  * Its swap space (InitSwapSpace) holds slots of page_size token ids; SwapOut and SwapIn copy
//    a page's ids (unwritten ones included) to a slot and back, as a real backend copies its
//    KV, so a swapped sequence continues with the tokens it would have had. Ids out of range
//    are InvalidArgument (the runner checks them first).
//  * Forward's logits are one-hot at the synthetic token (greedy sampling gives the same token);
//    ForwardSample ignores temperature, top-k/p and min-p: every request behaves as greedy.
//    A batch where some row has adjustments (logit_bias, penalties) or asks for logprobs is
//    sampled on the host from those one-hot logits instead (Backend::ForwardSample), so these
//    fields are honoured as they would be by a model with such logits. A constrained row's
//    token is the synthetic token when its mask allows it, else AllowedToken() of it: the
//    (token mod count)-th allowed id, so constrained output varies as the synthetic tokens
//    do (on the host path, greedy over masked one-hot logits picks the lowest allowed id).
//  * Masks still being filled (Backend::ForwardSampleMasksPending) are awaited once the step's
//    tokens are known, inside the step time, as a GPU's host thread would wait for them while
//    the forward pass runs (OverlapsMasks()).
//  * Batches are validated like every backend's (ValidateBatch). One thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_config.h"
#include "worker/backend/backend.h"

namespace pagoda::worker {

// `token` when `allowed` (a SampleInput mask) is empty or allows it; otherwise the allowed id
// of rank token mod (number allowed); `token` when nothing is allowed.
int32_t AllowedToken(int32_t token, std::span<const uint32_t> allowed);

struct SyntheticBackendOptions {
  int page_size = 16;
  int num_pages = 0;                            // must be positive
  absl::Duration step = absl::Milliseconds(5);  // every call takes at least this long
};

// The token that follows `tokens` (the sequence's tokens at positions 0..tokens.size()-1), in
// [0, vocab_size): an FNV-1a hash of the tokens and their count, finalized and reduced.
int32_t SyntheticNextToken(std::span<const int32_t> tokens, int32_t vocab_size);

class SyntheticBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<SyntheticBackend>> Create(
      const common::ModelConfig& config, const SyntheticBackendOptions& options);

  absl::Status Forward(std::span<const SeqInput> batch, std::vector<float>* logits) override;
  using Backend::ForwardSample;  // the overload without logprobs
  absl::Status ForwardSample(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                             std::vector<int32_t>* tokens,
                             std::vector<SampledLogprobs>* logprobs) override;
  absl::Status CopyPages(std::span<const PageCopy> copies) override;
  absl::Status InitSwapSpace(int64_t num_slots) override;
  absl::Status SwapOut(std::span<const SwapCopy> copies) override;
  absl::Status SwapIn(std::span<const SwapCopy> copies) override;
  int num_swap_pages() const override { return num_swap_pages_; }
  bool OverlapsMasks() const override { return true; }

  int page_size() const override { return options_.page_size; }
  int num_pages() const override { return options_.num_pages; }
  const common::ModelConfig& config() const override { return config_; }
  std::string name() const override { return "synthetic"; }
  size_t kv_bytes() const override { return slots_.size() * sizeof(int32_t); }

 private:
  SyntheticBackend(const common::ModelConfig& config, const SyntheticBackendOptions& options);
  // Validates, writes the new tokens and appends the token of every want_logits entry.
  absl::Status Step(std::span<const SeqInput> batch, std::vector<int32_t>* tokens);
  absl::StatusOr<int32_t> NextToken(const SeqInput& in, size_t entry);
  int32_t& Slot(const SeqInput& in, int32_t position);
  // Copies between pages and swap slots (out: page -> slot), after checking every id.
  absl::Status Swap(std::span<const SwapCopy> copies, bool out);

  const common::ModelConfig config_;
  const SyntheticBackendOptions options_;
  std::vector<int32_t> slots_;  // [num_pages * page_size]: the token at each slot, -1 unwritten
  std::vector<int32_t> swap_;   // [num_swap_pages_ * page_size]: swapped-out token ids
  int num_swap_pages_ = 0;
  std::vector<int32_t> history_;  // scratch: one sequence's tokens read back from its pages
};

}  // namespace pagoda::worker
