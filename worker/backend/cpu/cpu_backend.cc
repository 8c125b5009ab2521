#include "worker/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/model/architecture.h"

namespace pagoda::worker {

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    std::shared_ptr<const LlamaModel> model, const CpuBackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CpuBackend needs a model");
  if (options.page_size <= 0 || options.num_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CpuBackend page_size (%d) and num_pages (%d) must be positive",
                        options.page_size, options.num_pages));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CpuBackend num_threads %d must be >= 0", options.num_threads));
  }
  const common::ModelConfig& c = model->config();
  ASSIGN_OR_RETURN(cpu::KvArena arena,
                   cpu::KvArena::Create(
                       {c.n_layers, options.num_pages, options.page_size, c.n_kv_heads, c.head_dim},
                       options.max_kv_bytes));
  int threads = options.num_threads;
  if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(std::move(model), options, threads, std::move(arena)));
}

CpuBackend::CpuBackend(std::shared_ptr<const LlamaModel> model, const CpuBackendOptions& options,
                       int num_threads, cpu::KvArena arena)
    : model_(std::move(model)),
      options_(options),
      num_threads_(num_threads),
      arena_(std::move(arena)) {}

void CpuBackend::Flatten(std::span<const SeqInput> batch) {
  token_ids_.clear();
  positions_.clear();
  page_tables_.clear();
  logit_rows_.clear();
  for (const SeqInput& in : batch) {
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      token_ids_.push_back(in.tokens[i]);
      positions_.push_back(in.start_pos + static_cast<int32_t>(i));
      page_tables_.push_back(in.pages.data());
    }
    if (in.want_logits) logit_rows_.push_back(static_cast<int32_t>(token_ids_.size()) - 1);
  }
  num_tokens_ = static_cast<int>(token_ids_.size());
  const common::ModelConfig& c = config();
  const size_t t = static_cast<size_t>(num_tokens_);
  x_.resize(t * c.dim);
  xn_.resize(t * c.dim);
  q_.resize(t * c.q_dim());
  k_.resize(t * c.kv_dim());
  v_.resize(t * c.kv_dim());
  attn_.resize(t * c.q_dim());
  proj_.resize(t * c.dim);
  gate_.resize(t * c.ffn_dim);
  up_.resize(t * c.ffn_dim);
  rope_cos_.resize(t * (c.head_dim / 2));
  rope_sin_.resize(t * (c.head_dim / 2));
  cpu::BuildRopeTables(
      {positions_.data(), rope_cos_.data(), rope_sin_.data(), num_tokens_, c.head_dim, c.rope_base,
       model_->rope_inv_freq().empty() ? nullptr : model_->rope_inv_freq().data()});
}

void CpuBackend::Embed() {
  const size_t dim = static_cast<size_t>(config().dim);
  const std::span<const float> table = model_->token_embedding();
  for (int t = 0; t < num_tokens_; ++t) {
    std::copy_n(table.data() + static_cast<size_t>(token_ids_[t]) * dim, dim, x_.data() + t * dim);
  }
}

void CpuBackend::RunLayer(int layer) {
  const common::ModelConfig& c = config();
  const LlamaLayerWeights& w = model_->layer(layer);
  const int n = num_tokens_, nt = num_threads_;
  // Attention block: x += Wo · Attention(RoPE(Wq xn), RoPE(Wk xn), Wv xn), xn = RmsNorm(x).
  cpu::RmsNorm({x_.data(), w.attn_norm.data(), xn_.data(), n, c.dim, c.rms_eps});
  cpu::MatMul({xn_.data(), w.wq.data(), q_.data(), n, c.dim, c.q_dim()}, nt);
  cpu::MatMul({xn_.data(), w.wk.data(), k_.data(), n, c.dim, c.kv_dim()}, nt);
  cpu::MatMul({xn_.data(), w.wv.data(), v_.data(), n, c.dim, c.kv_dim()}, nt);
  ApplyQkvHooks(c, w.arch, n, q_.data(), k_.data(), v_.data());  // qwen2 bias, qwen3 norms
  cpu::ApplyRope({q_.data(), rope_cos_.data(), rope_sin_.data(), n, c.n_heads, c.head_dim});
  cpu::ApplyRope({k_.data(), rope_cos_.data(), rope_sin_.data(), n, c.n_kv_heads, c.head_dim});
  // All new K/V are written before any token attends, so chunk tokens see each other.
  cpu::WriteKv({k_.data(), v_.data(), positions_.data(), page_tables_.data(), arena_.k(layer),
                arena_.v(layer), n, c.kv_dim(), options_.page_size});
  cpu::PagedAttention({q_.data(), arena_.k(layer), arena_.v(layer), positions_.data(),
                       page_tables_.data(), attn_.data(), n, c.n_heads, c.n_kv_heads, c.head_dim,
                       options_.page_size, 1.0f / std::sqrt(static_cast<float>(c.head_dim))},
                      nt);
  cpu::MatMul({attn_.data(), w.wo.data(), proj_.data(), n, c.q_dim(), c.dim}, nt);
  cpu::AddInPlace(x_.data(), proj_.data(), proj_.size());
  // FFN block: x += Wdown · (silu(Wgate xn) * (Wup xn)), xn = RmsNorm(x).
  cpu::RmsNorm({x_.data(), w.ffn_norm.data(), xn_.data(), n, c.dim, c.rms_eps});
  cpu::MatMul({xn_.data(), w.w_gate.data(), gate_.data(), n, c.dim, c.ffn_dim}, nt);
  cpu::MatMul({xn_.data(), w.w_up.data(), up_.data(), n, c.dim, c.ffn_dim}, nt);
  cpu::SwiGlu(gate_.data(), up_.data(), gate_.size());
  cpu::MatMul({gate_.data(), w.w_down.data(), proj_.data(), n, c.ffn_dim, c.dim}, nt);
  cpu::AddInPlace(x_.data(), proj_.data(), proj_.size());
}

void CpuBackend::ComputeLogits(std::vector<float>* logits) {
  const common::ModelConfig& c = config();
  const int rows = static_cast<int>(logit_rows_.size());
  const size_t dim = static_cast<size_t>(c.dim);
  // Gather the last hidden state of each sequence that wants logits into xn_ (rows <= T).
  for (int r = 0; r < rows; ++r) {
    std::copy_n(x_.data() + logit_rows_[r] * dim, dim, proj_.data() + r * dim);
  }
  cpu::RmsNorm({proj_.data(), model_->output_norm().data(), xn_.data(), rows, c.dim, c.rms_eps});
  logits->resize(static_cast<size_t>(rows) * c.vocab_size);
  cpu::MatMul({xn_.data(), model_->output().data(), logits->data(), rows, c.dim, c.vocab_size},
              num_threads_);
}

absl::Status CpuBackend::Forward(std::span<const SeqInput> batch, std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("Forward needs a logits vector");
  RETURN_IF_ERROR(ValidateBatch(batch, config(), options_.page_size, options_.num_pages));
  Flatten(batch);
  logits->clear();
  if (num_tokens_ == 0) return absl::OkStatus();
  Embed();
  for (int l = 0; l < config().n_layers; ++l) RunLayer(l);
  ComputeLogits(logits);
  return absl::OkStatus();
}

}  // namespace pagoda::worker
