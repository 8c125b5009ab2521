// Paged attention on the GPU: decode (one new token per sequence, split over the KV length and
// merged) and prefill chunks (causal within the chunk, attending to the cached pages before it).
//
// Page layout (the CPU backend's, see worker/backend/cpu/kv_arena.h): per layer, K and V are
// [num_pages][page_size][n_kv_heads][head_dim] of the dtype; position p of a sequence lives in
// page page_table[p / page_size], slot p % page_size. New K/V are written to their pages
// (WriteKv-style) before attention runs, so a token at position p attends to [0, p] of its
// sequence, its own chunk included.
//
// Grouped-query: query head h reads KV head h / (n_heads / n_kv_heads). Head dims 64 and 128 have
// fast paths (16-byte loads); any even head_dim up to 256 runs on a generic path.
//
// Launchers never allocate, never synchronize and keep a fixed grid for fixed arguments (so they
// can be captured in a CUDA graph): all per-step data is read from device memory. They return
// INVALID_ARGUMENT naming the argument and its limit when the Params break the rules stated
// here, otherwise the launch's own error (INTERNAL).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/kernel_args.h"

namespace pagoda::worker::cuda {

// One entry per sequence in the batch; all pointers are device memory.
struct AttentionBatch {
  const int32_t* token_start =
      nullptr;  // [num_seqs] first row of the sequence's tokens in q and out
  const int32_t* num_tokens =
      nullptr;  // [num_seqs] new tokens; 0 = padding entry (skipped, no output)
  const int32_t* start_pos = nullptr;  // [num_seqs] position of the first new token; token i of the
                                       //   sequence attends to positions [0, start_pos + i]
  const int32_t* page_table = nullptr;  // [num_seqs][page_table_stride] page ids
  int page_table_stride = 0;
  int num_seqs = 0;
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;  // divides n_heads
  int head_dim = 0;    // even, <= 256
  int page_size = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
  DType dtype = DType::kBf16;
};

// Decode: every non-padding entry has num_tokens == 1, so its context is start_pos + 1 tokens.
// The KV length is cut into partitions of partition_tokens (kDecodePartitionTokens unless a
// small grid asks for shorter ones); grid = n_kv_heads x num_seqs x max_partitions, where
// max_partitions must cover the longest context in the batch (DivUp(max_context,
// partition_tokens)). Partials go to the workspace, and the last block of each (sequence, KV
// head) to finish merges them, found by a counter per pair (DecodeAttentionParams::counters).
// kDecodePartitionTokens and DecodePartitions() live in kernel_args.h (host planning uses them).
size_t DecodeAttentionWorkspaceBytes(int num_seqs, int n_heads, int head_dim, int max_partitions);

struct DecodeAttentionParams {
  AttentionBatch batch;
  AttentionShape shape;
  const void* q = nullptr;        // [rows][n_heads][head_dim] dtype, RoPE applied
  const void* k_cache = nullptr;  // [num_pages][page_size][n_kv_heads][head_dim] dtype (one layer)
  const void* v_cache = nullptr;  // same shape
  void* out = nullptr;            // [rows][n_heads][head_dim] dtype
  int max_partitions = 1;
  // A power of two in [kMinDecodePartitionTokens, kDecodePartitionTokens].
  int partition_tokens = kDecodePartitionTokens;
  void* workspace = nullptr;  // DecodeAttentionWorkspaceBytes(...) bytes
  // With max_partitions > 1: num_seqs x n_kv_heads counters (or more), zero before the first
  // launch (cudaMemset once, when allocated); every launch leaves them at zero. One launch at a
  // time may use them (a stream's).
  uint32_t* counters = nullptr;
  // Benchmark baseline: ignore page_table and read sequence s's KV from pages
  // s * page_table_stride + p / page_size (one contiguous block per sequence).
  bool contiguous_kv = false;
};
absl::Status LaunchDecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream);
// How many blocks of the split kernel that LaunchDecodeAttention runs for `s` (paged, aligned
// tensors) are resident per multiprocessor at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor
// on the current device), or 0 when it cannot say: what DecodePartitionSplit (kernel_args.h)
// models the grid's waves with.
int DecodeBlocksPerMultiprocessor(const AttentionShape& s);

// The tensor-core kernels of prefill (head dims 64 and 128).
enum class PrefillKernel {
  kAuto,     // wgmma where the GPU has it (compute capability 9.0), else mma.sync
  kMmaSync,  // warp-level mma.sync (sm_80 and later)
  kWgmma,    // warpgroup wgmma.mma_async (sm_90a only): INVALID_ARGUMENT elsewhere
};

// Prefill: entries with any num_tokens (>= 1; 0 = padding). Grid covers max_chunk_tokens
// (>= the largest num_tokens in the batch).
struct PrefillAttentionParams {
  AttentionBatch batch;
  AttentionShape shape;
  const void* q = nullptr;        // [rows][n_heads][head_dim] dtype, RoPE applied
  const void* k_cache = nullptr;  // [num_pages][page_size][n_kv_heads][head_dim] dtype (one layer)
  const void* v_cache = nullptr;
  void* out = nullptr;  // [rows][n_heads][head_dim] dtype
  int max_chunk_tokens = 0;
  // Head dims 64 and 128: the kernel, and for mma.sync the query rows (token x head-in-group)
  // per block, 64 or 128; 0 lets the launcher choose (128 unless that gives fewer than two
  // blocks per multiprocessor). wgmma's blocks are 128 rows (rows_per_block 0 or 128). Tests and
  // benchmarks pin them; the backend leaves them to the launcher.
  PrefillKernel kernel = PrefillKernel::kAuto;
  int rows_per_block = 0;
};
absl::Status LaunchPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream);

// Whether the current device runs PrefillKernel::kWgmma (compute capability 9.0: the sm_90a code).
bool PrefillWgmmaAvailable();

}  // namespace pagoda::worker::cuda
