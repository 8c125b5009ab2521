// What differs between the Llama-family architectures Pagoda runs, in one place. The forward
// pass is Llama's; an architecture adds only these pieces, through two hooks:
//
//   llama  plain Llama (Llama 2/3); RoPE on adjacent pairs (llama.cpp's converter permutes Q/K)
//   qwen2  + a bias on Q, K and V (attn_{q,k,v}.bias)
//   qwen3  + an RMSNorm over each head of Q and of K, before RoPE (attn_{q,k}_norm.weight)
//
// and, for any of them, Llama 3.1's RoPE frequency scaling (rope_freqs.weight, or the
// <arch>.rope.scaling.* keys read into ModelConfig).
//
// Contract:
//  * Qwen models rotate the halves of each head (NEOX: x[i] with x[i + head_dim/2]). Attention
//    scores are unchanged when Q and K permute their head dimensions the same way, so
//    LoadArchitectureLayer permutes the rows of Wq and Wk (and their biases and norm weights)
//    into the adjacent-pair order, and every backend keeps one RoPE kernel.
//  * ApplyQkvHooks runs on the host arrays right after the Q/K/V projections (before RoPE):
//    bias, then per-head RMSNorm; a no-op for llama.
//  * RopeInvFrequencies gives, per rotated pair i, the angle per position: base^(-2i/head_dim),
//    divided by rope_freqs[i] or scaled as Llama 3.1 does; empty when unscaled.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "common/model_config.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker {

struct ArchitectureTraits {
  bool qkv_bias = false;   // qwen2
  bool qk_norm = false;    // qwen3
  bool neox_rope = false;  // qwen2, qwen3: halves rotated (converted at load, see above)
};

// The traits of config.architecture (ReadModelConfig accepts only the known ones).
ArchitectureTraits TraitsOf(const common::ModelConfig& config);

// The per-layer weights only some architectures have; empty vectors otherwise.
struct ArchitectureLayerWeights {
  std::vector<float> bq;      // [n_heads * head_dim]
  std::vector<float> bk;      // [n_kv_heads * head_dim]
  std::vector<float> bv;      // [n_kv_heads * head_dim]
  std::vector<float> q_norm;  // [head_dim]
  std::vector<float> k_norm;  // [head_dim]
};

// The model loader's tensor reader: `name` as float32, its GGUF dims exactly `dims`.
using TensorLoader = std::function<absl::StatusOr<std::vector<float>>(
    const std::string& name, const std::vector<int64_t>& dims)>;

// Loads layer `index`'s architecture-specific tensors and converts the NEOX head order of `wq`
// and `wk` ([rows][dim], rows = heads * head_dim, any stored type: whole rows move) in place.
// Errors name the tensor.
absl::Status LoadArchitectureLayer(const TensorLoader& load, const common::ModelConfig& config,
                                   int index, WeightMatrix& wq, WeightMatrix& wk,
                                   ArchitectureLayerWeights& out);

// Adds the biases and normalizes each head of q and k, for `n` tokens:
// q [n][n_heads * head_dim], k and v [n][n_kv_heads * head_dim].
void ApplyQkvHooks(const common::ModelConfig& config, const ArchitectureLayerWeights& w, int n,
                   float* q, float* k, float* v);

// [head_dim / 2] angles per position when they differ from base^(-2i/head_dim): from
// rope_freqs.weight when the file has it (divisors), else Llama 3.1's scaling of the config;
// empty for the plain frequencies (which backends compute from rope_base, in double).
absl::StatusOr<std::vector<float>> RopeInvFrequencies(const common::GgufFile& file,
                                                      const TensorLoader& load,
                                                      const common::ModelConfig& config);

// Llama 3.1's scaled frequencies of `config` (empty when rope_scaling_factor is 0).
std::vector<float> ScaledRopeInvFrequencies(const common::ModelConfig& config);

}  // namespace pagoda::worker
