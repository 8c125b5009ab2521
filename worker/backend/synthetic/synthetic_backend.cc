#include "worker/backend/synthetic/synthetic_backend.h"

#include <algorithm>
#include <bit>
#include <climits>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pagoda::worker {

int32_t SyntheticNextToken(std::span<const int32_t> tokens, int32_t vocab_size) {
  uint64_t h = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(tokens.size());
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 0x100000001b3ull;
  // A murmur-style finalizer, so that neighbouring histories give unrelated tokens.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
}

absl::StatusOr<std::unique_ptr<SyntheticBackend>> SyntheticBackend::Create(
    const common::ModelConfig& config, const SyntheticBackendOptions& options) {
  if (options.page_size <= 0 || options.num_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic backend: page_size (%d) and num_pages (%d) must be positive",
                        options.page_size, options.num_pages));
  }
  if (options.step < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("synthetic backend: the step time must be >= 0");
  }
  if (config.vocab_size <= 0) {
    return absl::InvalidArgumentError("synthetic backend: the model's vocab_size must be > 0");
  }
  return std::unique_ptr<SyntheticBackend>(new SyntheticBackend(config, options));
}

SyntheticBackend::SyntheticBackend(const common::ModelConfig& config,
                                   const SyntheticBackendOptions& options)
    : config_(config),
      options_(options),
      slots_(static_cast<size_t>(options.num_pages) * options.page_size, -1) {}

int32_t& SyntheticBackend::Slot(const SeqInput& in, int32_t position) {
  const int32_t page = in.pages[position / options_.page_size];
  return slots_[static_cast<size_t>(page) * options_.page_size + position % options_.page_size];
}

absl::StatusOr<int32_t> SyntheticBackend::NextToken(const SeqInput& in, size_t entry) {
  const int32_t end = in.start_pos + static_cast<int32_t>(in.tokens.size());
  history_.resize(static_cast<size_t>(end));
  for (int32_t p = 0; p < end; ++p) {
    const int32_t token = Slot(in, p);
    if (token < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("batch entry %d reads position %d, which no earlier step wrote (page %d)",
                          entry, p, in.pages[p / options_.page_size]));
    }
    history_[p] = token;
  }
  return SyntheticNextToken(history_, config_.vocab_size);
}

absl::Status SyntheticBackend::CopyPages(std::span<const PageCopy> copies) {
  const size_t ps = static_cast<size_t>(options_.page_size);
  for (const PageCopy& c : copies) {
    if (c.src < 0 || c.src >= options_.num_pages || c.dst < 0 || c.dst >= options_.num_pages) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "page copy %d -> %d is outside the arena of %d pages", c.src, c.dst, options_.num_pages));
    }
    if (c.src == c.dst) continue;
    std::copy_n(slots_.begin() + c.src * ps, ps, slots_.begin() + c.dst * ps);
  }
  return absl::OkStatus();
}

absl::Status SyntheticBackend::InitSwapSpace(int64_t num_slots) {
  if (num_swap_pages_ > 0) {
    return absl::FailedPreconditionError("synthetic backend: the swap space exists already");
  }
  if (num_slots <= 0 || num_slots > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "synthetic backend: swap space of %d slots, must be in [1, 2^31)", num_slots));
  }
  swap_.assign(static_cast<size_t>(num_slots) * options_.page_size, -1);
  num_swap_pages_ = static_cast<int>(num_slots);
  return absl::OkStatus();
}

absl::Status SyntheticBackend::Swap(std::span<const SwapCopy> copies, bool out) {
  if (num_swap_pages_ == 0) return out ? Backend::SwapOut(copies) : Backend::SwapIn(copies);
  for (const SwapCopy& c : copies) {
    if (c.page < 0 || c.page >= options_.num_pages || c.slot < 0 || c.slot >= num_swap_pages_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("swap of page %d and slot %d: pages must be in [0, %d), slots in [0, %d)",
                          c.page, c.slot, options_.num_pages, num_swap_pages_));
    }
  }
  const size_t ps = static_cast<size_t>(options_.page_size);
  for (const SwapCopy& c : copies) {
    int32_t* page = slots_.data() + c.page * ps;
    int32_t* slot = swap_.data() + c.slot * ps;
    if (out) {
      std::copy_n(page, ps, slot);
    } else {
      std::copy_n(slot, ps, page);
    }
  }
  return absl::OkStatus();
}

absl::Status SyntheticBackend::SwapOut(std::span<const SwapCopy> copies) {
  return Swap(copies, /*out=*/true);
}

absl::Status SyntheticBackend::SwapIn(std::span<const SwapCopy> copies) {
  return Swap(copies, /*out=*/false);
}

absl::Status SyntheticBackend::Step(std::span<const SeqInput> batch, std::vector<int32_t>* tokens) {
  RETURN_IF_ERROR(ValidateBatch(batch, config_, options_.page_size, options_.num_pages));
  for (const SeqInput& in : batch) {
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      Slot(in, in.start_pos + static_cast<int32_t>(i)) = in.tokens[i];
    }
  }
  tokens->clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    if (!batch[s].want_logits) continue;
    ASSIGN_OR_RETURN(int32_t next, NextToken(batch[s], s));
    tokens->push_back(next);
  }
  return absl::OkStatus();
}

absl::Status SyntheticBackend::Forward(std::span<const SeqInput> batch,
                                       std::vector<float>* logits) {
  const absl::Time start = absl::Now();
  std::vector<int32_t> tokens;
  absl::Status status = Step(batch, &tokens);
  if (status.ok()) {
    const size_t vocab = static_cast<size_t>(config_.vocab_size);
    logits->assign(tokens.size() * vocab, 0.0f);
    for (size_t r = 0; r < tokens.size(); ++r) (*logits)[r * vocab + tokens[r]] = 1.0f;
  }
  absl::SleepFor(options_.step - (absl::Now() - start));
  return status;
}

namespace {

// The set bits of `w`. Not std::popcount: without -mpopcnt that is a libgcc call per word, and
// counting a 151k-token mask (4,740 words) that way for every constrained row took about a
// fifth of a synthetic worker's CPU at 64 constrained streams (bench/structured.sh).
int Popcount32(uint32_t w) {
  w = w - ((w >> 1) & 0x55555555u);
  w = (w & 0x33333333u) + ((w >> 2) & 0x33333333u);
  return static_cast<int>((((w + (w >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

}  // namespace

int32_t AllowedToken(int32_t token, std::span<const uint32_t> allowed) {
  if (allowed.empty()) return token;
  const size_t t = static_cast<size_t>(token);
  if (t / 32 < allowed.size() && (allowed[t / 32] >> (t % 32) & 1u)) return token;
  int64_t count = 0;
  for (uint32_t word : allowed) count += Popcount32(word);
  if (count == 0) return token;
  int64_t k = token % count;  // the k-th allowed id, counting from 0
  for (size_t w = 0; w < allowed.size(); ++w) {
    const int bits = Popcount32(allowed[w]);
    if (k >= bits) {
      k -= bits;
      continue;
    }
    uint32_t word = allowed[w];
    for (; k > 0; --k) word &= word - 1;  // drop the lowest set bits
    return static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(word)));
  }
  return token;
}

absl::Status SyntheticBackend::ForwardSample(std::span<const SeqInput> batch,
                                             std::span<const SampleInput> samples,
                                             std::vector<int32_t>* tokens,
                                             std::vector<SampledLogprobs>* logprobs) {
  for (const SampleInput& s : samples) {
    if (!s.adjustments.empty() || s.params.top_logprobs >= 0) {
      return Backend::ForwardSample(batch, samples, tokens, logprobs);
    }
  }
  const absl::Time start = absl::Now();
  absl::Status status = Step(batch, tokens);
  if (status.ok() && tokens->size() != samples.size()) {
    status = absl::InvalidArgumentError(absl::StrFormat(
        "%d sampling entries for %d sequences that want logits", samples.size(), tokens->size()));
  }
  if (status.ok()) {
    AwaitMasks();
    for (size_t r = 0; r < samples.size(); ++r) {
      (*tokens)[r] = AllowedToken((*tokens)[r], samples[r].allowed);
    }
  }
  absl::SleepFor(options_.step - (absl::Now() - start));
  return status;
}

}  // namespace pagoda::worker
