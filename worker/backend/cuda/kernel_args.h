// Plain-C++ pieces of the CUDA kernels' arguments that host-side planning needs (no CUDA
// headers, so the planning code and its tests build and run without a GPU or nvcc).
#pragma once

#include <cstdint>

namespace pagoda::worker::cuda {

// Decode attention cuts each sequence's KV into partitions of this many positions, one block per
// (KV head, sequence, partition), and merges the partitions' results.
inline constexpr int kDecodePartitionTokens = 512;
// Shortest partition a decode step may ask for (see DecodePartitionSplit in step_plan.h).
inline constexpr int kMinDecodePartitionTokens = 64;
inline constexpr int DecodePartitions(int max_context) {
  return max_context <= 0 ? 1 : (max_context + kDecodePartitionTokens - 1) / kDecodePartitionTokens;
}

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
