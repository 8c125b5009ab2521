// The element-wise kernels around the FP8 products (fp8_gemm.h): activations quantized to FP8
// E4M3 with a scale per token, the scaling of the products' float32 results by the weight's
// per-row and the token's scales, and seeded random FP8 weights for benchmarks.
//
// Contract: as layer_kernels.h (no allocation or synchronization, CUDA-graph safe grids,
// INVALID_ARGUMENT for a Params that breaks a rule stated here). E4M3 conversions are
// cuda_fp8.h's, saturating to the largest finite value (448).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

inline constexpr float kFp8E4M3Max = 448.0f;

// For each row r < rows: scales[r] = max|x[r]| / 448 (1 for a row of zeros), out[r][i] =
// e4m3(x[r][i] / scales[r]); rows [rows, padded_rows) of out are zeros.
struct QuantizeFp8Params {
  const void* x;  // [rows][cols] dtype
  uint8_t* out;   // [padded_rows][cols] E4M3
  float* scales;  // [rows]
  int rows = 0;
  int padded_rows = 0;
  int cols = 0;
  DType dtype = DType::kBf16;
};
absl::Status LaunchQuantizeFp8(const QuantizeFp8Params& p, cudaStream_t stream);

// out[t * ld_out + o] = products[t * n_out + o] * row_scales[o] * token_scales[t]
// (+ out[t * ld_out + o] when accumulating), t < tokens, o < n_out.
struct Fp8EpilogueParams {
  const float* products;      // [tokens][n_out]
  const float* row_scales;    // [n_out]
  const float* token_scales;  // [tokens]
  float* out;                 // [tokens][ld_out]
  int ld_out = 0;
  int tokens = 0;
  int n_out = 0;
  bool accumulate = false;
};
absl::Status LaunchFp8Epilogue(const Fp8EpilogueParams& p, cudaStream_t stream);

// Random E4M3 bytes (never NaN) for a [rows][cols] matrix, with row scales that keep the
// decoded weights within [-amplitude, amplitude].
absl::Status LaunchFillRandomFp8(uint8_t* data, float* row_scales, int rows, int cols,
                                 float amplitude, uint64_t seed, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
