// CUDA paged attention (decode and prefill) against the CPU backend's WriteKv + PagedAttention on
// fresh random inputs rounded to the dtype first, so both sides see the same values.
//
// Traps: every cache slot that holds no position (tails of last pages, spare pages) is NaN, and
// page-table entries past a sequence's pages point at an all-NaN page, so any read outside the
// context turns the output NaN. Outputs (and the decode workspace) are poisoned with 0xff bytes
// (NaN in bf16 and fp16) before every launch; padding entries point at a spare row that must stay
// poisoned. Each case runs twice and must be bitwise reproducible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/fp16.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/status_assertions.h"
#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/kernel_args.h"

namespace pagoda::worker::cuda {
namespace {

struct Shape {
  int page_size;
  int head_dim;
  int n_heads;
  int n_kv_heads;
};

struct SeqSpec {
  int start_pos;
  int num_tokens;  // 0: padding entry
};

std::string Describe(DType d, const Shape& s) {
  return std::string(DTypeName(d)) + " page " + std::to_string(s.page_size) + " head_dim " +
         std::to_string(s.head_dim) + " heads " + std::to_string(s.n_heads) + "/" +
         std::to_string(s.n_kv_heads);
}

// One batch: inputs as the GPU sees them (dtype bits) and the CPU reference output.
struct Problem {
  DType dtype;
  Shape shape;
  std::vector<SeqSpec> seqs;
  int stride = 0;     // page_table_stride
  int num_pages = 0;  // of the caches
  int rows = 0;       // q/out rows: the real ones, then one spare row for padding entries
  std::vector<int32_t> token_start, num_tokens, start_pos, page_table;  // page_table: GPU's
  std::vector<uint16_t> q, k_cache, v_cache;
  std::vector<float> ref;  // [rows][n_heads][head_dim]; the spare row is not compared
  std::string what;
};

// contiguous: the KV of sequence s lives in pages s * stride, +1, ... (the CPU reference uses that
// identity table) and the GPU page table is all trap entries.
Problem Build(DType dtype, const Shape& shape, const std::vector<SeqSpec>& seqs, bool contiguous,
              uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto rounded = [&] { return FromBits(ToBits(normal(rng), dtype), dtype); };
  Problem pr;
  pr.dtype = dtype;
  pr.shape = shape;
  pr.seqs = seqs;
  pr.what = Describe(dtype, shape) + (contiguous ? " contiguous" : "");
  const int n = static_cast<int>(seqs.size()), ps = shape.page_size;
  const int kv_dim = shape.n_kv_heads * shape.head_dim;
  std::vector<int> context(n), pages(n);
  int max_pages = 0, used_pages = 0;
  for (int s = 0; s < n; ++s) {
    context[s] = seqs[s].num_tokens > 0 ? seqs[s].start_pos + seqs[s].num_tokens : 0;
    pages[s] = (context[s] + ps - 1) / ps;
    max_pages = std::max(max_pages, pages[s]);
    used_pages += pages[s];
  }
  pr.stride = max_pages + 2;
  std::vector<int32_t> cpu_table(static_cast<size_t>(n) * pr.stride);
  if (contiguous) {
    pr.num_pages = n * pr.stride + 1;
    for (size_t i = 0; i < cpu_table.size(); ++i) cpu_table[i] = static_cast<int32_t>(i);
    pr.page_table.assign(cpu_table.size(), pr.num_pages - 1);  // the trap page
  } else {
    pr.num_pages = used_pages + 3;
    std::vector<int32_t> perm(pr.num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int32_t trap = perm.back();
    int next = 0;
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < pr.stride; ++i) {
        cpu_table[static_cast<size_t>(s) * pr.stride + i] = i < pages[s] ? perm[next++] : trap;
      }
    }
    pr.page_table = cpu_table;
  }

  // Caches: the CPU reference's are F16 (kv_arena.h), and the GPU's are made from those same
  // F16 values below, so both read the same numbers; NaN wherever no position is written.
  const size_t cache_size = static_cast<size_t>(pr.num_pages) * ps * kv_dim;
  const uint16_t nan = common::FloatToF16(std::numeric_limits<float>::quiet_NaN());
  std::vector<uint16_t> k_cache(cache_size, nan), v_cache(cache_size, nan);
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  const cpu::LocalContext cpu_ctx(cpu::CpuIsa::kPortable, threads);
  std::vector<float> k_rows, v_rows;
  std::vector<int32_t> kv_pos;
  std::vector<const int32_t*> kv_tables;
  for (int s = 0; s < n; ++s) {
    for (int pos = 0; pos < context[s]; ++pos) {
      for (int i = 0; i < kv_dim; ++i) k_rows.push_back(rounded());
      for (int i = 0; i < kv_dim; ++i) v_rows.push_back(rounded());
      kv_pos.push_back(pos);
      kv_tables.push_back(cpu_table.data() + static_cast<size_t>(s) * pr.stride);
    }
  }
  cpu::WriteKv(cpu_ctx.get(),
               {k_rows.data(), v_rows.data(), kv_pos.data(), kv_tables.data(), k_cache.data(),
                v_cache.data(), static_cast<int>(kv_pos.size()), kv_dim, ps});

  // Rows: the real tokens in entry order, then the spare row every padding entry points at.
  std::vector<int32_t> q_pos;
  std::vector<const int32_t*> q_tables;
  for (int s = 0; s < n; ++s) {
    pr.start_pos.push_back(seqs[s].start_pos);
    pr.num_tokens.push_back(seqs[s].num_tokens);
    pr.token_start.push_back(static_cast<int32_t>(q_pos.size()));
    for (int i = 0; i < seqs[s].num_tokens; ++i) {
      q_pos.push_back(seqs[s].start_pos + i);
      q_tables.push_back(cpu_table.data() + static_cast<size_t>(s) * pr.stride);
    }
  }
  const int real_rows = static_cast<int>(q_pos.size());
  pr.rows = real_rows + 1;
  for (int s = 0; s < n; ++s) {
    if (seqs[s].num_tokens == 0) pr.token_start[s] = real_rows;
  }
  const size_t row_elems = static_cast<size_t>(shape.n_heads) * shape.head_dim;
  std::vector<float> q(pr.rows * row_elems);
  for (float& v : q) v = rounded();
  pr.ref.assign(q.size(), 0.0f);
  cpu::PagedAttention(
      cpu_ctx.get(), {q.data(), k_cache.data(), v_cache.data(), q_pos.data(), q_tables.data(),
                      pr.ref.data(), real_rows, shape.n_heads, shape.n_kv_heads, shape.head_dim, ps,
                      1.0f / std::sqrt(static_cast<float>(shape.head_dim))});
  for (float v : q) pr.q.push_back(ToBits(v, dtype));
  for (uint16_t h : k_cache) pr.k_cache.push_back(ToBits(common::F16ToFloat(h), dtype));
  for (uint16_t h : v_cache) pr.v_cache.push_back(ToBits(common::F16ToFloat(h), dtype));
  return pr;
}

// Per-sequence relative L2 error below the dtype's tolerance, no NaN, spare row untouched.
void Check(const Problem& pr, const std::vector<uint16_t>& got, const std::string& what) {
  const double tol = pr.dtype == DType::kBf16 ? 1e-2 : 2e-3;
  const size_t row_elems = static_cast<size_t>(pr.shape.n_heads) * pr.shape.head_dim;
  for (size_t s = 0; s < pr.seqs.size(); ++s) {
    if (pr.seqs[s].num_tokens == 0) continue;
    double err = 0, norm = 0;
    int nan = 0;
    const size_t begin = pr.token_start[s] * row_elems;
    const size_t end = begin + pr.seqs[s].num_tokens * row_elems;
    for (size_t i = begin; i < end; ++i) {
      const double g = FromBits(got[i], pr.dtype), r = pr.ref[i];
      if (std::isnan(g)) ++nan;
      err += (g - r) * (g - r);
      norm += r * r;
    }
    const std::string where = what + ", seq " + std::to_string(s) + " (start_pos " +
                              std::to_string(pr.seqs[s].start_pos) + ", tokens " +
                              std::to_string(pr.seqs[s].num_tokens) + ")";
    EXPECT_EQ(nan, 0) << where;
    EXPECT_LT(std::sqrt(err / norm), tol) << where;
  }
  int touched = 0;
  for (size_t i = (pr.rows - 1) * row_elems; i < pr.rows * row_elems; ++i)
    touched += got[i] != kPoison;
  EXPECT_EQ(touched, 0) << what << ": the padding row was written";
}

// The device copies of a problem's inputs and its poisoned output.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& pr)
      : q(pr.q.size() * 2),
        k(pr.k_cache.size() * 2),
        v(pr.v_cache.size() * 2),
        out(pr.q.size() * 2),
        token_start(pr.token_start.size() * 4),
        num_tokens(pr.num_tokens.size() * 4),
        start_pos(pr.start_pos.size() * 4),
        page_table(pr.page_table.size() * 4) {}

  void Upload(const Problem& pr) {
    for (const DeviceArray* a :
         {&q, &k, &v, &out, &token_start, &num_tokens, &start_pos, &page_table}) {
      ASSERT_EQ(a->status(), cudaSuccess);
    }
    ASSERT_EQ(q.Upload(pr.q), cudaSuccess);
    ASSERT_EQ(k.Upload(pr.k_cache), cudaSuccess);
    ASSERT_EQ(v.Upload(pr.v_cache), cudaSuccess);
    ASSERT_EQ(token_start.Upload(pr.token_start), cudaSuccess);
    ASSERT_EQ(num_tokens.Upload(pr.num_tokens), cudaSuccess);
    ASSERT_EQ(start_pos.Upload(pr.start_pos), cudaSuccess);
    ASSERT_EQ(page_table.Upload(pr.page_table), cudaSuccess);
  }

  AttentionBatch BatchOf(const Problem& pr) const {
    return {static_cast<const int32_t*>(token_start.get()),
            static_cast<const int32_t*>(num_tokens.get()),
            static_cast<const int32_t*>(start_pos.get()),
            static_cast<const int32_t*>(page_table.get()),
            pr.stride,
            static_cast<int>(pr.seqs.size())};
  }
  AttentionShape ShapeOf(const Problem& pr) const {
    return {pr.shape.n_heads,
            pr.shape.n_kv_heads,
            pr.shape.head_dim,
            pr.shape.page_size,
            1.0f / std::sqrt(static_cast<float>(pr.shape.head_dim)),
            pr.dtype};
  }

  DeviceArray q, k, v, out, token_start, num_tokens, start_pos, page_table;
};

// Poisons, launches `launch`, downloads; twice, expecting bitwise equal outputs.
template <typename Launch>
void RunTwice(const Problem& pr, DeviceProblem& dev, DeviceArray* workspace, Launch launch,
              const std::string& what) {
  std::vector<uint16_t> first;
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(dev.out.Poison(), cudaSuccess);
    if (workspace != nullptr) {
      ASSERT_EQ(workspace->Poison(), cudaSuccess);
    }
    const absl::Status launched = launch();
    ASSERT_OK(launched) << what;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<uint16_t> got(pr.q.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dev.out.get(), got.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (run == 0) {
      Check(pr, got, what);
      first = std::move(got);
    } else {
      EXPECT_TRUE(got == first) << what << ": a second launch gave different bits";
    }
  }
}

// max_partitions 0: enough partitions of partition_tokens for the longest context.
// with_workspace false passes none.
void RunDecode(const Problem& pr, int max_partitions = 0, bool with_workspace = true,
               bool contiguous = false, int partition_tokens = kDecodePartitionTokens) {
  int longest = 0;
  for (const SeqSpec& s : pr.seqs) longest = std::max(longest, s.start_pos + 1);
  if (max_partitions == 0) max_partitions = (longest + partition_tokens - 1) / partition_tokens;
  const std::string what = "decode " + pr.what + ", max_partitions " +
                           std::to_string(max_partitions) + " of " +
                           std::to_string(partition_tokens) + " positions";
  DeviceProblem dev(pr);
  ASSERT_NO_FATAL_FAILURE(dev.Upload(pr));
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(
      static_cast<int>(pr.seqs.size()), pr.shape.n_heads, pr.shape.head_dim, max_partitions);
  DeviceArray workspace(ws_bytes);
  ASSERT_EQ(workspace.status(), cudaSuccess);
  // The last block of each (sequence, KV head) merges; every launch must leave its counter at 0.
  const size_t num_counters = pr.seqs.size() * pr.shape.n_kv_heads;
  DeviceArray counters(num_counters * sizeof(uint32_t));
  ASSERT_EQ(counters.status(), cudaSuccess);
  ASSERT_EQ(cudaMemset(counters.get(), 0, num_counters * sizeof(uint32_t)), cudaSuccess);
  DecodeAttentionParams p;
  p.batch = dev.BatchOf(pr);
  p.shape = dev.ShapeOf(pr);
  p.q = dev.q.get();
  p.k_cache = dev.k.get();
  p.v_cache = dev.v.get();
  p.out = dev.out.get();
  p.max_partitions = max_partitions;
  p.partition_tokens = partition_tokens;
  p.workspace = with_workspace ? workspace.get() : nullptr;
  p.counters = with_workspace ? counters.as<uint32_t>() : nullptr;
  p.contiguous_kv = contiguous;
  RunTwice(
      pr, dev, with_workspace ? &workspace : nullptr,
      [&] { return LaunchDecodeAttention(p, nullptr); }, what);
  // Two launches back to back, as a step's layers run them: the second counts from the zeros
  // the first left, with no synchronization between them.
  std::vector<uint16_t> once(pr.q.size()), twice(pr.q.size());
  ASSERT_EQ(dev.out.Download(once), cudaSuccess);
  ASSERT_EQ(dev.out.Poison(), cudaSuccess);
  ASSERT_OK(LaunchDecodeAttention(p, nullptr)) << what;
  ASSERT_OK(LaunchDecodeAttention(p, nullptr)) << what;
  ASSERT_EQ(dev.out.Download(twice), cudaSuccess);
  EXPECT_TRUE(twice == once) << what << ": back-to-back launches gave different bits";
  std::vector<uint32_t> left(num_counters);
  ASSERT_EQ(counters.Download(left), cudaSuccess);
  EXPECT_EQ(left, std::vector<uint32_t>(num_counters, 0u)) << what << ": counters left nonzero";
}

// Whether the device runs the wgmma kernel (compute capability 9.0, as the launcher asks).
bool DeviceHasWgmma() {
  int major = 0, minor = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess &&
         major == 9 && minor == 0;
}

const char* KernelName(PrefillKernel kernel) {
  switch (kernel) {
    case PrefillKernel::kAuto:
      return "auto";
    case PrefillKernel::kMmaSync:
      return "mma.sync";
    case PrefillKernel::kWgmma:
      return "wgmma";
  }
  return "?";
}

// max_chunk_tokens 0: the largest num_tokens. kernel, rows_per_block: PrefillAttentionParams's.
// A wgmma run on a device without it is skipped (the launcher refuses it there).
void RunPrefill(const Problem& pr, int max_chunk_tokens = 0, int rows_per_block = 0,
                PrefillKernel kernel = PrefillKernel::kAuto) {
  if (kernel == PrefillKernel::kWgmma && !DeviceHasWgmma()) return;
  if (max_chunk_tokens == 0) {
    for (const SeqSpec& s : pr.seqs) max_chunk_tokens = std::max(max_chunk_tokens, s.num_tokens);
  }
  const std::string what = "prefill " + pr.what + ", max_chunk_tokens " +
                           std::to_string(max_chunk_tokens) + ", kernel " + KernelName(kernel) +
                           ", rows_per_block " + std::to_string(rows_per_block);
  DeviceProblem dev(pr);
  ASSERT_NO_FATAL_FAILURE(dev.Upload(pr));
  PrefillAttentionParams p;
  p.batch = dev.BatchOf(pr);
  p.shape = dev.ShapeOf(pr);
  p.q = dev.q.get();
  p.k_cache = dev.k.get();
  p.v_cache = dev.v.get();
  p.out = dev.out.get();
  p.max_chunk_tokens = max_chunk_tokens;
  p.rows_per_block = rows_per_block;
  p.kernel = kernel;
  RunTwice(
      pr, dev, nullptr, [&] { return LaunchPrefillAttention(p, nullptr); }, what);
}

// Decode entries with the given contexts (0: a padding entry, with a nonzero start_pos).
std::vector<SeqSpec> DecodeSeqs(const std::vector<int>& contexts) {
  std::vector<SeqSpec> seqs;
  for (int c : contexts) seqs.push_back(c == 0 ? SeqSpec{37, 0} : SeqSpec{c - 1, 1});
  return seqs;
}

// Contexts around page and partition boundaries, ragged, with a padding entry.
const std::vector<int> kRaggedContexts = {17, 1, 4096, 15, 0, 512, 16, 513, 1000, 511};

// The tests that run for each dtype.
class AttentionDTypeTest : public ::testing::TestWithParam<DType> {};

#define SKIP_WITHOUT_GPU() \
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run"

TEST_P(AttentionDTypeTest, DecodeFastPath) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  // head_dim 128 with groups 1, 2, 4, 8; head_dim 64 with groups 1, 3 (padded to 4), 8.
  const Shape shapes[] = {{16, 128, 8, 2}, {8, 128, 8, 8}, {16, 128, 4, 2}, {32, 128, 16, 2},
                          {8, 64, 4, 4},   {16, 64, 6, 2}, {32, 64, 16, 2}};
  uint32_t seed = 1 + (dtype == DType::kFp16 ? 7 : 0);
  for (const Shape& shape : shapes) {
    ASSERT_NO_FATAL_FAILURE(
        RunDecode(Build(dtype, shape, DecodeSeqs(kRaggedContexts), false, seed++)));
  }
}

TEST_P(AttentionDTypeTest, DecodeGenericPath) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  // Odd head dims (8 is the trained test model's), 256, and groups above 8.
  const Shape shapes[] = {{16, 8, 4, 2},   {8, 80, 8, 2},    {32, 256, 4, 4},
                          {16, 96, 16, 4}, {16, 128, 16, 1}, {8, 64, 32, 2}};
  uint32_t seed = 100 + (dtype == DType::kFp16 ? 6 : 0);
  for (const Shape& shape : shapes) {
    ASSERT_NO_FATAL_FAILURE(
        RunDecode(Build(dtype, shape, DecodeSeqs(kRaggedContexts), false, seed++)));
  }
}

TEST_P(AttentionDTypeTest, DecodeSinglePartitionNeedsNoWorkspace) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  const std::vector<int> contexts = {1, 0, 100, 512, 33};
  uint32_t seed = 200 + (dtype == DType::kFp16 ? 2 : 0);
  for (const Shape& shape : {Shape{16, 128, 32, 8}, Shape{16, 8, 4, 2}}) {
    ASSERT_NO_FATAL_FAILURE(RunDecode(Build(dtype, shape, DecodeSeqs(contexts), false, seed++),
                                      /*max_partitions=*/1, /*with_workspace=*/false));
  }
}

TEST(AttentionGpuTest, DecodeGridLargerThanContexts) {
  SKIP_WITHOUT_GPU();
  // A CUDA graph's grid covers a power-of-two bucket of partitions, more than the batch needs.
  uint32_t seed = 300;
  for (const Shape& shape : {Shape{16, 128, 32, 8}, Shape{16, 80, 4, 2}}) {
    ASSERT_NO_FATAL_FAILURE(
        RunDecode(Build(DType::kBf16, shape, DecodeSeqs({1000, 0, 3000, 7}), false, seed++), 16));
  }
}

TEST(AttentionGpuTest, DecodeShortPartitions) {
  SKIP_WITHOUT_GPU();
  // What the backend asks for when the grid is small: partitions of 64..256 positions, on the
  // fast and the generic path, with a grid larger than the contexts need.
  const std::vector<int> contexts = {17, 1, 1030, 0, 64, 65, 300, 128};
  uint32_t seed = 350;
  for (int tokens : {64, 128, 256}) {
    for (const Shape& shape : {Shape{16, 128, 32, 8}, Shape{16, 64, 8, 2}, Shape{16, 80, 4, 2}}) {
      ASSERT_NO_FATAL_FAILURE(RunDecode(
          Build(DType::kBf16, shape, DecodeSeqs(contexts), false, seed++), 0, true, false, tokens));
    }
    ASSERT_NO_FATAL_FAILURE(
        RunDecode(Build(DType::kFp16, Shape{16, 128, 8, 2}, DecodeSeqs(contexts), false, seed++),
                  2048 / tokens, true, false, tokens));
  }
  // More partitions than the merge stages at once (kMergeChunk, 256): 259 of 64 positions, and
  // head_dim 256, whose dims take two per merge thread.
  ASSERT_NO_FATAL_FAILURE(
      RunDecode(Build(DType::kBf16, Shape{16, 128, 4, 2}, DecodeSeqs({16550, 70}), false, 360), 0,
                true, false, 64));
  ASSERT_NO_FATAL_FAILURE(
      RunDecode(Build(DType::kBf16, Shape{16, 256, 4, 2}, DecodeSeqs({700, 3}), false, 361), 0,
                true, false, 64));
}

TEST_P(AttentionDTypeTest, DecodeContiguousKv) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  uint32_t seed = 400 + (dtype == DType::kFp16 ? 3 : 0);
  for (const Shape& shape : {Shape{16, 128, 32, 8}, Shape{8, 64, 8, 1}, Shape{16, 8, 4, 2}}) {
    ASSERT_NO_FATAL_FAILURE(
        RunDecode(Build(dtype, shape, DecodeSeqs(kRaggedContexts), true, seed++), 0, true,
                  /*contiguous=*/true));
  }
}

// Chunks with and without a cached prefix, lengths 1..300, and a padding entry.
const std::vector<SeqSpec> kPrefillSeqs = {{0, 1},     {0, 37}, {100, 64}, {50, 0},
                                           {513, 300}, {5, 1},  {31, 33},  {0, 129}};

TEST_P(AttentionDTypeTest, PrefillChunks) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  const Shape shapes[] = {{16, 128, 8, 2}, {8, 64, 8, 1},   {16, 8, 4, 2},
                          {32, 80, 4, 4},  {16, 256, 8, 2}, {8, 96, 12, 4}};
  uint32_t seed = 500 + (dtype == DType::kFp16 ? 6 : 0);
  for (const Shape& shape : shapes) {
    ASSERT_NO_FATAL_FAILURE(RunPrefill(Build(dtype, shape, kPrefillSeqs, false, seed++)));
  }
}

TEST_P(AttentionDTypeTest, PrefillTensorCoresGroupsAndBlockHeights) {
  const DType dtype = GetParam();
  SKIP_WITHOUT_GPU();
  // Head dims 64 and 128 run the tensor-core kernels: GQA groups 1 to 8, pages of 8, 16 and 32,
  // mma.sync at both block heights and wgmma. Chunks start inside pages and end inside them,
  // after cached prefixes (prefix-cache hits and later chunks alike) or at position 0; one entry
  // is padding.
  const std::vector<SeqSpec> seqs = {{0, 1},    {0, 45}, {100, 40}, {50, 0},
                                     {213, 70}, {5, 1},  {31, 33}};
  const Shape shapes[] = {{16, 128, 4, 4}, {16, 128, 4, 2}, {32, 128, 6, 2}, {16, 128, 8, 2},
                          {8, 64, 10, 2},  {16, 64, 12, 2}, {32, 64, 14, 2}, {16, 64, 8, 1}};
  uint32_t seed = 700 + (dtype == DType::kFp16 ? 20 : 0);
  const struct {
    PrefillKernel kernel;
    int rows;
  } configs[] = {
      {PrefillKernel::kMmaSync, 64}, {PrefillKernel::kMmaSync, 128}, {PrefillKernel::kWgmma, 0}};
  for (size_t i = 0; i < std::size(shapes); ++i) {
    for (size_t c = 0; c < std::size(configs); ++c) {
      // FP16 takes one configuration per shape in turn (all of them, a third of the emulator's
      // time).
      if (dtype == DType::kFp16 && c != i % std::size(configs)) continue;
      ASSERT_NO_FATAL_FAILURE(RunPrefill(Build(dtype, shapes[i], seqs, false, seed++), 0,
                                         configs[c].rows, configs[c].kernel));
    }
  }
}

TEST(AttentionGpuTest, PrefillTensorCoresLongContext) {
  SKIP_WITHOUT_GPU();
  // Many K/V tiles with the running max and sum carried across them, a chunk wider than one
  // block, and the launcher's own choice of block height; each kernel.
  for (PrefillKernel kernel : {PrefillKernel::kMmaSync, PrefillKernel::kWgmma}) {
    ASSERT_NO_FATAL_FAILURE(RunPrefill(
        Build(DType::kBf16, {16, 128, 8, 2}, {{1500, 80}, {0, 200}, {700, 3}}, false, 750), 0, 0,
        kernel));
  }
}

TEST(AttentionGpuTest, PrefillWideGridAndLargeGroup) {
  SKIP_WITHOUT_GPU();
  // A grid for more tokens than any chunk has (each tensor-core kernel); a group wider than one
  // block's rows.
  for (PrefillKernel kernel : {PrefillKernel::kMmaSync, PrefillKernel::kWgmma}) {
    ASSERT_NO_FATAL_FAILURE(
        RunPrefill(Build(DType::kBf16, {16, 128, 8, 2}, kPrefillSeqs, false, 600), 400, 0, kernel));
  }
  ASSERT_NO_FATAL_FAILURE(RunPrefill(
      Build(DType::kFp16, {16, 16, 64, 1}, {{0, 3}, {0, 0}, {40, 20}, {7, 1}}, false, 601)));
  ASSERT_NO_FATAL_FAILURE(RunPrefill(
      Build(DType::kBf16, {16, 64, 64, 1}, {{0, 3}, {0, 0}, {40, 20}, {7, 1}}, false, 602), 0, 0,
      PrefillKernel::kWgmma));
}

TEST(AttentionGpuTest, PrefillMisalignedQueriesTakeTheGenericKernel) {
  SKIP_WITHOUT_GPU();
  // q 8 bytes past a 16-byte boundary cannot feed cp.async (the GPU faults on a misaligned
  // address; so does the emulator): whichever kernel is asked for, the generic one runs it.
  const Problem pr = Build(DType::kBf16, {16, 128, 4, 2}, {{100, 40}, {0, 17}}, false, 810);
  DeviceProblem dev(pr);
  ASSERT_NO_FATAL_FAILURE(dev.Upload(pr));
  DeviceArray shifted(pr.q.size() * 2 + 16);
  ASSERT_EQ(shifted.status(), cudaSuccess);
  char* q = shifted.as<char>() + 8;
  ASSERT_EQ(cudaMemcpy(q, pr.q.data(), pr.q.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (PrefillKernel kernel :
       {PrefillKernel::kAuto, PrefillKernel::kMmaSync, PrefillKernel::kWgmma}) {
    PrefillAttentionParams p;
    p.batch = dev.BatchOf(pr);
    p.shape = dev.ShapeOf(pr);
    p.q = q;
    p.k_cache = dev.k.get();
    p.v_cache = dev.v.get();
    p.out = dev.out.get();
    p.max_chunk_tokens = 40;
    p.kernel = kernel;
    RunTwice(
        pr, dev, nullptr, [&] { return LaunchPrefillAttention(p, nullptr); },
        std::string("prefill, q misaligned, kernel ") + KernelName(kernel));
  }
}

TEST(AttentionGpuTest, WorkspaceCoversThePartials) {
  // Host-only: [seqs][heads][partitions] of head_dim floats plus a (max, sum) pair.
  EXPECT_GE(DecodeAttentionWorkspaceBytes(64, 32, 128, 8), size_t{64} * 32 * 8 * (128 + 2) * 4);
  EXPECT_GE(DecodeAttentionWorkspaceBytes(3, 5, 8, 1), size_t{3} * 5 * (8 + 2) * 4);
}

TEST(AttentionGpuTest, RejectsUnsupportedShapes) {
  // Host-only: the launchers check their arguments before touching the device, and say which
  // one is wrong.
  DecodeAttentionParams d;
  d.batch.num_seqs = 1;
  d.contiguous_kv = true;                         // so that only the shape is wrong
  d.shape = {8, 2, 257, 16, 1.0f, DType::kBf16};  // head_dim odd and > 256
  EXPECT_EQ(LaunchDecodeAttention(d, nullptr).message(),
            "LaunchDecodeAttention: head_dim 257 must be even, in [2, 256]");
  d.shape = {6, 4, 64, 16, 1.0f, DType::kBf16};  // n_kv_heads does not divide n_heads
  EXPECT_EQ(LaunchDecodeAttention(d, nullptr).message(),
            "LaunchDecodeAttention: n_kv_heads 4 must divide n_heads 6");
  d.shape = {8, 2, 64, 16, 1.0f, DType::kBf16};  // a valid shape: now the null tensors
  EXPECT_EQ(LaunchDecodeAttention(d, nullptr).message(),
            "LaunchDecodeAttention: batch.token_start is null");
  EXPECT_EQ(LaunchDecodeAttention(d, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Valid (never read) pointers, so that only partition_tokens is wrong.
  alignas(16) static const int32_t kUnread[4] = {};
  d.batch.token_start = d.batch.num_tokens = d.batch.start_pos = kUnread;
  d.q = d.k_cache = d.v_cache = kUnread;
  d.out = const_cast<int32_t*>(kUnread);
  for (int tokens : {32, 100, 1024}) {
    d.partition_tokens = tokens;
    EXPECT_EQ(LaunchDecodeAttention(d, nullptr).message(),
              "LaunchDecodeAttention: partition_tokens " + std::to_string(tokens) +
                  " must be a power of two in [64, 512]");
  }
  // Several partitions need the workspace and the merge's counters.
  d.partition_tokens = kDecodePartitionTokens;
  d.max_partitions = 2;
  d.workspace = const_cast<int32_t*>(kUnread);
  EXPECT_EQ(LaunchDecodeAttention(d, nullptr).message(),
            "LaunchDecodeAttention: counters is null with max_partitions 2 > 1");
  static const int32_t kNeverRead = 0;
  PrefillAttentionParams p;
  p.batch.num_seqs = 1;
  p.batch.page_table = &kNeverRead;
  p.max_chunk_tokens = 1;
  p.shape = {8, 2, 258, 16, 1.0f, DType::kFp16};
  EXPECT_EQ(LaunchPrefillAttention(p, nullptr).message(),
            "LaunchPrefillAttention: head_dim 258 must be even, in [2, 256]");
  if (DeviceHasWgmma()) {
    p.shape = {8, 2, 128, 16, 1.0f, DType::kFp16};
    p.batch.token_start = p.batch.num_tokens = p.batch.start_pos = kUnread;
    p.q = p.k_cache = p.v_cache = kUnread;
    p.out = const_cast<int32_t*>(kUnread);
    p.kernel = PrefillKernel::kWgmma;
    p.rows_per_block = 64;
    EXPECT_EQ(LaunchPrefillAttention(p, nullptr).message(),
              "LaunchPrefillAttention: rows_per_block 64 must be 0 or 128 for the wgmma kernel");
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionGpuTest, AttentionDTypeTest,
                         ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return DTypeTestName(info.param);
                         });

}  // namespace
}  // namespace pagoda::worker::cuda
