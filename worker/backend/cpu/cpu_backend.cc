#include "worker/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
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
  if (c.head_dim > cpu::kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrFormat("CpuBackend head_dim %d exceeds the limit %d",
                                                      c.head_dim, cpu::kMaxHeadDim));
  }
  ASSIGN_OR_RETURN(cpu::CpuIsa isa, cpu::ResolveCpuIsa(options.kernels));
  CpuBackendOptions resolved = options;
  resolved.quantize_activations =
      options.quantize_activations.value_or(cpu::HasIntegerProducts(isa));
  int threads = options.num_threads;
  if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  PAGODA_LOG(kInfo, "cpu",
             "kernels %s (asked: %s; best here: %s), %d threads, weights %.1f MiB, %s activations "
             "for quantized weights",
             cpu::CpuIsaName(isa), options.kernels, cpu::CpuIsaName(cpu::BestSupportedIsa()),
             threads, static_cast<double>(model->weight_bytes()) / (1 << 20),
             *resolved.quantize_activations ? "8-bit" : "float");
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(std::move(model), resolved, threads, isa, std::move(arena)));
}

CpuBackend::CpuBackend(std::shared_ptr<const LlamaModel> model, const CpuBackendOptions& options,
                       int num_threads, cpu::CpuIsa isa, cpu::KvArena arena)
    : model_(std::move(model)),
      options_(options),
      pool_(std::make_unique<cpu::ThreadPool>(num_threads)),
      arena_(std::move(arena)) {
  const size_t per_thread = cpu::ScratchFloatsPerThread();
  scratch_.assign(per_thread * static_cast<size_t>(num_threads), 0.0f);
  ctx_ = {&cpu::Kernels(isa), pool_.get(),   scratch_.data(),
          per_thread,         &activations_, *options.quantize_activations};
  part_totals_ = &parts_;
}

namespace {

// FLOPs of products of `tokens` rows by each weight matrix (a multiply and an add per weight).
double ProductFlops(int tokens, std::initializer_list<const WeightMatrix*> weights) {
  double flops = 0;
  for (const WeightMatrix* w : weights) flops += 2.0 * tokens * w->rows * w->cols;
  return flops;
}

}  // namespace

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
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  cpu::GatherRows(ctx_, model_->token_embedding(), token_ids_.data(), num_tokens_, x_.data());
}

void CpuBackend::NormInput(const std::vector<float>& weight) {
  const common::ModelConfig& c = config();
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  cpu::RmsNorm(ctx_, {x_.data(), weight.data(), xn_.data(), num_tokens_, c.dim, c.rms_eps});
}

void CpuBackend::ProjectQkv(const LlamaLayerWeights& w) {
  const int n = num_tokens_;
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kQkvProducts,
                                 ProductFlops(n, {&w.wq, &w.wk, &w.wv}));
    const cpu::MatMulParams products[] = {{xn_.data(), &w.wq, q_.data(), n},
                                          {xn_.data(), &w.wk, k_.data(), n},
                                          {xn_.data(), &w.wv, v_.data(), n}};
    cpu::MatMul(ctx_, products);
  }
  // qwen2 biases, qwen3 per-head Q/K RMSNorm: after the projections, before RoPE.
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  ApplyQkvHooks(config(), w.arch, n, q_.data(), k_.data(), v_.data());
}

void CpuBackend::PositionEncode() {
  const common::ModelConfig& c = config();
  const int n = num_tokens_;
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  cpu::ApplyRope({q_.data(), rope_cos_.data(), rope_sin_.data(), n, c.n_heads, c.head_dim});
  cpu::ApplyRope({k_.data(), rope_cos_.data(), rope_sin_.data(), n, c.n_kv_heads, c.head_dim});
}

void CpuBackend::AttendOverPages(int layer) {
  const common::ModelConfig& c = config();
  const int n = num_tokens_;
  // Scores and weighted values: 2 FLOPs per position seen per head dimension, each.
  double flops = 0;
  for (int t = 0; t < n; ++t) flops += 4.0 * (positions_[t] + 1) * c.head_dim * c.n_heads;
  const ForwardPartTimer timer(&parts_, ForwardPart::kAttention, flops);
  // All new K/V are written before any token attends, so chunk tokens see each other.
  cpu::WriteKv(ctx_, {k_.data(), v_.data(), positions_.data(), page_tables_.data(), arena_.k(layer),
                      arena_.v(layer), n, c.kv_dim(), options_.page_size});
  cpu::PagedAttention(
      ctx_, {q_.data(), arena_.k(layer), arena_.v(layer), positions_.data(), page_tables_.data(),
             attn_.data(), n, c.n_heads, c.n_kv_heads, c.head_dim, options_.page_size,
             1.0f / std::sqrt(static_cast<float>(c.head_dim))});
}

void CpuBackend::ProjectOutput(const LlamaLayerWeights& w) {
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kOutputProduct,
                                 ProductFlops(num_tokens_, {&w.wo}));
    const cpu::MatMulParams product[] = {{attn_.data(), &w.wo, proj_.data(), num_tokens_}};
    cpu::MatMul(ctx_, product);
  }
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  cpu::AddInPlace(ctx_, x_.data(), proj_.data(), num_tokens_, config().dim);
}

void CpuBackend::AttentionBlock(int layer) {
  const LlamaLayerWeights& w = model_->layer(layer);
  NormInput(w.attn_norm);
  ProjectQkv(w);
  PositionEncode();
  AttendOverPages(layer);
  ProjectOutput(w);
}

void CpuBackend::FeedForwardBlock(int layer) {
  const common::ModelConfig& c = config();
  const LlamaLayerWeights& w = model_->layer(layer);
  const int n = num_tokens_;
  NormInput(w.ffn_norm);
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kGateUpProducts,
                                 ProductFlops(n, {&w.w_gate, &w.w_up}));
    const cpu::MatMulParams gate_up[] = {{xn_.data(), &w.w_gate, gate_.data(), n},
                                         {xn_.data(), &w.w_up, up_.data(), n}};
    cpu::MatMul(ctx_, gate_up);
  }
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
    cpu::SwiGlu(ctx_, gate_.data(), up_.data(), n, c.ffn_dim);
  }
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kDownProduct, ProductFlops(n, {&w.w_down}));
    const cpu::MatMulParams down[] = {{gate_.data(), &w.w_down, proj_.data(), n}};
    cpu::MatMul(ctx_, down);
  }
  const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
  cpu::AddInPlace(ctx_, x_.data(), proj_.data(), n, c.dim);
}

void CpuBackend::ComputeLogits(std::vector<float>* logits) {
  const common::ModelConfig& c = config();
  const int rows = static_cast<int>(logit_rows_.size());
  const size_t dim = static_cast<size_t>(c.dim);
  std::optional<ForwardPartTimer> timer(std::in_place, &parts_, ForwardPart::kElementwise);
  // Gather the last hidden state of each sequence that wants logits (rows <= T).
  for (int r = 0; r < rows; ++r) {
    std::copy_n(x_.data() + logit_rows_[r] * dim, dim, proj_.data() + r * dim);
  }
  cpu::RmsNorm(ctx_,
               {proj_.data(), model_->output_norm().data(), xn_.data(), rows, c.dim, c.rms_eps});
  logits->resize(static_cast<size_t>(rows) * c.vocab_size);
  timer.emplace(&parts_, ForwardPart::kLogitsProduct, ProductFlops(rows, {&model_->output()}));
  const cpu::MatMulParams product[] = {{xn_.data(), &model_->output(), logits->data(), rows}};
  cpu::MatMul(ctx_, product);
}

absl::Status CpuBackend::InitSwapSpace(int64_t num_slots) {
  if (swap_) return absl::FailedPreconditionError("the cpu backend's swap space exists already");
  if (num_slots <= 0 || num_slots > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("swap space of %d slots: must be in [1, 2^31)", num_slots));
  }
  cpu::KvArenaShape shape = arena_.shape();
  shape.num_pages = static_cast<int>(num_slots);
  ASSIGN_OR_RETURN(cpu::KvArena swap,
                   cpu::KvArena::Create(shape, std::numeric_limits<size_t>::max()));
  swap_ = std::move(swap);
  return absl::OkStatus();
}

absl::Status CpuBackend::SwapOut(std::span<const SwapCopy> copies) {
  if (!swap_) return Backend::SwapOut(copies);
  for (const SwapCopy& c : copies) cpu::KvArena::CopyPage(arena_, c.page, *swap_, c.slot);
  return absl::OkStatus();
}

absl::Status CpuBackend::SwapIn(std::span<const SwapCopy> copies) {
  if (!swap_) return Backend::SwapIn(copies);
  for (const SwapCopy& c : copies) cpu::KvArena::CopyPage(*swap_, c.slot, arena_, c.page);
  return absl::OkStatus();
}

absl::Status CpuBackend::Forward(std::span<const SeqInput> batch, std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("Forward needs a logits vector");
  {
    const ForwardPartTimer timer(&parts_, ForwardPart::kElementwise);
    RETURN_IF_ERROR(ValidateBatch(batch, config(), options_.page_size, options_.num_pages));
    Flatten(batch);
    logits->clear();
  }
  if (num_tokens_ == 0) return absl::OkStatus();
  Embed();
  for (int l = 0; l < config().n_layers; ++l) {
    AttentionBlock(l);
    FeedForwardBlock(l);
  }
  ComputeLogits(logits);
  return absl::OkStatus();
}

}  // namespace pagoda::worker
