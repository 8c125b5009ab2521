// CPU kernels for the Llama forward pass over a flat batch of tokens: the parallel drivers
// around the per-ISA kernel tables (kernel_table.h).
//
// Contract: kernels never allocate and never fail; callers pass valid shapes (documented per
// pointer) and non-overlapping outputs unless stated. Every kernel computes each token's result
// with the same arithmetic in the same order regardless of the batch around it or the thread
// count, so the CPU backend is batch-invariant: a token's logits do not depend on which other
// sequences share its batch or how pages are laid out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/aligned_vector.h"
#include "worker/backend/cpu/kernel_params.h"
#include "worker/backend/cpu/kernel_table.h"
#include "worker/backend/cpu/thread_pool.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker::cpu {

// Weight rows decoded together into a thread's scratch panel before the GEMM tile loop.
inline constexpr int kPanelRows = 8;
// Elements of those rows decoded at a time (a multiple of every block size): the panel block
// (24 KiB of float32) stays in L1 beside the activations the tiles read. A 768-wide row is one
// block, so its tiles reduce their lanes at once instead of storing and reloading them (768 ran
// faster than 512 and no slower than 1024: bench/journal/cpu-kernel-notes.md). A call of one
// token (GEMV) decodes kOneTokenKBlock at a time where it is decoded at all (tables without
// float_gemv; quantized weights without integer products), which ran faster for it than 768.
// The block size does not change results: the lanes carry over exactly.
inline constexpr int kKBlock = 768;
inline constexpr int kOneTokenKBlock = 512;
// Most tokens multiplied per pass over a panel (each keeps kMaxLanes lane sums per row).
inline constexpr int kMaxTokenChunk = kMaxPanelTokens;

// Floats of scratch every thread needs: one panel block and the lane sums of one token chunk (a
// whole number of cache lines, so every thread's part of a cache-line-aligned scratch is too).
constexpr size_t ScratchFloatsPerThread() {
  return static_cast<size_t>(kPanelRows) * kKBlock +
         static_cast<size_t>(kMaxTokenChunk) * kPanelRows * kMaxLanes;
}
static_assert(ScratchFloatsPerThread() * sizeof(float) % common::kCacheLineBytes == 0);

// What every parallel kernel runs with: the kernel table, the pool, and per-thread scratch of
// `scratch_floats` floats each (at least ScratchFloatsPerThread()).
// `activations` holds the quantized activations of products with quantized weights; MatMul
// grows it when a batch needs more than any before (like the backend's own per-batch buffers).
// With `quantize_activations` false, quantized weights are decoded to float like F16 ones (the
// slower exact path: float activations, no 8-bit rounding of them).
struct ExecContext {
  const KernelTable* kernels;
  ThreadPool* pool;
  float* scratch;  // [pool->size()][scratch_floats], cache-line aligned
  size_t scratch_floats;
  common::AlignedVector<uint8_t>* activations;
  bool quantize_activations = true;
};

// An ExecContext with its own pool and scratch, for tests and tools: `threads` threads on the
// table of `isa`.
class LocalContext {
 public:
  explicit LocalContext(CpuIsa isa = CpuIsa::kPortable, int threads = 1,
                        bool quantize_activations = true);
  const ExecContext& get() const { return ctx_; }

 private:
  std::unique_ptr<ThreadPool> pool_;
  common::AlignedVector<float> scratch_;
  common::AlignedVector<uint8_t> activations_;
  ExecContext ctx_;
};

// out[t][o] = sum_i w[o][i] * x[t][i], the weight in its stored type: each panel of kPanelRows
// rows is decoded once, kKBlock columns at a time, and applied to every token of a chunk (one
// GEMM per weight). Quantized weights are not decoded: each token's x is quantized to 8 bits
// once per product (quantized_activations.h) and the panel kernel sums bytes in int32, on every
// batch size alike. Neither are weights of a type the table multiplies on its own
// (float_gemm_panel: the AMX table's BF16): their x is packed once per product. A chunk is as many
// tokens as fit about 1 MiB of activations (64 to kMaxTokenChunk: 256 for rows of 768), so decode
// batches stream the weights once per step; longer prefill batches once per chunk.
struct MatMulParams {
  const float* x;         // [num_tokens][w->cols]
  const WeightMatrix* w;  // [n_out = rows][n_in = cols]
  float* out;             // [num_tokens][w->rows]
  int num_tokens;
};
// Several independent products in one parallel region (e.g. Q, K and V from one input).
void MatMul(const ExecContext& ctx, std::span<const MatMulParams> products);

void RmsNorm(const ExecContext& ctx, const RmsNormParams& p);
void BuildRopeTables(const RopeTableParams& p);
void ApplyRope(const RopeParams& p);
void WriteKv(const ExecContext& ctx, const KvWriteParams& p);
void PagedAttention(const ExecContext& ctx, const PagedAttentionParams& p);

// gate[t][i] = silu(gate[t][i]) * up[t][i] over [num_tokens][width] (in place in gate).
void SwiGlu(const ExecContext& ctx, float* gate, const float* up, int num_tokens, int width);

// x[i] += y[i] over [num_tokens][width].
void AddInPlace(const ExecContext& ctx, float* x, const float* y, int num_tokens, int width);

// out[t] = row ids[t] of the table, decoded to float32 ([num_tokens][table.cols]).
void GatherRows(const ExecContext& ctx, const WeightMatrix& table, const int32_t* ids,
                int num_tokens, float* out);

}  // namespace pagoda::worker::cpu
