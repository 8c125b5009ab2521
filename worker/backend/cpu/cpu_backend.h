// CPU backend: the full Llama forward pass over a flat ragged batch, with the same paged KV
// layout as the GPU backend. Weights stay in their stored types (F32/F16/BF16 and the GGUF
// quantized types of weight_matrix.h); kernels come from the table of the best instruction set
// the CPU has (or the one `kernels` names), threads from a persistent pool.
//
// Contract (beyond Backend's): batch-invariant and thread-count-invariant results: a token's
// logits are bitwise identical whatever else shares its batch, however its pages are laid out,
// and however many threads run, for every kernel table. Weight matrices are read once per
// Forward (all tokens of the batch go through each weight panel together: one GEMM per weight).
// Not thread-safe: one caller at a time. The swap space (InitSwapSpace) is a second KvArena of
// the same page shape in host memory, its pages the slots; swaps copy each layer's K and V.
//
// The forward pass is a sequence of named steps (Embed, then per layer AttentionBlock =
// NormInput, ProjectQkv, PositionEncode, AttendOverPages, ProjectOutput; FeedForwardBlock; then
// ComputeLogits) so architecture variants change one step each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/backend/cpu/kv_arena.h"
#include "worker/backend/cpu/thread_pool.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {

struct CpuBackendOptions {
  int page_size = 16;
  int num_pages = 0;             // required, > 0
  int num_threads = 0;           // 0 = hardware concurrency
  std::string kernels = "auto";  // auto, portable, avx2, avx512, avx512vnni, avx512amx
  // true: quantized weights multiply activations quantized to 8 bits (as llama.cpp does);
  // false: they are decoded to float (float activations). Unset: 8-bit where the kernel table
  // has integer dot products (cpu::HasIntegerProducts), float elsewhere (its 8-bit products are
  // the portable code there, slower than decoding: bench/journal/cpu-kernel-notes.md).
  std::optional<bool> quantize_activations = std::nullopt;
  size_t max_kv_bytes = size_t{64} << 30;
};

class CpuBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(std::shared_ptr<const LlamaModel> model,
                                                            const CpuBackendOptions& options);

  absl::Status Forward(std::span<const SeqInput> batch, std::vector<float>* logits) override;

  absl::Status CopyPages(std::span<const PageCopy> copies) override {
    for (const PageCopy& c : copies) arena_.CopyPage(c.src, c.dst);
    return absl::OkStatus();
  }
  absl::Status InitSwapSpace(int64_t num_slots) override;
  absl::Status SwapOut(std::span<const SwapCopy> copies) override;
  absl::Status SwapIn(std::span<const SwapCopy> copies) override;
  int num_swap_pages() const override { return swap_ ? swap_->shape().num_pages : 0; }
  int page_size() const override { return options_.page_size; }
  // Whether quantized weights multiply 8-bit activations (CpuBackendOptions, resolved).
  bool quantizes_activations() const { return ctx_.quantize_activations; }
  int num_pages() const override { return options_.num_pages; }
  const common::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cpu"; }
  int num_threads() const { return pool_->size(); }
  cpu::CpuIsa isa() const { return ctx_.kernels->isa; }
  size_t kv_bytes() const override { return arena_.bytes(); }

 private:
  // `options` as Create resolved them (quantize_activations set).
  CpuBackend(std::shared_ptr<const LlamaModel> model, const CpuBackendOptions& options,
             int num_threads, cpu::CpuIsa isa, cpu::KvArena arena);

  void Flatten(std::span<const SeqInput> batch);  // fills the per-token arrays and RoPE tables
  void Embed();
  // x += Wo · Attention(...) of RmsNorm(x).
  void AttentionBlock(int layer);
  void NormInput(const std::vector<float>& weight);  // xn_ = RmsNorm(x_) * weight
  void ProjectQkv(const LlamaLayerWeights& w);       // q_, k_, v_ from xn_
  void PositionEncode();                             // RoPE on q_ and k_
  void AttendOverPages(int layer);                   // writes k_/v_ to pages, attn_ = softmax
  void ProjectOutput(const LlamaLayerWeights& w);    // x_ += Wo attn_
  // x += Wdown · (silu(Wgate xn) * (Wup xn)), xn = RmsNorm(x).
  void FeedForwardBlock(int layer);
  void ComputeLogits(std::vector<float>* logits);

  std::shared_ptr<const LlamaModel> model_;
  CpuBackendOptions options_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  common::AlignedVector<float> scratch_;        // per-thread weight panels
  common::AlignedVector<uint8_t> activations_;  // quantized activations (ExecContext)
  cpu::ExecContext ctx_;
  cpu::KvArena arena_;
  std::optional<cpu::KvArena> swap_;  // the swap space, once InitSwapSpace made it
  ForwardPartTotals parts_;           // what the forward passes took, by part (TakeForwardParts)

  // Per-Forward scratch, reused across calls. T = tokens in the batch.
  int num_tokens_ = 0;
  std::vector<int32_t> token_ids_;           // [T]
  std::vector<int32_t> positions_;           // [T]
  std::vector<const int32_t*> page_tables_;  // [T]
  std::vector<int32_t> logit_rows_;          // token index of each want_logits sequence
  common::AlignedVector<float> x_;           // [T][dim] residual stream
  common::AlignedVector<float> xn_;          // [T][dim] normalized
  common::AlignedVector<float> q_;           // [T][q_dim]
  common::AlignedVector<float> k_;           // [T][kv_dim]
  common::AlignedVector<float> v_;           // [T][kv_dim]
  common::AlignedVector<float> attn_;        // [T][q_dim]
  common::AlignedVector<float> proj_;        // [T][dim]
  common::AlignedVector<float> gate_;        // [T][ffn_dim]
  common::AlignedVector<float> up_;          // [T][ffn_dim]
  std::vector<float> rope_cos_;              // [T][head_dim / 2]
  std::vector<float> rope_sin_;              // [T][head_dim / 2]
};

}  // namespace pagoda::worker
