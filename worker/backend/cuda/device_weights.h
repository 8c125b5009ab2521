// Model weights in GPU memory: one allocation; matrices in the dtype or, when the options keep
// them, in the GGUF blocks their file stores (weight_format.h); norms in float32.
//
// Contract: immutable after creation. Each projection is a Projection whose parts stack along the
// output: Q, K and V rows (Wq, then Wk, then Wv) and gate/up rows (Wgate, then Wup), neighbours
// of one format sharing a part, so a uniform projection is one product. A tied classifier is the
// embedding. Created from a LlamaModel (float matrices, and quantized ones unless kept, are
// dequantized to float32 on the host one at a time and converted to the dtype; kept ones are
// copied byte for byte) or with seeded random values or blocks made on the device (benchmarks of
// full-size shapes without a file or a host copy).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/weight_format.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker::cuda {

struct DeviceLayer {
  const float* attn_norm = nullptr;  // [dim]
  Projection wqkv;                   // [q_dim + 2 kv_dim][dim]
  Projection wo;                     // [dim][q_dim]
  const float* ffn_norm = nullptr;   // [dim]
  Projection w_gate_up;              // [2 ffn_dim][dim]
  Projection w_down;                 // [dim][ffn_dim]
  // Architecture pieces (worker/model/architecture.h), null when the model has none:
  const float* bqkv = nullptr;    // [q_dim + 2 kv_dim] qwen2's Q, K, V biases
  const float* q_norm = nullptr;  // [head_dim] qwen3
  const float* k_norm = nullptr;  // [head_dim] qwen3
};

// The storage format of each matrix.
struct WeightFormats {
  WeightFormat embedding = WeightFormat::kDense;
  WeightFormat output = WeightFormat::kDense;
  // Per layer: q, k, v, o, gate, up, down; empty: every matrix kDense.
  std::vector<std::array<WeightFormat, 7>> layers;
};

class DeviceWeights {
 public:
  // keep_quantized: Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices stay in their blocks. fp8: the
  // layers' other matrices become FP8 E4M3 with a scale per row (max|row| / 448).
  static absl::StatusOr<DeviceWeights> Upload(const LlamaModel& model, DType dtype,
                                              bool keep_quantized, bool fp8, cudaStream_t stream);
  // Quantized formats get random blocks (LaunchFillRandomBlocks) of the same scale.
  static absl::StatusOr<DeviceWeights> Random(const common::ModelConfig& config, DType dtype,
                                              const WeightFormats& formats, uint64_t seed,
                                              cudaStream_t stream);

  const common::ModelConfig& config() const { return config_; }
  const DeviceLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  const DeviceMatrix& token_embedding() const { return token_embd_; }  // [vocab][dim]
  const float* output_norm() const { return output_norm_; }            // [dim]
  const Projection& output() const { return output_; }                 // [vocab][dim]
  // [head_dim / 2] scaled RoPE frequencies, or null for rope_base's.
  const float* rope_inv_freq() const { return rope_inv_freq_; }
  size_t bytes() const { return buffer_.bytes(); }
  // Bytes one decode step reads: every matrix once (the embedding rows it gathers aside).
  size_t bytes_read_per_step() const { return step_bytes_; }
  // Bytes of the largest quantized projection part's rows in the dtype (0 when none is kept):
  // what decoding one whole part ahead of cuBLAS would take.
  size_t largest_quantized_part_dense_bytes() const { return largest_quantized_dense_; }
  // Bytes of the matrices by storage format ("Q4_K 3.2 MiB, Q6_K 1.1 MiB, bf16 0.5 MiB"), FP8
  // with its row scales; for the log at load.
  std::string FormatSummary() const;
  // The widest block-format part's columns (0 when none).
  int block_max_cols() const { return block_max_cols_; }
  // The largest FP8 part's rows and columns (0 when none).
  int fp8_max_rows() const { return fp8_max_rows_; }
  int fp8_max_cols() const { return fp8_max_cols_; }

 private:
  // Lays out every tensor in one buffer.
  static absl::StatusOr<DeviceWeights> Allocate(const common::ModelConfig& config, DType dtype,
                                                const WeightFormats& formats, bool tied,
                                                bool scaled_rope);

  common::ModelConfig config_;
  DType dtype_ = DType::kBf16;
  DeviceBuffer buffer_;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix token_embd_;
  const float* output_norm_ = nullptr;
  Projection output_;
  const float* rope_inv_freq_ = nullptr;
  size_t step_bytes_ = 0;
  size_t largest_quantized_dense_ = 0;
  std::map<WeightFormat, size_t> bytes_by_format_;
  int block_max_cols_ = 0;
  int fp8_max_rows_ = 0;
  int fp8_max_cols_ = 0;
};

}  // namespace pagoda::worker::cuda
