// Plain-C++ pieces of the CUDA kernels' arguments that host-side planning needs (no CUDA
// headers, so the planning code and its tests build and run without a GPU or nvcc).
#pragma once

#include <cstdint>

namespace pagoda::worker::cuda {

// Decode attention cuts each sequence's KV into partitions of this many positions, one block per
// (KV head, sequence, partition), and merges the partitions' results.
inline constexpr int kDecodePartitionTokens = 512;
// Shortest partition a decode step may ask for (see DecodePartitionSplit below).
inline constexpr int kMinDecodePartitionTokens = 64;
inline constexpr int DecodePartitions(int max_context) {
  return max_context <= 0 ? 1 : (max_context + kDecodePartitionTokens - 1) / kDecodePartitionTokens;
}

// How many shorter partitions each kDecodePartitionTokens-long decode partition is cut into
// (1, 2, 4 or 8, at least kMinDecodePartitionTokens long each), as long as num_seqs x partitions
// x split stays within `max_units` (the workspace's partials). With the split kernel's occupancy
// known (blocks_per_multiprocessor > 0): the split with the least modeled time, the grid's
// waves (blocks / (multiprocessors x blocks_per_multiprocessor), rounded up) times each block's
// positions plus kDecodeBlockOverheadTokens, so that a grid just over a whole number of waves
// does not leave most multiprocessors idle in its last one (4 x 32k at 512 positions on an
// H100: 3.1 waves, 0.77 of copy bandwidth), and a small grid is spread over more blocks.
// Without it: the smallest split that gives the grid two blocks per multiprocessor. A batch of
// one sequence at 1k positions and 8 KV heads is otherwise 16 blocks on a GPU of 132
// multiprocessors. A function of the grid alone, so a graph captured with it replays with it.
// Defined in step_plan.cc.
inline constexpr int kDecodeBlockOverheadTokens = 32;
int DecodePartitionSplit(int num_seqs, int n_kv_heads, int partitions, int multiprocessors,
                         int64_t max_units, int blocks_per_multiprocessor = 0);

// How one row of logits is turned into a token on the GPU (see sampling/sampling.h).
struct SampleRowParams {
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
  uint64_t index = 0;         // sample index: tokens generated so far for the sequence
  float min_p = 0;            // 0: off
  int32_t top_logprobs = -1;  // -1: no logprobs for this row; else 0..20 alternatives
};

}  // namespace pagoda::worker::cuda
