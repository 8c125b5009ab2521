// Host-side planning of the CUDA backend, run without a GPU: micro-batch splits, the packed
// step inputs the kernels read, CUDA-graph buckets and padding, and KV arena sizing.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/support/status_assertions.h"
#include "worker/backend/cuda/arena_layout.h"
#include "worker/backend/cuda/step_plan.h"

namespace pagoda::worker::cuda {
namespace {

struct Fixture {
  std::vector<std::vector<int32_t>> tokens, pages;
  std::vector<SeqInput> batch;
  // Adds a sequence with `n` new tokens at `start`, pages from `first_page` on.
  void Add(int n, int start, int first_page, bool logits, int page_size = 16) {
    tokens.emplace_back(n);
    std::iota(tokens.back().begin(), tokens.back().end(), 100 * static_cast<int>(tokens.size()));
    pages.emplace_back((start + n + page_size - 1) / page_size);
    std::iota(pages.back().begin(), pages.back().end(), first_page);
  }
  void Finish(const std::vector<std::pair<int, bool>>& starts_logits) {
    batch.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch.push_back({tokens[i], starts_logits[i].first, pages[i], starts_logits[i].second});
    }
  }
};

TEST(StepPlanTest, PacksDecodesFirstAndKeepsTokenOrder) {
  Fixture f;
  f.Add(5, 0, 10, true);    // prefill
  f.Add(1, 40, 20, true);   // decode
  f.Add(3, 16, 30, false);  // prefill chunk, no logits
  f.Add(1, 7, 40, true);    // decode
  f.Finish({{0, true}, {40, true}, {16, false}, {7, true}});
  const SampleInput samples[] = {{{0.5f, 3, 0.9f, 11}, 4}, {{}, 7}, {{}, 9}};
  StepInputs s;
  BuildStepInputs(f.batch, samples, 16, nullptr, &s);
  EXPECT_EQ(s.num_tokens, 10);
  EXPECT_EQ(s.num_seqs, 4);
  EXPECT_EQ(s.num_decodes, 2);
  EXPECT_EQ(s.num_prefills, 2);
  EXPECT_EQ(s.num_logit_rows, 3);
  EXPECT_EQ(s.real_logit_rows, 3);
  EXPECT_EQ(s.page_table_stride, 3);  // ceil(41 / 16)
  EXPECT_EQ(s.max_decode_context, 41);
  EXPECT_EQ(s.max_prefill_tokens, 5);
  EXPECT_FALSE(s.decode_only);
  const int32_t* in = s.ints.data();
  const StepOffsets& o = s.offsets;
  // Tokens in batch order.
  EXPECT_EQ(std::vector<int32_t>(in + o.tokens, in + o.tokens + 10),
            (std::vector<int32_t>{100, 101, 102, 103, 104, 200, 300, 301, 302, 400}));
  EXPECT_EQ(std::vector<int32_t>(in + o.positions, in + o.positions + 10),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 40, 16, 17, 18, 7}));
  // Entries: decodes (batch 1, 3) are 0 and 1; prefills (batch 0, 2) are 2 and 3.
  EXPECT_EQ(std::vector<int32_t>(in + o.token_seq, in + o.token_seq + 10),
            (std::vector<int32_t>{2, 2, 2, 2, 2, 0, 3, 3, 3, 1}));
  EXPECT_EQ(std::vector<int32_t>(in + o.seq_token_start, in + o.seq_token_start + 4),
            (std::vector<int32_t>{5, 9, 0, 6}));
  EXPECT_EQ(std::vector<int32_t>(in + o.seq_num_tokens, in + o.seq_num_tokens + 4),
            (std::vector<int32_t>{1, 1, 5, 3}));
  EXPECT_EQ(std::vector<int32_t>(in + o.seq_start_pos, in + o.seq_start_pos + 4),
            (std::vector<int32_t>{40, 7, 0, 16}));
  // Page table rows of stride 3, unused slots 0.
  EXPECT_EQ(std::vector<int32_t>(in + o.page_table, in + o.page_table + 12),
            (std::vector<int32_t>{20, 21, 22, 40, 0, 0, 10, 0, 0, 30, 31, 0}));
  // Logit rows: the last token of each want_logits sequence, batch order.
  EXPECT_EQ(std::vector<int32_t>(in + o.logit_rows, in + o.logit_rows + 3),
            (std::vector<int32_t>{4, 5, 9}));
  ASSERT_EQ(s.samples.size(), 3u);
  EXPECT_EQ(s.samples[0].top_k, 3);
  EXPECT_EQ(s.samples[0].seed, 11u);
  EXPECT_EQ(s.samples[0].index, 4u);
  EXPECT_EQ(s.samples[2].index, 9u);
  EXPECT_EQ(o.total, o.logit_rows + 3);
}

// Forward (logits only) passes no sampling entries: rows still get their logit row and inert
// greedy parameters (this read past an empty span once).
TEST(StepPlanTest, LogitsOnlyStepsNeedNoSamples) {
  Fixture f;
  f.Add(4, 0, 10, true);
  f.Add(1, 20, 20, true);
  f.Finish({{0, true}, {20, true}});
  StepInputs s;
  BuildStepInputs(f.batch, {}, 16, nullptr, &s);
  EXPECT_EQ(s.real_logit_rows, 2);
  const int32_t* in = s.ints.data();
  EXPECT_EQ(std::vector<int32_t>(in + s.offsets.logit_rows, in + s.offsets.logit_rows + 2),
            (std::vector<int32_t>{3, 4}));
  ASSERT_EQ(s.samples.size(), 2u);
  for (const SampleRowParams& r : s.samples) {
    EXPECT_EQ(r.temperature, 0.0f);
    EXPECT_EQ(r.index, 0u);
  }
}

TEST(StepPlanTest, GraphPaddingMakesInertEntries) {
  Fixture f;
  f.Add(1, 100, 0, true);
  f.Add(1, 600, 50, true);
  f.Add(1, 3, 100, true);
  f.Finish({{100, true}, {600, true}, {3, true}});
  const GraphShape g = ChooseGraph(f.batch, 16, 256, 32768);
  EXPECT_EQ(g.seqs, 4);
  EXPECT_EQ(g.partitions, 2);  // 601 positions: 2 partitions of 512
  EXPECT_EQ(g.stride, 64);     // 2 * 512 / 16
  const SampleInput samples[3] = {};
  StepInputs s;
  BuildStepInputs(f.batch, samples, 16, &g, &s);
  EXPECT_TRUE(s.decode_only);
  EXPECT_EQ(s.num_tokens, 4);
  EXPECT_EQ(s.num_seqs, 4);
  EXPECT_EQ(s.num_decodes, 4);
  EXPECT_EQ(s.num_prefills, 0);
  EXPECT_EQ(s.num_logit_rows, 4);
  EXPECT_EQ(s.real_logit_rows, 3);
  EXPECT_EQ(s.page_table_stride, 64);
  const int32_t* in = s.ints.data();
  EXPECT_EQ(in[s.offsets.positions + 3], -1);         // padding token writes no KV
  EXPECT_EQ(in[s.offsets.seq_num_tokens + 3], 0);     // padding entry attends to nothing
  EXPECT_EQ(in[s.offsets.page_table + 64 + 37], 87);  // entry 1, page 37 of 50..87
  EXPECT_EQ(s.samples.size(), 4u);
  EXPECT_EQ(s.samples[3].temperature, 0.0f);  // padding rows: greedy, ignored
  // Same bucket, same offsets: a captured graph's pointers stay valid for every replay.
  Fixture f2;
  for (int i = 0; i < 4; ++i) f2.Add(1, 900, 70 * i, true);
  f2.Finish({{900, true}, {900, true}, {900, true}, {900, true}});
  StepInputs s2;
  const SampleInput samples2[4] = {};
  BuildStepInputs(f2.batch, samples2, 16, &g, &s2);
  EXPECT_EQ(s2.offsets.page_table, s.offsets.page_table);
  EXPECT_EQ(s2.offsets.logit_rows, s.offsets.logit_rows);
  EXPECT_EQ(s2.offsets.total, s.offsets.total);
}

TEST(StepPlanTest, GraphBuckets) {
  EXPECT_EQ(GraphBatchBucket(1, 256), 1);
  EXPECT_EQ(GraphBatchBucket(3, 256), 4);
  EXPECT_EQ(GraphBatchBucket(8, 256), 8);
  EXPECT_EQ(GraphBatchBucket(9, 256), 16);
  EXPECT_EQ(GraphBatchBucket(63, 256), 64);
  EXPECT_EQ(GraphBatchBucket(65, 256), 96);
  EXPECT_EQ(GraphBatchBucket(250, 256), 256);
  EXPECT_EQ(GraphBatchBucket(257, 256), 0);
  EXPECT_EQ(GraphBatchBucket(100, 100), 100);  // capped at the limit
  EXPECT_EQ(GraphBatchBucket(0, 256), 0);
  EXPECT_EQ(GraphPartitionBucket(1), 1);
  EXPECT_EQ(GraphPartitionBucket(512), 1);
  EXPECT_EQ(GraphPartitionBucket(513), 2);
  EXPECT_EQ(GraphPartitionBucket(1537), 4);
  EXPECT_EQ(GraphPartitionBucket(32768), 64);
}

TEST(StepPlanTest, DecodePartitionSplitFillsSmallGrids) {
  // One sequence at 1k positions, 8 KV heads, 132 multiprocessors: 16 blocks -> 8 x 16.
  EXPECT_EQ(DecodePartitionSplit(1, 8, 2, 132, 8192), 8);
  EXPECT_EQ(DecodePartitionSplit(8, 8, 1, 132, 8192), 8);   // 64 blocks -> 512
  EXPECT_EQ(DecodePartitionSplit(16, 8, 1, 132, 8192), 4);  // 128 -> 512
  EXPECT_EQ(DecodePartitionSplit(32, 8, 1, 132, 8192), 2);  // 256 -> 512
  EXPECT_EQ(DecodePartitionSplit(33, 8, 1, 132, 8192), 1);  // 264: two blocks per SM already
  EXPECT_EQ(DecodePartitionSplit(64, 8, 2, 132, 8192), 1);
  EXPECT_EQ(DecodePartitionSplit(4, 8, 64, 132, 8192), 1);  // 4 x 32k
  EXPECT_EQ(DecodePartitionSplit(1, 8, 2, 132, 4), 2);      // the workspace holds 4 partials
  EXPECT_EQ(DecodePartitionSplit(1, 8, 2, 0, 8192), 1);     // no multiprocessor count
}

TEST(StepPlanTest, DecodePartitionSplitFillsWaves) {
  // An H100 (132 SMs) running 5 split blocks per SM: 660 at a time. Blocks of 512 positions
  // cost 544 (32 of overhead), of 256 288, of 128 160, of 64 96, per wave.
  EXPECT_EQ(DecodePartitionSplit(4, 8, 64, 132, 1 << 20, 5), 2);  // 4 x 32k: 3.1 waves -> 6.2
  EXPECT_EQ(DecodePartitionSplit(64, 8, 8, 132, 1 << 20, 5), 2);  // 64 x 4k: 7 x 544 > 13 x 288
  EXPECT_EQ(DecodePartitionSplit(64, 8, 2, 132, 1 << 20, 5), 1);  // 2 x 544 < 4 x 288, 7 x 160
  EXPECT_EQ(DecodePartitionSplit(1, 8, 2, 132, 1 << 20, 5), 8);   // 16 blocks: one wave of 64s
  EXPECT_EQ(DecodePartitionSplit(16, 8, 1, 132, 1 << 20, 5), 4);  // 512 fit one wave, 1024 do not
  EXPECT_EQ(DecodePartitionSplit(4, 8, 64, 132, 300, 5), 1);      // the workspace holds 300 units
  EXPECT_EQ(DecodePartitionSplit(4, 8, 64, 132, 512, 5), 2);
}

TEST(StepPlanTest, NoGraphForPrefillsOrLongContexts) {
  Fixture f;
  f.Add(2, 0, 0, true);
  f.Finish({{0, true}});
  EXPECT_EQ(ChooseGraph(f.batch, 16, 256, 32768).seqs, 0);
  Fixture g;
  g.Add(1, 40000, 0, true);
  g.Finish({{40000, true}});
  EXPECT_EQ(ChooseGraph(g.batch, 16, 256, 32768).seqs, 0);
  Fixture h;
  h.Add(1, 5, 0, false);  // a one-token chunk without logits is not a decode step
  h.Finish({{5, false}});
  EXPECT_EQ(ChooseGraph(h.batch, 16, 256, 32768).seqs, 0);
  EXPECT_EQ(ChooseGraph({}, 16, 256, 32768).seqs, 0);
}

TEST(StepPlanTest, SplitsAtSequenceBoundariesWithinLimits) {
  Fixture f;
  for (int n : {10, 20, 5, 1, 1, 30}) f.Add(n, 0, 0, true);
  f.Finish({{0, true}, {0, true}, {0, true}, {0, true}, {0, true}, {0, true}});
  StepLimits limits{32, 3, 2, 1000};
  auto parts = SplitBatch(f.batch, limits);
  ASSERT_OK(parts);
  // Tokens 10+20 | 5+1 (rows cap 2) | 1+30... 31 tokens fits 32.
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0].begin, 0u);
  EXPECT_EQ((*parts)[0].end, 2u);
  EXPECT_EQ((*parts)[1].end, 4u);
  EXPECT_EQ((*parts)[2].end, 6u);
  limits.max_tokens = 25;
  auto too_big = SplitBatch(f.batch, limits);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SplitBatch({}, limits)->empty());
}

TEST(StepPlanTest, SplitBoundsDecodePartitionUnits) {
  Fixture f;
  for (int i = 0; i < 5; ++i) f.Add(1, 2000, 0, true);  // 2001 positions: 4 partitions each
  f.Finish({{2000, true}, {2000, true}, {2000, true}, {2000, true}, {2000, true}});
  auto parts = SplitBatch(f.batch, {1000, 1000, 1000, 8});
  ASSERT_OK(parts);
  EXPECT_EQ(parts->size(), 3u);  // 2 decodes x 4 partitions per micro-batch
}

TEST(ArenaLayoutTest, OffsetsAndSizes) {
  KvArenaLayout l{32, 100, 16, 8, 128, 2};
  EXPECT_EQ(l.page_bytes(), 16u * 8 * 128 * 2);
  EXPECT_EQ(l.layer_bytes(), 100 * l.page_bytes());
  EXPECT_EQ(l.k_offset(0), 0u);
  EXPECT_EQ(l.v_offset(0), l.layer_bytes());
  EXPECT_EQ(l.k_offset(1), 2 * l.layer_bytes());
  EXPECT_EQ(l.v_offset(31) + l.layer_bytes(), l.total_bytes());
  EXPECT_EQ(l.bytes_per_pool_page(), 131072u * 16);  // Llama-3-8B: 128 KiB per token
}

TEST(ArenaLayoutTest, PlansPagesFromTheMemoryFraction) {
  const size_t gib = size_t{1} << 30;
  MemoryBudget b;
  b.device_total = 80 * gib;
  b.device_free = 60 * gib;  // 20 GiB of weights and workspace already allocated
  b.fraction = 0.9;
  b.reserve = 0;
  // 72 GiB allowed - 20 used = 52 GiB of 2 MiB pages.
  EXPECT_EQ(*PlanKvPages(b, 2 << 20), 52 * 512);
  b.requested_pages = 1000;
  EXPECT_EQ(*PlanKvPages(b, 2 << 20), 1000);
  b.requested_pages = 40000;  // 78 GiB: more than is free
  EXPECT_EQ(PlanKvPages(b, 2 << 20).status().code(), absl::StatusCode::kResourceExhausted);
  b.requested_pages = 0;
  b.fraction = 0.2;  // 16 GiB allowed, 20 GiB used: nothing left
  EXPECT_EQ(PlanKvPages(b, 2 << 20).status().code(), absl::StatusCode::kResourceExhausted);
  b.fraction = 1.5;
  EXPECT_EQ(PlanKvPages(b, 2 << 20).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker::cuda
