// Llama-family weights, loaded from a GGUF file into host memory in their stored types.
//
// Contract: Load() checks that every tensor the graph needs is present, has the shape the
// config implies, and has a supported type (weight_matrix.h: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K); any other type fails with an error naming the tensor, the type and the supported
// list. Matrices stay in their stored type (resident bytes = the file's tensor bytes); norm
// vectors are converted to float32. A missing output.weight means the classifier is tied to
// token_embd. The loaded model is immutable and shared (shared_ptr<const>) between the
// backends; it holds no reference to the GGUF mapping.
//
// Layouts (row-major): a GGUF matrix with dims [n_in, n_out] is stored as [n_out][n_in], so
// y = W x with rows of length n_in. Q and K rows are in the order that makes RoPE rotate
// ADJACENT pairs (x[2i], x[2i+1]) by pos * rope_inv_freq()[i] (llama.cpp's convention for
// llama; qwen2/qwen3 weights are converted to it at load, see architecture.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "common/model_config.h"
#include "worker/model/architecture.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker {

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [dim]
  WeightMatrix wq;               // [n_heads * head_dim][dim]
  WeightMatrix wk;               // [n_kv_heads * head_dim][dim]
  WeightMatrix wv;               // [n_kv_heads * head_dim][dim]
  WeightMatrix wo;               // [dim][n_heads * head_dim]
  std::vector<float> ffn_norm;   // [dim]
  WeightMatrix w_gate;           // [ffn_dim][dim]
  WeightMatrix w_up;             // [ffn_dim][dim]
  WeightMatrix w_down;           // [dim][ffn_dim]
  // qwen2 biases, qwen3 Q/K norms (architecture.h).
  ArchitectureLayerWeights arch;
};

class LlamaModel {
 public:
  static absl::StatusOr<std::shared_ptr<const LlamaModel>> Load(const std::string& path);
  static absl::StatusOr<std::shared_ptr<const LlamaModel>> Load(const common::GgufFile& file);

  const common::ModelConfig& config() const { return config_; }
  // GgufFile::Fingerprint() of the source file.
  const std::string& fingerprint() const { return fingerprint_; }

  const WeightMatrix& token_embedding() const { return token_embd_; }  // [vocab][dim]
  std::span<const float> output_norm() const { return output_norm_; }  // [dim]
  // [vocab][dim]; the embedding itself when tied.
  const WeightMatrix& output() const { return tied_output_ ? token_embd_ : output_; }
  bool tied_output() const { return tied_output_; }
  // [head_dim / 2] RoPE angle per position of each rotated pair, or empty for the plain
  // rope_base^(-2i/head_dim) (architecture.h).
  std::span<const float> rope_inv_freq() const { return rope_inv_freq_; }
  const LlamaLayerWeights& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  // Bytes of weights held, in their stored types (the tied classifier counted once).
  size_t weight_bytes() const;

 private:
  LlamaModel() = default;
  absl::Status LoadLayer(const common::GgufFile& file, int index);

  common::ModelConfig config_;
  std::string fingerprint_;
  WeightMatrix token_embd_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  bool tied_output_ = false;
  std::vector<float> rope_inv_freq_;
  std::vector<LlamaLayerWeights> layers_;
};

}  // namespace pagoda::worker
