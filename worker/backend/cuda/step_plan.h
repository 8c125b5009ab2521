// Host-side planning for the CUDA backend: plan batch → the flat arrays its kernels read, the
// micro-batches a batch is cut into, and the CUDA-graph buckets of decode-only steps.
//
// Contract: pure functions of their inputs (no CUDA, no allocation on the device), so they are
// tested on machines without a GPU. The batch has passed ValidateBatch().
//
// Packed step inputs (StepInputs::ints, int32 each, at the offsets in StepOffsets):
//   tokens[T], positions[T] (-1 = padding token: no KV write), token_seq[T] (entry of the token's
//   sequence in the seq arrays), seq_token_start[S], seq_num_tokens[S] (0 = padding entry),
//   seq_start_pos[S], page_table[S][stride], logit_rows[R] (token of each sampled row).
// Sequence entries put decodes (one new token) first, then prefill chunks, so that the decode and
// prefill attention kernels each see a contiguous slice. Tokens and logit rows keep batch order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/kernel_args.h"

namespace pagoda::worker::cuda {

// What one Forward pass on the device can hold (its workspace was sized for these).
struct StepLimits {
  int max_tokens = 0;      // T: input tokens
  int max_seqs = 0;        // S: sequences
  int max_logit_rows = 0;  // R: sampled rows
  // Decode attention partials: sum over decode entries is bounded by
  // decodes x partitions of the longest decode context.
  int64_t max_decode_units = 0;
};

struct MicroBatch {
  size_t begin = 0;  // [begin, end) of the batch
  size_t end = 0;
};

// Cuts `batch` into consecutive micro-batches that each fit `limits` (whole sequences; a chunk's
// KV written by an earlier micro-batch is visible to later ones). InvalidArgument when a single
// sequence alone does not fit.
absl::StatusOr<std::vector<MicroBatch>> SplitBatch(std::span<const SeqInput> batch,
                                                   const StepLimits& limits);

struct StepOffsets {  // in int32 elements from the start of StepInputs::ints
  int tokens = 0, positions = 0, token_seq = 0;
  int seq_token_start = 0, seq_num_tokens = 0, seq_start_pos = 0;
  int page_table = 0, logit_rows = 0;
  int total = 0;
};

struct StepInputs {
  int num_tokens = 0;      // T, padding included
  int num_seqs = 0;        // S, padding included
  int num_decodes = 0;     // the first num_decodes seq entries are decodes (padding included)
  int num_prefills = 0;    // the rest
  int num_logit_rows = 0;  // R, padding included
  int real_logit_rows = 0;
  int page_table_stride = 0;
  int max_decode_context = 0;  // longest decode context (start_pos + 1)
  int max_prefill_tokens = 0;  // largest prefill chunk
  bool decode_only = false;    // every real sequence is one token that wants logits
  StepOffsets offsets;
  std::vector<int32_t> ints;
  std::vector<SampleRowParams> samples;  // [R]
};

// Padding for a CUDA-graph replay: the step is laid out for exactly `seqs` decode entries (and
// tokens and logit rows) with page_table_stride `stride`.
struct GraphShape {
  int seqs = 0;
  int stride = 0;
  int partitions = 0;  // decode partitions the graph's grid covers
};

// Flattens `batch` (samples: one per want_logits entry, batch order). With `graph`, pads to its
// shape (the caller checked FitsGraph). `page_size` > 0.
void BuildStepInputs(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                     int page_size, const GraphShape* graph, StepInputs* out);

// Graph buckets: decode batch sizes 1, 2, 4, 8, then multiples of 8 up to 64, then of 32.
// Returns the smallest bucket >= num_seqs, or 0 when num_seqs exceeds `max_seqs` (no graph).
int GraphBatchBucket(int num_seqs, int max_seqs);
// Decode partitions a graph covers: the next power of two >= DecodePartitions(max_context).
int GraphPartitionBucket(int max_context);
// DecodePartitionSplit is declared in kernel_args.h (the benchmarks' CUDA files call it).
// The graph shape for a decode-only batch, or nullopt-like {0,0,0} when it gets no graph
// (not decode-only, too many sequences, or contexts past max_graph_context).
GraphShape ChooseGraph(std::span<const SeqInput> batch, int page_size, int max_graph_seqs,
                       int max_graph_context);

}  // namespace pagoda::worker::cuda
