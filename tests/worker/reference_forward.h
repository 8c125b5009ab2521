// A dense, unpaged, single-sequence Llama forward pass for tests, written independently of the
// CPU backend's kernels: double accumulation, a dense per-layer KV history, two-pass softmax and
// RoPE angles computed per pair. Slow and obvious on purpose; it is the oracle the batched,
// paged backends are compared against.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "common/fp16.h"
#include "worker/model/llama_model.h"

namespace pagoda::testing {

// x with every element rounded to F16 (to nearest even) and back: what a KV cache of F16 holds
// (the CPU backend's kv_arena.h, llama.cpp's default cache type).
inline std::vector<double> ToHalfPrecision(std::vector<double> x) {
  for (double& e : x) e = common::F16ToFloat(common::FloatToF16(static_cast<float>(e)));
  return x;
}

class ReferenceLlama {
 public:
  explicit ReferenceLlama(const worker::LlamaModel& model)
      : m_(model), c_(model.config()), k_(c_.n_layers), v_(c_.n_layers) {}

  int position() const { return pos_; }

  // Feeds one token at the next position; returns the logits that follow it.
  std::vector<float> Step(int32_t token) {
    std::vector<double> x(c_.dim);
    for (int i = 0; i < c_.dim; ++i) {
      x[i] = Dense(m_.token_embedding())[static_cast<size_t>(token) * c_.dim + i];
    }
    for (int l = 0; l < c_.n_layers; ++l) Layer(l, x);
    std::vector<double> xn = Norm(x, m_.output_norm().data());
    std::vector<double> logits = Matvec(m_.output(), xn, c_.vocab_size);
    ++pos_;
    return std::vector<float>(logits.begin(), logits.end());
  }

 private:
  std::vector<double> Norm(const std::vector<double>& x, const float* w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c_.rms_eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
    return out;
  }

  // The matrix decoded to float32 once (weights may be stored quantized).
  const float* Dense(const worker::WeightMatrix& m) {
    std::vector<float>& d = dense_[&m];
    if (d.empty()) d = m.ToFloat();
    return d.data();
  }

  // W is [rows][x.size()] row-major.
  std::vector<double> Matvec(const worker::WeightMatrix& m, const std::vector<double>& x,
                             int rows) {
    const float* w = Dense(m);
    std::vector<double> out(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (size_t i = 0; i < x.size(); ++i) s += w[static_cast<size_t>(r) * x.size() + i] * x[i];
      out[r] = s;
    }
    return out;
  }

  void Rope(std::vector<double>& v, int heads) const {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < c_.head_dim; i += 2) {
        const double freq =
            1.0 / std::pow(static_cast<double>(c_.rope_base), static_cast<double>(i) / c_.head_dim);
        const double a = pos_ * freq;
        double& x0 = v[h * c_.head_dim + i];
        double& x1 = v[h * c_.head_dim + i + 1];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a);
        const double r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = r0;
        x1 = r1;
      }
    }
  }

  void Layer(int l, std::vector<double>& x) {
    const worker::LlamaLayerWeights& w = m_.layer(l);
    const int hd = c_.head_dim;
    std::vector<double> xn = Norm(x, w.attn_norm.data());
    std::vector<double> q = Matvec(w.wq, xn, c_.q_dim());
    std::vector<double> k = Matvec(w.wk, xn, c_.kv_dim());
    std::vector<double> v = Matvec(w.wv, xn, c_.kv_dim());
    Rope(q, c_.n_heads);
    Rope(k, c_.n_kv_heads);
    // The cache holds F16 (the CPU backend's kv_arena.h, llama.cpp's default cache type).
    k_[l].push_back(ToHalfPrecision(k));
    v_[l].push_back(ToHalfPrecision(v));
    std::vector<double> att(c_.q_dim(), 0.0);
    const int n = static_cast<int>(k_[l].size());
    for (int h = 0; h < c_.n_heads; ++h) {
      const int kvh = h * c_.n_kv_heads / c_.n_heads;
      std::vector<double> scores(n);
      double mx = -1e300;
      for (int p = 0; p < n; ++p) {
        double s = 0;
        for (int d = 0; d < hd; ++d) s += q[h * hd + d] * k_[l][p][kvh * hd + d];
        scores[p] = s / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, scores[p]);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - mx));
      for (int p = 0; p < n; ++p) {
        for (int d = 0; d < hd; ++d) att[h * hd + d] += scores[p] / sum * v_[l][p][kvh * hd + d];
      }
    }
    std::vector<double> o = Matvec(w.wo, att, c_.dim);
    for (int i = 0; i < c_.dim; ++i) x[i] += o[i];
    xn = Norm(x, w.ffn_norm.data());
    std::vector<double> g = Matvec(w.w_gate, xn, c_.ffn_dim);
    std::vector<double> u = Matvec(w.w_up, xn, c_.ffn_dim);
    for (int i = 0; i < c_.ffn_dim; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    std::vector<double> d = Matvec(w.w_down, g, c_.dim);
    for (int i = 0; i < c_.dim; ++i) x[i] += d[i];
  }

  const worker::LlamaModel& m_;
  const common::ModelConfig& c_;
  int pos_ = 0;
  std::map<const worker::WeightMatrix*, std::vector<float>> dense_;
  std::vector<std::vector<std::vector<double>>> k_;  // [layer][pos][kv_dim]
  std::vector<std::vector<std::vector<double>>> v_;
};

}  // namespace pagoda::testing
