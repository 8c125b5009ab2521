// Model weights in GPU memory: one allocation, matrices in the dtype, norms in float32.
//
// Contract: immutable after creation. Q, K and V are one fused matrix [q_dim + 2 kv_dim][dim]
// (rows of Wq, then Wk, then Wv) and gate/up one [2 ffn_dim][dim] (Wgate rows, then Wup), so each
// is one GEMM. A tied classifier points at the embedding. Created from a LlamaModel (each matrix,
// whatever its stored type, F32/F16/BF16 or GGUF-quantized, dequantized to float32 on the host
// one at a time and converted to the dtype) or with seeded random values made on the device
// (benchmarks of full-size shapes without a file or a host copy).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker::cuda {

struct DeviceLayer {
  const float* attn_norm = nullptr;  // [dim]
  const void* wqkv = nullptr;        // [q_dim + 2 kv_dim][dim]
  const void* wo = nullptr;          // [dim][q_dim]
  const float* ffn_norm = nullptr;   // [dim]
  const void* w_gate_up = nullptr;   // [2 ffn_dim][dim]
  const void* w_down = nullptr;      // [dim][ffn_dim]
  // Architecture pieces (worker/model/architecture.h), null when the model has none:
  const float* bqkv = nullptr;    // [q_dim + 2 kv_dim] qwen2's Q, K, V biases
  const float* q_norm = nullptr;  // [head_dim] qwen3
  const float* k_norm = nullptr;  // [head_dim] qwen3
};

class DeviceWeights {
 public:
  static absl::StatusOr<DeviceWeights> Upload(const LlamaModel& model, DType dtype,
                                              cudaStream_t stream);
  static absl::StatusOr<DeviceWeights> Random(const common::ModelConfig& config, DType dtype,
                                              uint64_t seed, cudaStream_t stream);

  const common::ModelConfig& config() const { return config_; }
  const DeviceLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  const void* token_embedding() const { return token_embd_; }  // [vocab][dim]
  const float* output_norm() const { return output_norm_; }    // [dim]
  const void* output() const { return output_; }               // [vocab][dim]
  // [head_dim / 2] scaled RoPE frequencies, or null for rope_base's.
  const float* rope_inv_freq() const { return rope_inv_freq_; }
  size_t bytes() const { return buffer_.bytes(); }
  // Bytes one decode step reads: every matrix once (the embedding rows it gathers aside).
  size_t bytes_read_per_step() const { return step_bytes_; }

 private:
  // Lays out every tensor in one buffer; `elements[i]` and `is_f32[i]` in the order of Assign().
  static absl::StatusOr<DeviceWeights> Allocate(const common::ModelConfig& config, DType dtype,
                                                bool tied, bool scaled_rope);

  common::ModelConfig config_;
  DType dtype_ = DType::kBf16;
  DeviceBuffer buffer_;
  std::vector<DeviceLayer> layers_;
  const void* token_embd_ = nullptr;
  const float* output_norm_ = nullptr;
  const void* output_ = nullptr;
  const float* rope_inv_freq_ = nullptr;
  size_t step_bytes_ = 0;
};

}  // namespace pagoda::worker::cuda
