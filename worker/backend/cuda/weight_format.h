// How a weight matrix is stored in GPU memory: in the backend's dtype (BF16/FP16); in the GGUF
// block format the file stores it in (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), which the kernels of
// quant_kernels.h multiply and decode without a float copy; or as FP8 E4M3 with a float32 scale
// per row (--dtype fp8, fp8_gemm.h).
//
// Contract: host-visible (no CUDA headers), so planning code and tests can name formats. Block
// layouts are ggml's (worker/model/dequantize_blocks.inc spells them out): a row of `cols`
// elements is cols / BlockElements blocks of BlockBytes bytes, and every format decodes in units
// of 32 consecutive elements (a Q8_0/Q4_0 block, a Q4_K/Q5_K sub-block, two Q6_K sub-blocks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace pagoda::common {
enum class GgmlType : uint32_t;  // common/gguf_reader.h (C++20: .cu files see only this)
}  // namespace pagoda::common

namespace pagoda::worker::cuda {

enum class WeightFormat : uint8_t { kDense, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kFp8 };

inline constexpr int kQuantUnit = 32;  // elements decoded together

// The format a quantized GGUF type keeps on the device; nullopt for float types (converted to
// the dtype) and for types the kernels lack.
std::optional<WeightFormat> QuantizedFormatOf(common::GgmlType type);
const char* WeightFormatName(WeightFormat f);  // "bf16/fp16" for kDense
// True for the GGUF block formats (the ones quant_kernels.h decodes).
inline bool IsBlockFormat(WeightFormat f) {
  return f != WeightFormat::kDense && f != WeightFormat::kFp8;
}
int BlockElements(WeightFormat f);  // 32 or 256 (1 for kDense and kFp8)
int BlockBytes(WeightFormat f);     // bytes per block (2 for kDense, 1 for kFp8)
// Bytes of one row of `cols` elements: cols * 2 for kDense (the dtype), cols for kFp8, else whole
// blocks.
size_t FormatRowBytes(WeightFormat f, int64_t cols);

// One matrix [rows][cols], row-major, each row `row_bytes` long.
struct DeviceMatrix {
  const void* data = nullptr;
  WeightFormat format = WeightFormat::kDense;
  int rows = 0;  // n_out
  int cols = 0;  // n_in
  size_t row_bytes = 0;
  const float* row_scales = nullptr;  // kFp8: [rows]; a row's values are E4M3 x its scale

  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes; }
};

// A projection's weights: parts stacked along the output ([Wq; Wk; Wv], [Wgate; Wup]), part i's
// outputs following part i-1's. Neighbours of one format share a part, so a dense or uniformly
// quantized projection is one product; a Q4_K_M file's Q4_K Q/K beside a Q6_K V is two.
struct Projection {
  std::array<DeviceMatrix, 3> parts{};
  int num_parts = 0;
  int n_out = 0;  // sum of the parts' rows
  int n_in = 0;

  size_t bytes() const {
    size_t b = 0;
    for (int i = 0; i < num_parts; ++i) b += parts[static_cast<size_t>(i)].bytes();
    return b;
  }
};

}  // namespace pagoda::worker::cuda
