// Kernels over weights kept in their GGUF blocks on the device (weight_format.h): a fused
// product for a few tokens that decodes each block in registers, a tensor-core product for many
// that decodes tiles into shared memory, and a row decoder (the embedding gather, and the
// scratch slices that cuBLAS multiplies on the other path for many tokens; weight_products.h
// chooses), plus the fused product's twin for dense BF16/FP16 rows (LaunchDenseGemv). CPU twin:
// the CPU backend's products with float activations (cpu_kernels.h) over DequantizeRowPortable's
// values.
//
// Contract: as layer_kernels.h. Launchers never allocate or synchronize, grids depend only on
// the arguments (CUDA-graph safe), all pointers are device memory, and a Params that breaks a
// rule stated here is INVALID_ARGUMENT naming the argument.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/weight_format.h"

namespace pagoda::worker::cuda {

// The most tokens one QuantGemv launch takes.
inline constexpr int kQuantGemvMaxTokens = 8;

// The tensor-core kernel LaunchQuantGemm runs: kAuto takes wgmma where the device has it
// (WgmmaAvailable: compute capability 9.0) and mma.sync elsewhere; tests and benchmarks pin one.
enum class QuantGemmKernel { kAuto, kMmaSync, kWgmma };

// Room for LaunchQuantGemm's split-K (QuantGemvParams::k_splits): the splits' partial sums, and
// a counter per tile that every launch leaves at zero (so zero them once, when allocated). A
// launch of t tokens over r rows with k splits needs QuantGemmSplitFloats(r, t, k) partials and
// QuantGemmTiles(r, t) counters. One launch at a time may use it (a stream's).
struct QuantGemmSplitWorkspace {
  float* partials = nullptr;
  size_t partial_floats = 0;
  uint32_t* counters = nullptr;
  int num_counters = 0;
};

// out[t * ld_out + o] = sum_i w[o][i] * float(x[t][i]) (+ out[t * ld_out + o] when accumulating)
// for t < num_tokens, o < w.rows, summed in float32. `out` points at the part's first column of
// a wider output when ld_out > w.rows. One warp per pair of rows, each lane decoding one unit of
// 32 per row in turn against x staged in shared memory.
//
// GLU mode (glu_out set; the GEMVs only: LaunchQuantGemv, LaunchQuantGemvInt8, LaunchDenseGemv,
// LaunchFp8Gemv): w is [Wgate; Wup], F = w.rows / 2 rows each, and in place of out the kernel
// writes glu_out[t * F + j] = dtype(silu(gate_j . x_t) * (up_j . x_t)) for j < F, a warp holding
// gate row j and up row j (rows j and F + j of w). The sums are the plain mode's, bit for bit, so
// this equals the product into out followed by LaunchSiluMul, in one kernel; out, ld_out and
// accumulate are unused (accumulate must be false).
struct QuantGemvParams {
  const void* x;   // [num_tokens][w.cols] dtype
  DeviceMatrix w;  // a quantized format
  float* out;      // [num_tokens][ld_out]
  int ld_out = 0;
  int num_tokens = 0;  // LaunchQuantGemv: 1 .. kQuantGemvMaxTokens; LaunchQuantGemm: >= 1
  bool accumulate = false;
  DType dtype = DType::kBf16;
  QuantGemmKernel gemm_kernel = QuantGemmKernel::kAuto;  // LaunchQuantGemm's only
  void* glu_out = nullptr;                               // GLU mode: [num_tokens][w.rows / 2] dtype
  // LaunchQuantGemm's wgmma kernel only (the mma.sync kernel ignores them): the columns cut into
  // up to k_splits ranges of whole steps, each a block of its own, for products whose tiles
  // alone leave SMs idle (QuantGemmAutoSplits). The sums of each range are added in range order
  // by the kernel, so a launch's result is the same every time, but it may differ from the
  // unsplit product's in the last bits. 1: none.
  int k_splits = 1;
  QuantGemmSplitWorkspace split = {};
};
absl::Status LaunchQuantGemv(const QuantGemvParams& p, cudaStream_t stream);

// The fused product's other arithmetic, the scheme of llama.cpp's small-batch CUDA kernels and
// of the CPU backend: activations quantized to 8 bits per block of 32 (LaunchQuantizeQ8Blocks:
// d = max|x| / 127, q = x * 127 / max|x| rounded half to even, as the CPU backend rounds, and
// s = d * sum(q)), each unit's integer weights dotted with them exactly (dp4a), the float scales
// applied per unit: d * (lo * dot(q_w, q_x)[0, 16) + hi * dot[16, 32)) - min * s.
struct Q8BlocksParams {
  const void* x;  // [tokens][cols] dtype
  int8_t* q;      // [tokens][cols]
  float2* ds;     // [tokens][cols / 32]: (d, d * sum(q))
  int tokens = 0;
  int cols = 0;  // a multiple of 32
  DType dtype = DType::kBf16;
};
absl::Status LaunchQuantizeQ8Blocks(const Q8BlocksParams& p, cudaStream_t stream);

struct QuantGemvInt8Params {
  const int8_t* xq;  // [num_tokens][w.cols], LaunchQuantizeQ8Blocks's
  const float2* ds;  // [num_tokens][w.cols / 32]
  DeviceMatrix w;    // a block format
  float* out;        // [num_tokens][ld_out], as QuantGemvParams
  int ld_out = 0;
  int num_tokens = 0;  // 1 .. kQuantGemvMaxTokens
  bool accumulate = false;
  void* glu_out = nullptr;     // GLU mode, as QuantGemvParams
  DType dtype = DType::kBf16;  // glu_out's
};
absl::Status LaunchQuantGemvInt8(const QuantGemvInt8Params& p, cudaStream_t stream);

// The fused product's dense twin, for BF16/FP16 weights (w.format kDense, elements of p.dtype
// like x): the same output rule as LaunchQuantGemv, for 1 .. kQuantGemvMaxTokens tokens, with
// w.cols a multiple of 8 and w's rows 16-byte aligned (row_bytes = 2 cols). A warp takes two
// rows; each lane reads 16 bytes of each per step, several steps in flight, against x staged in
// shared memory as float32. For decode at small batches, where cuBLAS's GEMV reads the weights
// below the device's bandwidth (bench/journal/gpu.md).
absl::Status LaunchDenseGemv(const QuantGemvParams& p, cudaStream_t stream);

// The same for FP8 E4M3 rows with a float32 scale per row (w.format kFp8, --dtype fp8):
// out[t][o] = row_scales[o] * sum_i e4m3(w[o][i]) * float(x[t][i]) (+ out) for 1 ..
// kQuantGemvMaxTokens tokens, w.cols a multiple of 16, w and x 16-byte aligned. One kernel in
// place of Fp8Gemm's three (activations to FP8, cuBLASLt, the scaling epilogue), and the
// activations keep their dtype; each lane reads 16 weights per step.
absl::Status LaunchFp8Gemv(const QuantGemvParams& p, cudaStream_t stream);

// The same product for any number of tokens on tensor cores, the weights rounded to the dtype
// once decoded. On compute capability 9.0 (gemm_kernel kAuto or kWgmma; quant_gemm_wgmma.cuh): a
// warpgroup takes 64 rows and 32, 64 or 128 tokens, decodes its wgmma A fragments straight from the
// blocks into registers while the previous step's m64nNk16 run, with x staged by cp.async
// several steps ahead. Elsewhere (kMmaSync): a block decodes a 64-row x 64-column tile of w into
// shared memory (one unit per thread), stages 64 tokens' x beside it and multiplies them with
// mma.sync m16n8k16. Either way each weight is decoded once per token tile, so the weight bytes
// read stay the file's, where decoding to a scratch matrix first writes and reads the dtype's.
//
// FP8 rows (w.format kFp8) take the same kernels: a unit is 32 E4M3 values, exact in the dtype,
// and out[t][o] = row_scales[o] * sum_i e4m3(w[o][i]) * x[t][i] (+ out), the activations in
// their dtype, in one kernel (where Fp8Gemm quantizes them to FP8 per token and takes three);
// w as Fp8TensorCoresFit says.
absl::Status LaunchQuantGemm(const QuantGemvParams& p, cudaStream_t stream);
// The wgmma kernel's tiles for a product of `rows` weight rows and num_tokens tokens (64 rows by
// 32, 64 or 128 tokens), the partial floats its split-K needs with k_splits splits (0 for one),
// and the splits QuantGemmAutoSplits asks for: none where the tiles fill num_sms SMs, else enough
// for about two blocks an SM, keeping at least kMinSplitSteps steps of 64 columns a split and at
// most kMaxKSplits.
inline constexpr int kMaxKSplits = 8;
inline constexpr int kMinSplitSteps = 8;
int QuantGemmTiles(int rows, int num_tokens);
// The splits a launch over rows of `cols` columns asked for k_splits runs (whole pairs of steps a
// split: at most k_splits, fewer where the steps do not fill them).
int QuantGemmSplits(int cols, int k_splits);
size_t QuantGemmSplitFloats(int rows, int num_tokens, int k_splits);
int QuantGemmAutoSplits(int rows, int cols, int num_tokens, int num_sms);
// The partial floats of tiles_x_splits tiles of the largest size (64 rows x 128 tokens): a
// workspace of QuantGemmSplitCapacity(2 num_sms) holds any launch QuantGemmAutoSplits splits.
size_t QuantGemmSplitCapacity(int tiles_x_splits);
// Whether LaunchQuantGemm takes FP8 matrix w: 16-byte aligned rows of a positive multiple of 32
// columns (row_bytes = cols) with their scales.
bool Fp8TensorCoresFit(const DeviceMatrix& w);
// Does ahead, outside any graph capture, what LaunchQuantGemm's first launch for this format and
// dtype would: the wgmma kernels' opt-in to more than 48 KiB of shared memory (a setting, not
// work on a stream). Nothing for kMmaSync, nor where the device has no wgmma.
absl::Status PrepareQuantGemm(WeightFormat format, DType dtype, QuantGemmKernel kernel);

// out[r][:] = decode(w[rows ? rows[r] : first_row + r]) for r < num_rows, as float32 (out_f32)
// or rounded to the dtype: the embedding gather (rows = tokens) and the decode of a slice of
// rows ahead of a cuBLAS product.
struct DequantizeRowsParams {
  DeviceMatrix w;                 // a quantized format
  const int32_t* rows = nullptr;  // [num_rows] or null
  int first_row = 0;
  int num_rows = 0;
  void* out = nullptr;  // [num_rows][w.cols]
  bool out_f32 = false;
  DType dtype = DType::kBf16;
};
absl::Status LaunchDequantizeRows(const DequantizeRowsParams& p, cudaStream_t stream);

// Seeded random blocks for benchmarks of full-size quantized shapes without a file: every byte
// random, then each block's half scales set so that decoded weights have a mean near 0 and stay
// within 1.5 x amplitude (never NaN or infinite).
absl::Status LaunchFillRandomBlocks(const DeviceMatrix& w, float amplitude, uint64_t seed,
                                    cudaStream_t stream);

}  // namespace pagoda::worker::cuda
