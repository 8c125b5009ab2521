#include "worker/model/architecture.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pagoda::worker {
namespace {

using common::GgufFile;
using common::ModelConfig;

// Reorders each head's rows of `row_bytes` bytes from NEOX order (pair i = rows i, i + half) to
// adjacent order (pair i = rows 2i, 2i + 1). `data` is [rows = heads * head_dim][row_bytes]; a
// row is whole (quantized blocks run along a row), so this works for any stored type.
void NeoxToAdjacent(uint8_t* data, size_t rows, int head_dim, size_t row_bytes) {
  const int half = head_dim / 2;
  std::vector<uint8_t> head(static_cast<size_t>(head_dim) * row_bytes);
  for (size_t h = 0; h < rows / head_dim; ++h) {
    uint8_t* base = data + h * head_dim * row_bytes;
    std::memcpy(head.data(), base, head.size());
    for (int i = 0; i < half; ++i) {
      std::memcpy(base + (2 * i) * row_bytes, head.data() + i * row_bytes, row_bytes);
      std::memcpy(base + (2 * i + 1) * row_bytes, head.data() + (i + half) * row_bytes, row_bytes);
    }
  }
}

void NeoxToAdjacent(WeightMatrix& m, int head_dim) {
  NeoxToAdjacent(m.bytes.data(), static_cast<size_t>(m.rows), head_dim, m.row_bytes);
}

void NeoxToAdjacent(std::vector<float>& v, int head_dim) {
  NeoxToAdjacent(reinterpret_cast<uint8_t*>(v.data()), v.size(), head_dim, sizeof(float));
}

void RmsNormHeads(float* x, const float* weight, int rows, int head_dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    float* h = x + static_cast<size_t>(r) * head_dim;
    double sum = 0;
    for (int i = 0; i < head_dim; ++i) sum += static_cast<double>(h[i]) * h[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / head_dim) + eps);
    for (int i = 0; i < head_dim; ++i) h[i] = h[i] * scale * weight[i];
  }
}

void AddBias(float* x, const std::vector<float>& bias, int n) {
  const size_t width = bias.size();
  for (int t = 0; t < n; ++t) {
    float* row = x + static_cast<size_t>(t) * width;
    for (size_t i = 0; i < width; ++i) row[i] += bias[i];
  }
}

}  // namespace

ArchitectureTraits TraitsOf(const ModelConfig& config) {
  ArchitectureTraits t;
  t.qkv_bias = config.architecture == "qwen2";
  t.qk_norm = config.architecture == "qwen3";
  t.neox_rope = config.architecture == "qwen2" || config.architecture == "qwen3";
  return t;
}

absl::Status LoadArchitectureLayer(const TensorLoader& load, const ModelConfig& c, int index,
                                   WeightMatrix& wq, WeightMatrix& wk,
                                   ArchitectureLayerWeights& out) {
  const ArchitectureTraits traits = TraitsOf(c);
  const std::string p = absl::StrCat("blk.", index, ".");
  if (traits.qkv_bias) {
    ASSIGN_OR_RETURN(out.bq, load(p + "attn_q.bias", {c.q_dim()}));
    ASSIGN_OR_RETURN(out.bk, load(p + "attn_k.bias", {c.kv_dim()}));
    ASSIGN_OR_RETURN(out.bv, load(p + "attn_v.bias", {c.kv_dim()}));
  }
  if (traits.qk_norm) {
    ASSIGN_OR_RETURN(out.q_norm, load(p + "attn_q_norm.weight", {c.head_dim}));
    ASSIGN_OR_RETURN(out.k_norm, load(p + "attn_k_norm.weight", {c.head_dim}));
  }
  if (traits.neox_rope) {
    NeoxToAdjacent(wq, c.head_dim);
    NeoxToAdjacent(wk, c.head_dim);
    for (std::vector<float>* v : {&out.bq, &out.bk, &out.q_norm, &out.k_norm}) {
      if (!v->empty()) NeoxToAdjacent(*v, c.head_dim);
    }
  }
  return absl::OkStatus();
}

void ApplyQkvHooks(const ModelConfig& c, const ArchitectureLayerWeights& w, int n, float* q,
                   float* k, float* v) {
  if (!w.bq.empty()) {
    AddBias(q, w.bq, n);
    AddBias(k, w.bk, n);
    AddBias(v, w.bv, n);
  }
  if (!w.q_norm.empty()) {
    RmsNormHeads(q, w.q_norm.data(), n * c.n_heads, c.head_dim, c.rms_eps);
    RmsNormHeads(k, w.k_norm.data(), n * c.n_kv_heads, c.head_dim, c.rms_eps);
  }
}

std::vector<float> ScaledRopeInvFrequencies(const ModelConfig& c) {
  if (!(c.rope_scaling_factor > 0)) return {};
  const int half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // Llama 3.1: stretch long wavelengths by the factor, keep short ones, blend in between.
  const double low_wavelen = c.rope_original_context / c.rope_low_freq_factor;
  const double high_wavelen = c.rope_original_context / c.rope_high_freq_factor;
  for (int i = 0; i < half; ++i) {
    const double base = std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.head_dim);
    const double wavelen = 2 * std::numbers::pi / base;
    double scaled = base;
    if (wavelen > low_wavelen) {
      scaled = base / c.rope_scaling_factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (c.rope_original_context / wavelen - c.rope_low_freq_factor) /
                            (c.rope_high_freq_factor - c.rope_low_freq_factor);
      scaled = (1 - smooth) * base / c.rope_scaling_factor + smooth * base;
    }
    inv[i] = static_cast<float>(scaled);
  }
  return inv;
}

absl::StatusOr<std::vector<float>> RopeInvFrequencies(const GgufFile& file,
                                                      const TensorLoader& load,
                                                      const ModelConfig& c) {
  if (file.FindTensor("rope_freqs.weight") == nullptr) return ScaledRopeInvFrequencies(c);
  const int half = c.head_dim / 2;
  ASSIGN_OR_RETURN(std::vector<float> factors, load("rope_freqs.weight", {half}));
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    if (!(factors[i] > 0) || !std::isfinite(factors[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_freqs.weight[", i, "] = ", factors[i], " must be positive"));
    }
    inv[i] = static_cast<float>(std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.head_dim) /
                                factors[i]);
  }
  return inv;
}

}  // namespace pagoda::worker
