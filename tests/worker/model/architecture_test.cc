// The architectures (architecture.h) against an independent dense reference written here: for
// llama, qwen2 (Q/K/V biases), qwen3 (per-head Q/K RMSNorm) and Llama 3.1 RoPE scaling (keys
// or a rope_freqs.weight tensor),
// pagoda-make-model's random-weight model through LlamaModel + CpuBackend (paged, prefill then
// decode) gives the log-probabilities of a reference that reads the GGUF tensors as stored:
// NEOX rotation of the halves for qwen (no weight permutation), the scaled frequencies computed
// from the formula, double precision throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "common/gguf_reader.h"
#include "modelgen/random_model.h"
#include "tests/support/status_assertions.h"
#include "tests/worker/reference_forward.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/llama_model.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker {
namespace {

using Vec = std::vector<double>;

class DenseReference {
 public:
  explicit DenseReference(const common::GgufFile& f)
      : f_(f), c_(*common::ReadModelConfig(f)), k_(c_.n_layers), v_(c_.n_layers) {
    const int half = c_.head_dim / 2;
    const Vec factors = Has("rope_freqs.weight") ? T("rope_freqs.weight") : Vec();
    for (int i = 0; i < half; ++i) {
      double inv = std::pow(c_.rope_base, -2.0 * i / c_.head_dim);
      if (!factors.empty()) {
        inv /= factors[i];
      } else if (c_.rope_scaling_factor > 0) {
        const double wavelen = 2 * std::numbers::pi / inv;
        const double ratio = c_.rope_original_context / wavelen;  // periods in the context
        if (ratio < c_.rope_low_freq_factor) {
          inv /= c_.rope_scaling_factor;
        } else if (ratio <= c_.rope_high_freq_factor) {
          const double s = (ratio - c_.rope_low_freq_factor) /
                           (c_.rope_high_freq_factor - c_.rope_low_freq_factor);
          inv = (1 - s) * inv / c_.rope_scaling_factor + s * inv;
        }
      }
      inv_freq_.push_back(inv);
    }
  }

  // Log-probabilities after feeding `token` at the next position.
  Vec Step(int32_t token) {
    Vec x(c_.dim);
    const Vec embd = T("token_embd.weight");
    for (int i = 0; i < c_.dim; ++i) x[i] = embd[static_cast<size_t>(token) * c_.dim + i];
    for (int l = 0; l < c_.n_layers; ++l) Layer(l, x);
    const bool tied = f_.FindTensor("output.weight") == nullptr;
    Vec logits = MatVec(T(tied ? "token_embd.weight" : "output.weight"),
                        Norm(x, T("output_norm.weight")), c_.vocab_size);
    ++pos_;
    double max = logits[0], sum = 0;
    for (double v : logits) max = std::max(max, v);
    for (double v : logits) sum += std::exp(v - max);
    for (double& v : logits) v -= max + std::log(sum);
    return logits;
  }

 private:
  Vec T(const std::string& name) const {
    const common::GgufTensor* t = f_.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    // Any stored type, decoded as llama.cpp does (quantized files test the loader's row moves).
    const absl::StatusOr<WeightMatrix> m = CopyWeightMatrix(*t);
    EXPECT_OK(m);
    const std::vector<float> data = m->ToFloat();
    return Vec(data.begin(), data.end());
  }
  bool Has(const std::string& name) const { return f_.FindTensor(name) != nullptr; }

  Vec Norm(const Vec& x, const Vec& w, size_t offset = 0, size_t n = 0) const {
    if (n == 0) n = x.size();
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
    const double inv = 1 / std::sqrt(ss / n + c_.rms_eps);
    Vec out(x);
    for (size_t i = 0; i < n; ++i) out[offset + i] = x[offset + i] * inv * w[i];
    return out;
  }
  static Vec MatVec(const Vec& w, const Vec& x, int rows) {
    Vec y(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (size_t i = 0; i < x.size(); ++i) y[r] += w[r * x.size() + i] * x[i];
    }
    return y;
  }
  void Rope(Vec& x, int heads) const {
    const int half = c_.head_dim / 2;
    const bool neox = c_.architecture != "llama";
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const size_t a = h * c_.head_dim + (neox ? i : 2 * i);
        const size_t b = h * c_.head_dim + (neox ? i + half : 2 * i + 1);
        const double angle = pos_ * inv_freq_[i], xa = x[a], xb = x[b];
        x[a] = xa * std::cos(angle) - xb * std::sin(angle);
        x[b] = xa * std::sin(angle) + xb * std::cos(angle);
      }
    }
  }

  void Layer(int l, Vec& x) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const Vec xn = Norm(x, T(p + "attn_norm.weight"));
    Vec q = MatVec(T(p + "attn_q.weight"), xn, c_.q_dim());
    Vec k = MatVec(T(p + "attn_k.weight"), xn, c_.kv_dim());
    Vec v = MatVec(T(p + "attn_v.weight"), xn, c_.kv_dim());
    if (Has(p + "attn_q.bias")) {
      const Vec bq = T(p + "attn_q.bias"), bk = T(p + "attn_k.bias"), bv = T(p + "attn_v.bias");
      for (int i = 0; i < c_.q_dim(); ++i) q[i] += bq[i];
      for (int i = 0; i < c_.kv_dim(); ++i) k[i] += bk[i], v[i] += bv[i];
    }
    if (Has(p + "attn_q_norm.weight")) {
      for (int h = 0; h < c_.n_heads; ++h)
        q = Norm(q, T(p + "attn_q_norm.weight"), h * c_.head_dim, c_.head_dim);
      for (int h = 0; h < c_.n_kv_heads; ++h)
        k = Norm(k, T(p + "attn_k_norm.weight"), h * c_.head_dim, c_.head_dim);
    }
    Rope(q, c_.n_heads);
    Rope(k, c_.n_kv_heads);
    // The cache holds F16 (the CPU backend's kv_arena.h, llama.cpp's default cache type).
    k_[l].push_back(pagoda::testing::ToHalfPrecision(k));
    v_[l].push_back(pagoda::testing::ToHalfPrecision(v));
    Vec attn(c_.q_dim(), 0.0);
    const int group = c_.n_heads / c_.n_kv_heads;
    for (int h = 0; h < c_.n_heads; ++h) {
      const int kvh = h / group;
      Vec scores;
      for (const Vec& kt : k_[l]) {
        double s = 0;
        for (int i = 0; i < c_.head_dim; ++i)
          s += q[h * c_.head_dim + i] * kt[kvh * c_.head_dim + i];
        scores.push_back(s / std::sqrt(static_cast<double>(c_.head_dim)));
      }
      double max = scores[0], sum = 0;
      for (double s : scores) max = std::max(max, s);
      for (double& s : scores) sum += (s = std::exp(s - max));
      for (size_t t = 0; t < scores.size(); ++t) {
        for (int i = 0; i < c_.head_dim; ++i) {
          attn[h * c_.head_dim + i] += scores[t] / sum * v_[l][t][kvh * c_.head_dim + i];
        }
      }
    }
    const Vec o = MatVec(T(p + "attn_output.weight"), attn, c_.dim);
    for (int i = 0; i < c_.dim; ++i) x[i] += o[i];
    const Vec xf = Norm(x, T(p + "ffn_norm.weight"));
    Vec g = MatVec(T(p + "ffn_gate.weight"), xf, c_.ffn_dim);
    const Vec u = MatVec(T(p + "ffn_up.weight"), xf, c_.ffn_dim);
    for (int i = 0; i < c_.ffn_dim; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    const Vec d = MatVec(T(p + "ffn_down.weight"), g, c_.dim);
    for (int i = 0; i < c_.dim; ++i) x[i] += d[i];
  }

  const common::GgufFile& f_;
  common::ModelConfig c_;
  std::vector<double> inv_freq_;
  std::vector<std::vector<Vec>> k_, v_;  // [layer][position][kv_dim]
  int pos_ = 0;
};

std::vector<double> LogSoftmax(const float* logits, int n) {
  double max = logits[0], sum = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, static_cast<double>(logits[i]));
  for (int i = 0; i < n; ++i) sum += std::exp(logits[i] - max);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = logits[i] - max - std::log(sum);
  return out;
}

// With `quantized_activations`, quantized weights multiply 8-bit activations, which moves
// log-probabilities by a few hundredths: compared within the bound the llama.cpp comparisons
// use (quantized_model_test.cc); otherwise exactly up to float32 rounding.
void CheckArchitecture(const std::string& arch, float rope_scaling, bool rope_freqs = false,
                       common::GgmlType dtype = common::GgmlType::F32, bool k_m_mix = false,
                       bool quantized_activations = false) {
  modelgen::RandomModelOptions o;
  o.architecture = arch;
  o.rope_scaling_factor = rope_scaling;
  o.dtype = dtype;
  o.k_m_mix = k_m_mix;
  // K-quant blocks are 256 wide: those files need dim and ffn_dim multiples of 256.
  const bool k_quant = dtype == common::GgmlType::Q4_K || dtype == common::GgmlType::Q5_K ||
                       dtype == common::GgmlType::Q6_K;
  o.n_layers = 2;
  o.dim = k_quant ? 256 : 64;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.ffn_dim = k_quant ? 256 : 96;
  o.vocab_size = 320;
  o.context_length = 128;
  o.seed = 5;
  auto writer = modelgen::BuildRandomModel(o);
  ASSERT_OK(writer);
  if (rope_freqs) {  // llama.cpp's form of Llama 3.1 scaling: per-pair frequency divisors
    std::vector<float> factors(o.dim / o.n_heads / 2);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * static_cast<float>(i);
    ASSERT_OK(writer->AddFloatTensor("rope_freqs.weight", {static_cast<int64_t>(factors.size())},
                                     common::GgmlType::F32, factors));
  }
  auto file = common::GgufFile::FromBytes(writer->Serialize());
  ASSERT_OK(file);
  auto model = LlamaModel::Load(**file);
  ASSERT_OK(model);
  EXPECT_EQ((*model)->config().architecture, arch);
  CpuBackendOptions options{4, 32, 1};
  options.quantize_activations = quantized_activations;
  auto backend = CpuBackend::Create(*model, options);
  ASSERT_OK(backend);
  DenseReference reference(**file);
  // Positions reach 40 so that scaled and unscaled frequencies differ measurably.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(3 + (i * 37) % 300);
  std::vector<int32_t> pages(32);
  for (int i = 0; i < 32; ++i) pages[i] = i;
  const int prefill = 24;
  std::vector<float> logits;
  SeqInput in{{tokens.data(), static_cast<size_t>(prefill)}, 0, pages, true};
  ASSERT_OK((*backend)->Forward({&in, 1}, &logits));
  std::vector<double> expected;
  for (int i = 0; i < prefill; ++i) expected = reference.Step(tokens[i]);
  double worst = 0;
  for (int i = prefill;; ++i) {
    const std::vector<double> got = LogSoftmax(logits.data(), o.vocab_size);
    for (int v = 0; v < o.vocab_size; ++v) worst = std::max(worst, std::abs(got[v] - expected[v]));
    if (i == static_cast<int>(tokens.size())) break;
    SeqInput step{{&tokens[i], 1}, i, pages, true};
    ASSERT_OK((*backend)->Forward({&step, 1}, &logits));
    expected = reference.Step(tokens[i]);
  }
  EXPECT_LT(worst, quantized_activations ? 0.12 : 2e-4)
      << arch << " " << common::GgmlTypeName(dtype) << " max |log-prob difference|"
      << (quantized_activations ? " with 8-bit activations" : "");
}

TEST(ArchitectureTest, LlamaMatchesTheDenseReference) { CheckArchitecture("llama", 0); }
TEST(ArchitectureTest, Qwen2MatchesTheDenseReference) { CheckArchitecture("qwen2", 0); }
TEST(ArchitectureTest, Qwen3MatchesTheDenseReference) { CheckArchitecture("qwen3", 0); }
TEST(ArchitectureTest, Llama31RopeScalingMatchesTheDenseReference) {
  CheckArchitecture("llama", 8.0f);
}

TEST(ArchitectureTest, RopeFreqsTensorMatchesTheDenseReference) {
  CheckArchitecture("llama", 0, /*rope_freqs=*/true);
  CheckArchitecture("qwen3", 0, /*rope_freqs=*/true);
}

// The Q/K row permutation of Qwen's halves-RoPE moves whole quantized rows: quantized files of
// every architecture give the dense reference's (dequantized) results, exactly with float
// activations, and within the 8-bit activations' rounding with them.
TEST(ArchitectureTest, QuantizedFilesMatchTheDenseReference) {
  for (const bool quantized_activations : {false, true}) {
    CheckArchitecture("qwen2", 0, false, common::GgmlType::Q8_0, false, quantized_activations);
    CheckArchitecture("qwen3", 0, false, common::GgmlType::Q4_0, false, quantized_activations);
    CheckArchitecture("qwen3", 8.0f, false, common::GgmlType::Q4_K, /*k_m_mix=*/true,
                      quantized_activations);
    CheckArchitecture("qwen2", 0, false, common::GgmlType::Q5_K, /*k_m_mix=*/true,
                      quantized_activations);
  }
}

TEST(ArchitectureTest, RefusesUnknownArchitecturesNamingTheSupportedOnes) {
  modelgen::GgufWriter w;
  w.AddString("general.architecture", "mamba");
  auto file = common::GgufFile::FromBytes(w.Serialize());
  ASSERT_OK(file);
  auto config = common::ReadModelConfig(**file);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "model architecture is \"mamba\"; supported: \"llama\", \"qwen2\", \"qwen3\"");
}

}  // namespace
}  // namespace pagoda::worker
