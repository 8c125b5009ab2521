// A weight matrix kept in the type its GGUF file stores it in (no expansion to float32).
//
// Contract: `bytes` holds `rows` rows of `cols` elements, row-major, each row RowBytes(type, cols)
// bytes long in ggml's block format for `type` (quantized types: blocks of 32 or 256 elements
// along a row; `cols` is a multiple of the block). Supported types: F32, F16, BF16, Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K; anything else is refused where tensors are loaded. Dequantization reproduces
// llama.cpp's values (same formulas, same float32 operation order). Immutable after load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/aligned_vector.h"
#include "common/gguf_reader.h"

namespace pagoda::worker {

// True for the types the CPU backend computes with directly.
bool IsSupportedWeightType(common::GgmlType type);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K" (for error messages).
std::string SupportedWeightTypes();
// Bytes of one row of `cols` elements; `cols` must be a multiple of the type's block.
size_t RowBytes(common::GgmlType type, int64_t cols);

// Portable dequantization of one row of `n` elements (a multiple of the block) to float32.
void DequantizeRowPortable(common::GgmlType type, const uint8_t* row, int n, float* out);

struct WeightMatrix {
  common::GgmlType type = common::GgmlType::F32;
  int rows = 0;  // n_out
  int cols = 0;  // n_in
  size_t row_bytes = 0;
  common::AlignedVector<uint8_t> bytes;  // [rows][row_bytes], cache-line aligned

  const uint8_t* row(int r) const { return bytes.data() + static_cast<size_t>(r) * row_bytes; }
  size_t num_bytes() const { return bytes.size(); }
  // The whole matrix as float32, [rows][cols] (for the CUDA upload and tests).
  std::vector<float> ToFloat() const;
};

// Copies a GGUF tensor with dims [cols, rows] (rows = 1 for vectors). InvalidArgument naming the
// tensor when its type is unsupported (listing the supported ones).
absl::StatusOr<WeightMatrix> CopyWeightMatrix(const common::GgufTensor& tensor);

}  // namespace pagoda::worker
