#include "worker/backend/backend.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::worker {

const char* ForwardPartName(ForwardPart part) {
  switch (part) {
    case ForwardPart::kQkvProducts:
      return "qkv_products";
    case ForwardPart::kOutputProduct:
      return "output_product";
    case ForwardPart::kGateUpProducts:
      return "gate_up_products";
    case ForwardPart::kDownProduct:
      return "down_product";
    case ForwardPart::kLogitsProduct:
      return "logits_product";
    case ForwardPart::kAttention:
      return "attention";
    case ForwardPart::kElementwise:
      return "elementwise";
    case ForwardPart::kSampling:
      return "sampling";
  }
  return "unknown";
}

bool Backend::TakeForwardParts(ForwardPartTotals* totals) {
  if (part_totals_ == nullptr) return false;
  for (int i = 0; i < kNumForwardParts; ++i) {
    totals->seconds[i] += part_totals_->seconds[i];
    totals->flops[i] += part_totals_->flops[i];
  }
  *part_totals_ = ForwardPartTotals{};
  return true;
}

absl::Status Backend::ForwardSample(std::span<const SeqInput> batch,
                                    std::span<const SampleInput> samples,
                                    std::vector<int32_t>* tokens,
                                    std::vector<SampledLogprobs>* logprobs) {
  RETURN_IF_ERROR(Forward(batch, &logits_));
  AwaitMasks();
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  const size_t rows = vocab == 0 ? 0 : logits_.size() / vocab;
  if (rows != samples.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d sampling entries for %d sequences that want logits", samples.size(), rows));
  }
  tokens->resize(rows);
  if (logprobs != nullptr) logprobs->resize(rows);
  const ForwardPartTimer timer(part_totals_, ForwardPart::kSampling);
  for (size_t r = 0; r < rows; ++r) {
    const std::span<float> row(logits_.data() + r * vocab, vocab);
    const SampleInput& s = samples[r];
    ApplyMask(row, s.allowed);
    ApplyAdjustments(row, s.adjustments);
    (*tokens)[r] = Sample(row, s.params, s.index);
    if (s.params.top_logprobs >= 0) {
      if (logprobs == nullptr) return absl::InvalidArgumentError("logprobs asked without output");
      ComputeLogprobs(row, s.params.temperature, (*tokens)[r], s.params.top_logprobs,
                      &(*logprobs)[r]);
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::ForwardSampleMasksPending(std::span<const SeqInput> batch,
                                                std::span<const SampleInput> samples,
                                                std::vector<int32_t>* tokens,
                                                std::vector<SampledLogprobs>* logprobs,
                                                PendingMasks& pending) {
  if (!OverlapsMasks()) {
    pending.Wait();
    return ForwardSample(batch, samples, tokens, logprobs);
  }
  pending_masks_ = &pending;
  absl::Status status = ForwardSample(batch, samples, tokens, logprobs);
  pending_masks_ = nullptr;
  pending.Wait();  // also when ForwardSample failed before it read the masks
  return status;
}

absl::Status Backend::CopyPages(std::span<const PageCopy> copies) {
  if (copies.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "the %s backend cannot copy KV pages (%d copies asked)", name(), copies.size()));
}

absl::Status Backend::InitSwapSpace(int64_t num_slots) {
  return absl::FailedPreconditionError(
      absl::StrFormat("the %s backend has no swap space (%d slots asked)", name(), num_slots));
}

absl::Status Backend::SwapOut(std::span<const SwapCopy> copies) {
  if (copies.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the %s backend has no swap space (%d pages to swap out)", name(), copies.size()));
}

absl::Status Backend::SwapIn(std::span<const SwapCopy> copies) {
  if (copies.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the %s backend has no swap space (%d pages to swap in)", name(), copies.size()));
}

absl::Status ValidateBatch(std::span<const SeqInput> batch, const common::ModelConfig& c,
                           int page_size, int num_pages) {
  const int64_t ps = page_size;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SeqInput& in = batch[s];
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("batch entry %d has no tokens", s));
    }
    const int64_t end = int64_t{in.start_pos} + static_cast<int64_t>(in.tokens.size());
    if (in.start_pos < 0 || end > c.context_length) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch entry %d covers positions [%d, %d), outside [0, context_length %d)", s,
          in.start_pos, end, c.context_length));
    }
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      if (in.tokens[i] < 0 || in.tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("batch entry %d token %d has id %d, outside [0, vocab_size %d)", s, i,
                            in.tokens[i], c.vocab_size));
      }
    }
    const int64_t pages_needed = (end + ps - 1) / ps;
    if (static_cast<int64_t>(in.pages.size()) < pages_needed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch entry %d needs %d pages of %d slots for positions [0, %d) but has %d", s,
          pages_needed, ps, end, in.pages.size()));
    }
    for (size_t i = 0; i < in.pages.size(); ++i) {
      if (in.pages[i] < 0 || in.pages[i] >= num_pages) {
        return absl::InvalidArgumentError(
            absl::StrFormat("batch entry %d page %d has id %d, outside [0, num_pages %d)", s, i,
                            in.pages[i], num_pages));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
