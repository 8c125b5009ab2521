// The compute interface the runner drives: one forward pass over a flat, ragged batch.
//
// Contract:
//  * A batch mixes sequences at any stage: each SeqInput carries new tokens (a prefill chunk
//    or one decode token) at absolute positions [start_pos, start_pos + tokens.size()).
//  * Page tables are owned by the scheduler; the backend's KV arena is dumb storage indexed by
//    page id. Position p of a sequence lives in page pages[p / page_size()], slot
//    p % page_size(). KV for positions < start_pos was written by earlier Forward calls with the
//    same pages; Forward writes KV for the new positions, then attends causally (each token sees
//    positions <= its own, its own chunk included).
//  * Sequences may share pages (a prefix-cache hit), but only pages holding positions below each
//    sharer's start_pos, which Forward only reads: a page written by a batch belongs to one
//    sequence (callers guarantee it; it is not checked).
//  * Forward validates every input (token ids, page ids, page coverage, positions against the
//    context length, empty token lists) and returns InvalidArgument without touching the KV
//    arena when anything is wrong.
//  * A Backend is used by one thread at a time (the runner's); it may use threads internally.
//  * ForwardSample() is Forward() followed by one sampled token per want_logits sequence; the
//    default samples on the host with worker/sampling, a GPU backend samples on the device.
//    Each row's adjustments (logit_bias, penalties) are applied to its logits first; rows with
//    params.top_logprobs >= 0 also get their SampledLogprobs (worker/sampling/sampler.h). A
//    row's mask of allowed tokens (SampleInput::allowed) applies before its adjustments.
//  * The masks may be incomplete when the forward pass starts (ForwardSampleMasksPending: the
//    runner fills them meanwhile). A backend whose forward pass leaves the host thread free
//    (OverlapsMasks()) calls AwaitMasks() before it reads any mask; the others get complete
//    masks before ForwardSample is called.
//  * Swap space (preemption by swap): host memory of num_swap_pages() slots, each the size of
//    one KV page (K and V of every layer), created at most once by InitSwapSpace before the
//    first plan; none by default (num_swap_pages() 0). The scheduler owns the slots as it owns
//    the pages. SwapOut copies pages into slots, SwapIn slots into pages, in list order, and
//    each returns when its copies are complete: a SwapOut sees every earlier write to its pages
//    (Forward, CopyPages), and a later Forward or CopyPages sees what SwapIn wrote. Slots keep
//    their bytes until the next SwapOut into them. Ids are checked by the caller (the runner).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "worker/sampling/logit_adjustment.h"
#include "worker/sampling/sampler.h"

namespace pagoda::worker {

struct SeqInput {                   // one sequence's work in a flat batch
  std::span<const int32_t> tokens;  // new input tokens (a prefill chunk or one decode token)
  int32_t start_pos = 0;            // absolute position of tokens[0]
  std::span<const int32_t> pages;   // block table: page ids covering [0, start_pos + size)
  bool want_logits = false;         // produce logits for the last new token
};

struct PageCopy {  // copy KV page src into page dst: K and V, every layer, every slot
  int32_t src = 0;
  int32_t dst = 0;
};

struct SwapCopy {  // one KV page and one swap slot: K and V, every layer, every position
  int32_t page = 0;
  int32_t slot = 0;
};

struct SampleInput {  // how to pick the token of one want_logits sequence
  SamplingParams params;
  uint64_t index = 0;  // tokens generated so far for the sequence (the generator's counter)
  std::span<const LogitAdjustment> adjustments = {};  // each token at most once, ids in range
  // Constrained decoding: empty for every token, else a mask of (vocab + 31) / 32 words, bit
  // t % 32 of word t / 32 set when token t is allowed. Disallowed tokens' logits become
  // -infinity before anything else (ApplyMask; so logprobs are those of the constrained
  // distribution).
  std::span<const uint32_t> allowed = {};
};

// The masks of a ForwardSample's samples, still being filled. Wait() returns once every
// SampleInput::allowed of the call holds its mask (it may fill some itself); it may be called
// more than once.
class PendingMasks {
 public:
  virtual void Wait() = 0;

 protected:
  ~PendingMasks() = default;
};

// The parts of a forward pass and of host sampling that a backend may time (worker metrics:
// pagoda_worker_forward_part_*): each weight product with its FLOPs, attention (KV writes and
// the paged attention, with its FLOPs), the element-wise rest (batch set-up, embedding, norms,
// RoPE, SwiGLU, residual adds) and sampling on the host.
enum class ForwardPart {
  kQkvProducts,
  kOutputProduct,
  kGateUpProducts,
  kDownProduct,
  kLogitsProduct,
  kAttention,
  kElementwise,
  kSampling,
};
inline constexpr int kNumForwardParts = 8;
const char* ForwardPartName(ForwardPart part);  // "qkv_products", ..., "sampling"

// Seconds and FLOPs per part, summed over forward passes.
struct ForwardPartTotals {
  std::array<double, kNumForwardParts> seconds{};
  std::array<double, kNumForwardParts> flops{};
  void Add(ForwardPart part, double s, double f) {
    seconds[static_cast<int>(part)] += s;
    flops[static_cast<int>(part)] += f;
  }
};

// Times one part from its construction to its destruction into `totals` (nothing when null).
class ForwardPartTimer {
 public:
  ForwardPartTimer(ForwardPartTotals* totals, ForwardPart part, double flops = 0)
      : totals_(totals), part_(part), flops_(flops), start_(std::chrono::steady_clock::now()) {}
  ~ForwardPartTimer() {
    if (totals_ == nullptr) return;
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
    totals_->Add(part_, d.count(), flops_);
  }
  ForwardPartTimer(const ForwardPartTimer&) = delete;
  ForwardPartTimer& operator=(const ForwardPartTimer&) = delete;

 private:
  ForwardPartTotals* totals_;
  ForwardPart part_;
  double flops_;
  std::chrono::steady_clock::time_point start_;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // logits: resized to [count of want_logits seqs][vocab], rows in batch order.
  virtual absl::Status Forward(std::span<const SeqInput> batch, std::vector<float>* logits) = 0;

  // samples: one per want_logits sequence, in batch order; tokens: resized to match. logprobs
  // (null when no sample has params.top_logprobs >= 0): resized to match, filled for the rows
  // that asked.
  virtual absl::Status ForwardSample(std::span<const SeqInput> batch,
                                     std::span<const SampleInput> samples,
                                     std::vector<int32_t>* tokens,
                                     std::vector<SampledLogprobs>* logprobs);
  // Without logprobs (no sample may ask for them).
  absl::Status ForwardSample(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                             std::vector<int32_t>* tokens) {
    return ForwardSample(batch, samples, tokens, nullptr);
  }

  // ForwardSample() while `pending` fills the samples' masks: overlapped with the forward pass
  // when OverlapsMasks(), else after waiting for them. The masks are complete when it returns.
  absl::Status ForwardSampleMasksPending(std::span<const SeqInput> batch,
                                         std::span<const SampleInput> samples,
                                         std::vector<int32_t>* tokens,
                                         std::vector<SampledLogprobs>* logprobs,
                                         PendingMasks& pending);
  // Whether ForwardSample calls AwaitMasks() before it reads any mask, so that the masks can be
  // filled during its forward pass (default: no).
  virtual bool OverlapsMasks() const { return false; }

  // Copies pages in order (copy on write, before a Forward writes into the copy). Page ids are
  // checked by the caller. The default refuses: a backend without a KV arena has none to copy.
  virtual absl::Status CopyPages(std::span<const PageCopy> copies);

  // Creates the swap space: `num_slots` (> 0) slots of one page each. The default refuses
  // (FailedPrecondition): the backend has no swap space.
  virtual absl::Status InitSwapSpace(int64_t num_slots);
  // Device page -> swap slot, then slot -> page (see the contract above). The defaults accept
  // an empty list and refuse any copy (FailedPrecondition), as a backend without swap space does.
  virtual absl::Status SwapOut(std::span<const SwapCopy> copies);
  virtual absl::Status SwapIn(std::span<const SwapCopy> copies);
  virtual int num_swap_pages() const { return 0; }  // slots of the swap space; 0: none

  virtual int page_size() const = 0;
  virtual int num_pages() const = 0;
  virtual const common::ModelConfig& config() const = 0;
  virtual std::string name() const = 0;
  virtual size_t kv_bytes() const = 0;  // bytes of the KV arena
  // Device (GPU) memory this backend holds: weights, workspace and KV arena; 0 on the CPU.
  virtual size_t device_bytes() const { return 0; }
  // The most input tokens one Forward takes, where the backend sizes memory by it (the CUDA
  // workspace); 0: any count (the worker's --max-batch-tokens, or its default, bounds plans).
  virtual int max_batch_tokens() const { return 0; }
  // Prefill tokens of one sequence per plan that suit the hardware; 0: no preference (the
  // scheduler's default).
  virtual int preferred_prefill_chunk() const { return 0; }

  // Moves the part times gathered since the last call into `totals` (adds them) and reports
  // whether this backend times its parts at all (the CPU backend does; the others do not).
  bool TakeForwardParts(ForwardPartTotals* totals);

 protected:
  // Waits for the masks of the ForwardSampleMasksPending call in progress, if any.
  void AwaitMasks() {
    if (pending_masks_ != nullptr) pending_masks_->Wait();
  }

  // Where a backend that times its parts adds them (TakeForwardParts); null for the others,
  // so that their timers cost nothing. Set once, in the backend's constructor.
  ForwardPartTotals* part_totals_ = nullptr;

 private:
  std::vector<float> logits_;              // ForwardSample's scratch on the host path
  PendingMasks* pending_masks_ = nullptr;  // during ForwardSampleMasksPending, when overlapped
};

// The checks every backend's Forward starts with (see the contract above): InvalidArgument
// naming the entry and the limit, or OK.
absl::Status ValidateBatch(std::span<const SeqInput> batch, const common::ModelConfig& config,
                           int page_size, int num_pages);

}  // namespace pagoda::worker
