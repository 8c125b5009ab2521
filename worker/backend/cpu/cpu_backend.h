// CPU reference backend: the full Llama forward pass over a flat ragged batch, with the same
// paged KV layout as the GPU backend.
//
// Contract (beyond Backend's): batch-invariant and thread-count-invariant results: a token's
// logits are bitwise identical whatever else shares its batch, however its pages are laid out,
// and however many threads run. Weight matrices are read once per Forward (all tokens of the
// batch go through each weight block together). Not thread-safe: one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/kv_arena.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {

struct CpuBackendOptions {
  int page_size = 16;
  int num_pages = 0;    // required, > 0
  int num_threads = 0;  // 0 = hardware concurrency
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
  int page_size() const override { return options_.page_size; }
  int num_pages() const override { return options_.num_pages; }
  const common::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cpu"; }
  int num_threads() const { return num_threads_; }
  size_t kv_bytes() const override { return arena_.bytes(); }

 private:
  CpuBackend(std::shared_ptr<const LlamaModel> model, const CpuBackendOptions& options,
             int num_threads, cpu::KvArena arena);

  void Flatten(std::span<const SeqInput> batch);  // fills the per-token arrays and RoPE tables
  void Embed();
  void RunLayer(int layer);
  void ComputeLogits(std::vector<float>* logits);

  std::shared_ptr<const LlamaModel> model_;
  CpuBackendOptions options_;
  int num_threads_;
  cpu::KvArena arena_;

  // Per-Forward scratch, reused across calls. T = tokens in the batch.
  int num_tokens_ = 0;
  std::vector<int32_t> token_ids_;           // [T]
  std::vector<int32_t> positions_;           // [T]
  std::vector<const int32_t*> page_tables_;  // [T]
  std::vector<int32_t> logit_rows_;          // token index of each want_logits sequence
  std::vector<float> x_;                     // [T][dim] residual stream
  std::vector<float> xn_;                    // [T][dim] normalized
  std::vector<float> q_;                     // [T][q_dim]
  std::vector<float> k_;                     // [T][kv_dim]
  std::vector<float> v_;                     // [T][kv_dim]
  std::vector<float> attn_;                  // [T][q_dim]
  std::vector<float> proj_;                  // [T][dim]
  std::vector<float> gate_;                  // [T][ffn_dim]
  std::vector<float> up_;                    // [T][ffn_dim]
  std::vector<float> rope_cos_;              // [T][head_dim / 2]
  std::vector<float> rope_sin_;              // [T][head_dim / 2]
};

}  // namespace pagoda::worker
