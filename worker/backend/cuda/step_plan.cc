#include "worker/backend/cuda/step_plan.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {
namespace {

int Context(const SeqInput& in) { return in.start_pos + static_cast<int>(in.tokens.size()); }
bool IsDecode(const SeqInput& in) { return in.tokens.size() == 1; }

}  // namespace

absl::StatusOr<std::vector<MicroBatch>> SplitBatch(std::span<const SeqInput> batch,
                                                   const StepLimits& limits) {
  std::vector<MicroBatch> out;
  MicroBatch cur;
  int64_t tokens = 0, seqs = 0, rows = 0, decodes = 0, max_parts = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqInput& in = batch[i];
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    const int64_t parts = IsDecode(in) ? DecodePartitions(Context(in)) : 0;
    auto fits = [&](int64_t t, int64_t s, int64_t r, int64_t d, int64_t p) {
      return t <= limits.max_tokens && s <= limits.max_seqs && r <= limits.max_logit_rows &&
             d * p <= limits.max_decode_units;
    };
    const int64_t r1 = in.want_logits ? 1 : 0, d1 = IsDecode(in) ? 1 : 0;
    if (!fits(n, 1, r1, d1, parts)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch entry %d (%d tokens at position %d) does not fit one CUDA forward pass: limits "
          "%d tokens, %d decode partition units",
          i, n, in.start_pos, limits.max_tokens, limits.max_decode_units));
    }
    if (!fits(tokens + n, seqs + 1, rows + r1, decodes + d1, std::max(max_parts, parts))) {
      cur.end = i;
      out.push_back(cur);
      cur.begin = i;
      tokens = seqs = rows = decodes = max_parts = 0;
    }
    tokens += n;
    seqs += 1;
    rows += r1;
    decodes += d1;
    max_parts = std::max(max_parts, parts);
  }
  cur.end = batch.size();
  if (cur.end > cur.begin) out.push_back(cur);
  return out;
}

void BuildStepInputs(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                     int page_size, const GraphShape* graph, StepInputs* out) {
  StepInputs& s = *out;
  std::vector<int32_t> ints_storage = std::move(s.ints);  // keep capacity across steps
  std::vector<SampleRowParams> samples_storage = std::move(s.samples);
  s = StepInputs{};
  s.ints = std::move(ints_storage);
  s.samples = std::move(samples_storage);
  s.samples.clear();
  int real_tokens = 0, real_rows = 0, decodes = 0, stride = 1;
  s.decode_only = !batch.empty();
  for (const SeqInput& in : batch) {
    real_tokens += static_cast<int>(in.tokens.size());
    real_rows += in.want_logits ? 1 : 0;
    if (IsDecode(in)) {
      ++decodes;
      s.max_decode_context = std::max(s.max_decode_context, Context(in));
    } else {
      s.max_prefill_tokens = std::max(s.max_prefill_tokens, static_cast<int>(in.tokens.size()));
    }
    if (!IsDecode(in) || !in.want_logits) s.decode_only = false;
    stride = std::max(stride, (Context(in) + page_size - 1) / page_size);
  }
  const int real_seqs = static_cast<int>(batch.size());
  s.num_seqs = graph ? graph->seqs : real_seqs;
  s.num_tokens = graph ? graph->seqs : real_tokens;
  s.num_logit_rows = graph ? graph->seqs : real_rows;
  s.real_logit_rows = real_rows;
  s.num_decodes = graph ? graph->seqs : decodes;
  s.num_prefills = s.num_seqs - s.num_decodes;
  s.page_table_stride = graph ? graph->stride : stride;

  StepOffsets& o = s.offsets;
  const int T = s.num_tokens, S = s.num_seqs, R = s.num_logit_rows;
  o.tokens = 0;
  o.positions = o.tokens + T;
  o.token_seq = o.positions + T;
  o.seq_token_start = o.token_seq + T;
  o.seq_num_tokens = o.seq_token_start + S;
  o.seq_start_pos = o.seq_num_tokens + S;
  o.page_table = o.seq_start_pos + S;
  o.logit_rows = o.page_table + S * s.page_table_stride;
  o.total = o.logit_rows + R;
  s.ints.assign(static_cast<size_t>(o.total), 0);
  int32_t* ints = s.ints.data();
  std::fill_n(ints + o.positions, T, -1);

  // Sequence entries: decodes first, then prefills, each in batch order.
  std::vector<int> entry(batch.size());
  int next_decode = 0, next_prefill = s.num_decodes;
  for (size_t i = 0; i < batch.size(); ++i) {
    entry[i] = IsDecode(batch[i]) ? next_decode++ : next_prefill++;
  }
  int token = 0, row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqInput& in = batch[i];
    const int e = entry[i];
    ints[o.seq_token_start + e] = token;
    ints[o.seq_num_tokens + e] = static_cast<int32_t>(in.tokens.size());
    ints[o.seq_start_pos + e] = in.start_pos;
    const int pages = std::min<int>(static_cast<int>(in.pages.size()), s.page_table_stride);
    std::copy_n(in.pages.data(), pages, ints + o.page_table + e * s.page_table_stride);
    for (size_t t = 0; t < in.tokens.size(); ++t, ++token) {
      ints[o.tokens + token] = in.tokens[t];
      ints[o.positions + token] = in.start_pos + static_cast<int32_t>(t);
      ints[o.token_seq + token] = e;
    }
    if (in.want_logits) {
      ints[o.logit_rows + row] = token - 1;
      // Forward (logits only) passes no samples: its rows get greedy parameters, unused.
      if (static_cast<size_t>(row) < samples.size()) {
        const SampleInput& si = samples[static_cast<size_t>(row)];
        s.samples.push_back({si.params.temperature, si.params.top_k, si.params.top_p,
                             si.params.seed, si.index, si.params.min_p, si.params.top_logprobs});
      } else {
        s.samples.push_back({});
      }
      ++row;
    }
  }
  // Padding (graphs only): tokens at position -1 of padding entries, greedy rows.
  for (int t = token; t < T; ++t) ints[o.token_seq + t] = std::min(t, S - 1);
  for (int e = real_seqs; e < S; ++e) ints[o.seq_token_start + e] = std::min(e, T - 1);
  for (int r = row; r < R; ++r) {
    ints[o.logit_rows + r] = std::min(r, T - 1);
    s.samples.push_back({});
  }
}

int GraphBatchBucket(int num_seqs, int max_seqs) {
  if (num_seqs <= 0 || num_seqs > max_seqs) return 0;
  int bucket;
  if (num_seqs <= 8) {
    bucket = 1;
    while (bucket < num_seqs) bucket *= 2;
  } else if (num_seqs <= 64) {
    bucket = (num_seqs + 7) / 8 * 8;
  } else {
    bucket = (num_seqs + 31) / 32 * 32;
  }
  return std::min(bucket, max_seqs);
}

int DecodePartitionSplit(int num_seqs, int n_kv_heads, int partitions, int multiprocessors,
                         int64_t max_units, int blocks_per_multiprocessor) {
  const int64_t units = int64_t{num_seqs} * partitions;
  if (multiprocessors > 0 && blocks_per_multiprocessor > 0) {
    const int64_t capacity = int64_t{multiprocessors} * blocks_per_multiprocessor;
    int best = 1;
    int64_t best_cost = 0;
    for (int split = 1; kDecodePartitionTokens / split >= kMinDecodePartitionTokens &&
                        (split == 1 || units * split <= max_units);
         split *= 2) {
      const int64_t blocks = units * n_kv_heads * split;
      const int64_t waves = (blocks + capacity - 1) / capacity;
      const int64_t cost = waves * (kDecodePartitionTokens / split + kDecodeBlockOverheadTokens);
      if (split == 1 || cost < best_cost) best = split, best_cost = cost;
    }
    return best;
  }
  const int64_t want_blocks = 2 * int64_t{multiprocessors};
  int split = 1;
  while (kDecodePartitionTokens / (2 * split) >= kMinDecodePartitionTokens &&
         units * n_kv_heads * split < want_blocks && units * split * 2 <= max_units) {
    split *= 2;
  }
  return split;
}

int GraphPartitionBucket(int max_context) {
  int p = 1;
  while (p < DecodePartitions(max_context)) p *= 2;
  return p;
}

GraphShape ChooseGraph(std::span<const SeqInput> batch, int page_size, int max_graph_seqs,
                       int max_graph_context) {
  int max_context = 0;
  for (const SeqInput& in : batch) {
    if (!IsDecode(in) || !in.want_logits) return {};
    max_context = std::max(max_context, Context(in));
  }
  if (batch.empty() || max_context > max_graph_context) return {};
  const int seqs = GraphBatchBucket(static_cast<int>(batch.size()), max_graph_seqs);
  if (seqs == 0) return {};
  const int partitions = GraphPartitionBucket(max_context);
  const int stride = (partitions * kDecodePartitionTokens + page_size - 1) / page_size;
  return {seqs, stride, partitions};
}

}  // namespace pagoda::worker::cuda
