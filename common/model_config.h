// Llama-family model hyperparameters, read from GGUF metadata.
//
// Contract: a ModelConfig returned by ReadModelConfig is validated: every size is positive,
// n_heads % n_kv_heads == 0, head_dim <= 256, and (when the file has no explicit key length)
// dim == n_heads * head_dim. Shared by the scheduler (page/context planning) and the worker
// (weight shapes), so it depends only on common/.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"

namespace pagoda::common {

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2" or "qwen3" (general.architecture)
  std::string name;          // general.name, may be empty
  int n_layers = 0;
  int dim = 0;  // embedding (residual stream) width
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  // Llama 3.1 RoPE frequency scaling (<arch>.rope.scaling.type "llama3"); factor 0: none.
  float rope_scaling_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_context = 8192;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

inline constexpr int kMaxHeadDim = 256;

// Reads and validates the <architecture>.* keys (llama, qwen2, qwen3; any other architecture
// is refused naming the supported ones). Errors name the key and the offending value.
absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

// Validates an already-filled config (used by ReadModelConfig and by tools building one).
absl::Status ValidateModelConfig(const ModelConfig& config);

// One line, for logs: "llama 'name': 5 layers, dim 64, heads 8/4 (head_dim 8), ...".
std::string DescribeModelConfig(const ModelConfig& config);

}  // namespace pagoda::common
