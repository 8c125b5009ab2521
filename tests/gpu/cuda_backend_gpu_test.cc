// The CUDA backend against the CPU backend: logits of ragged batches (chunked prefills mixed
// with decodes, shuffled pages, micro-batch splits), greedy tokens of the trained model against
// llama.cpp's golden ids, CUDA-graph replays against eager steps, seeded sampling, KV arena
// sizing, page copies and swaps. The weight formats are in cuda_weights_gpu_test. Skips without
// a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/gpu/cuda_backend_test_support.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/llama_cpp_top5.h"
#include "tests/worker/model_fixtures.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/device.h"

namespace pagoda::worker::cuda {
namespace {

struct Shape {
  int dim, heads, kv_heads;
};

// head_dim 32 (generic path), 64, 128 with GQA ratios 1, 4 and 8.
constexpr Shape kRaggedShapes[] = {{256, 8, 2}, {512, 8, 8}, {512, 4, 1}, {1024, 8, 1}};

class RaggedLogits : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(RaggedLogits, MatchCpu) {
  SKIP_WITHOUT_GPU();
  const auto [shape_index, dtype] = GetParam();
  const Shape shape = kRaggedShapes[shape_index];
  std::mt19937_64 rng(7 + 2 * shape_index + (dtype == DType::kFp16 ? 1 : 0));
  for (int ps : {8, 16, 32}) {
    modelgen::RandomModelOptions o =
        testing::SmallRandomOptions(shape.dim, shape.heads, shape.kv_heads, 2, rng());
    o.context_length = 1024;
    // Weights exactly representable in the dtype: only activation rounding differs.
    o.dtype = dtype == DType::kBf16 ? common::GgmlType::BF16 : common::GgmlType::F16;
    auto model = testing::RandomModel(o);
    ASSERT_NE(model, nullptr);
    const int pages = 6 * 1024 / ps;
    auto cpu = MakeCpu(model, ps, pages);
    auto gpu = MakeCuda(model, ps, pages, dtype);
    ASSERT_NE(gpu, nullptr);
    SCOPED_TRACE(::testing::Message() << "page " << ps);
    CompareRagged(*cpu, *gpu, rng, 5, 300, 8, dtype == DType::kBf16 ? 3e-2 : 6e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    CudaBackendGpuTest, RaggedLogits,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kRaggedShapes))),
                       ::testing::Values(DType::kBf16, DType::kFp16)),
    [](const ::testing::TestParamInfo<RaggedLogits::ParamType>& info) {
      const Shape& s = kRaggedShapes[std::get<0>(info.param)];
      return absl::StrCat("Dim", s.dim, "Heads", s.heads, "Kv", s.kv_heads, "_",
                          DTypeTestName(std::get<1>(info.param)));
    });

// max_batch_tokens 0 takes the device's default, and the backend asks for prefill chunks of its
// whole budget.
TEST(CudaBackendGpuTest, ZeroMaxBatchTokensFollowsTheDevice) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_EQ(DefaultMaxBatchTokens(80 * kGiB, 9), 8192);    // H100
  EXPECT_EQ(DefaultMaxBatchTokens(141 * kGiB, 10), 8192);  // B200 class
  EXPECT_EQ(DefaultMaxBatchTokens(80 * kGiB, 8), 2048);    // A100 80GB
  EXPECT_EQ(DefaultMaxBatchTokens(24 * kGiB, 9), 2048);
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 4, 2, 2, 5));
  ASSERT_NE(model, nullptr);
  auto gpu = MakeCuda(model, 16, 64, DType::kBf16, true, /*max_batch_tokens=*/0);
  ASSERT_NE(gpu, nullptr);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(gpu->max_batch_tokens(), DefaultMaxBatchTokens(prop.totalGlobalMem, prop.major));
  EXPECT_EQ(gpu->preferred_prefill_chunk(), gpu->max_batch_tokens());
  gpu = MakeCuda(model, 16, 64, DType::kBf16, true, /*max_batch_tokens=*/96);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->max_batch_tokens(), 96);
  EXPECT_EQ(gpu->preferred_prefill_chunk(), 96);
}

// A phase timer splits each pass into its parts without changing what the pass samples: a
// prefill and three decode steps give the same greedy tokens with and without one, and every
// part of each pass gets time (on a GPU, with the stream held until each pass is enqueued).
TEST(CudaBackendGpuTest, PhaseTimerTimesEveryPartAndChangesNothing) {
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 4, 2, 2, 11));
  ASSERT_NE(model, nullptr);
  auto run = [&](PhaseTimer* timer) {
    auto gpu = MakeCuda(model, 16, 16, DType::kBf16, /*graphs=*/true, /*max_batch_tokens=*/64);
    EXPECT_NE(gpu, nullptr);
    std::vector<int32_t> out;
    if (gpu == nullptr) return out;
    gpu->set_phase_timer(timer);
    std::vector<int32_t> tokens = {5, 77, 200, 12, 9, 41, 2, 88, 100, 31, 7, 64};
    const std::vector<int32_t> pages = {3, 7};
    for (int step = 0; step < 4; ++step) {
      const int start = step == 0 ? 0 : static_cast<int>(tokens.size()) - 1;
      const SeqInput in{std::span<const int32_t>(tokens).subspan(start), start, pages, true};
      const SampleInput greedy{SamplingParams{}, 0};
      std::vector<int32_t> sampled;
      EXPECT_OK(gpu->ForwardSample({&in, 1}, {&greedy, 1}, &sampled));
      if (sampled.size() != 1) return out;
      tokens.push_back(sampled[0]);
      out.push_back(sampled[0]);
    }
    return out;
  };
  const std::vector<int32_t> untimed = run(nullptr);  // first: every kernel loaded
  PhaseTimer timer(/*hold=*/!kEmulated);
  EXPECT_EQ(run(&timer), untimed);
  if (kEmulated) {
    // The emulator runs the holding host function as it is enqueued, so the hold can only run
    // out, as on a GPU whose host blocks mid-pass: the pass is still computed, and its parts are
    // refused, not counted.
    auto gpu = MakeCuda(model, 16, 16, DType::kBf16, true, 64);
    ASSERT_NE(gpu, nullptr);
    PhaseTimer held(/*hold=*/true);
    gpu->set_phase_timer(&held);
    const std::vector<int32_t> tokens = {5, 77, 200}, page = {3};
    const SeqInput in{tokens, 0, page, true};
    const SampleInput greedy{SamplingParams{}, 0};
    std::vector<int32_t> sampled;
    const absl::Status s = gpu->ForwardSample({&in, 1}, {&greedy, 1}, &sampled);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(held.passes(), 0);
    EXPECT_EQ(held.total_ms(), 0.0);
  }
  EXPECT_EQ(timer.passes(), 4);
  for (int p = 0; p < PhaseTimer::kPhases; ++p) {
    EXPECT_GT(timer.ms(p), 0.0) << PhaseTimer::Name(p);
  }
}

#ifdef PAGODA_CUDA_EMULATION
// A GPU other than compute capability 9.0 refuses --prefill-attention wgmma at start.
TEST(CudaBackendGpuTest, WgmmaPrefillIsRefusedOffHopper) {
  CudaBackendOptions o;
  o.prefill_kernel = PrefillKernel::kWgmma;
  ExpectRefusedOn(10, 0, o, std::mt19937_64(23)(), {"wgmma", "10.0", "mma_sync"});
}
#endif

TEST(CudaBackendGpuTest, MicroBatchesMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  auto model = RandomF16Model(512, 8, 2, 2, 3);
  auto cpu = MakeCpu(model, 16, 400);
  auto gpu = MakeCuda(model, 16, 400, DType::kFp16, true, /*max_batch_tokens=*/40);
  ASSERT_NE(gpu, nullptr);
  CompareRagged(*cpu, *gpu, rng, 6, 36, 6, 6e-3);
}

TEST(CudaBackendGpuTest, MmaSyncPrefillMatchesCpu) {
  SKIP_WITHOUT_GPU();
  // auto takes the wgmma kernel on compute capability 9.0 (the emulator's, an H100's): the
  // mma.sync kernel, which every other GPU runs, end to end as well.
  std::mt19937_64 rng(13);
  auto model = RandomF16Model(512, 8, 2, 2, 3);
  auto cpu = MakeCpu(model, 16, 400);
  CudaBackendOptions options = CudaOptions(16, 400, DType::kFp16);
  options.prefill_kernel = PrefillKernel::kMmaSync;
  auto gpu = MakeCuda(model, options);
  ASSERT_NE(gpu, nullptr);
  CompareRagged(*cpu, *gpu, rng, 6, 200, 4, 6e-3);
}

// time_prefill_kernel (the worker's --prefill-attention auto): on a GPU with both tensor-core
// kernels Init times them and keeps one; the pages it timed on read as poison again, and the
// steps after match the CPU.
TEST(CudaBackendGpuTest, TimedPrefillKernelMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(17);
  auto model = RandomF16Model(512, 8, 2, 2, 3);  // head dim 64, groups of 4
  auto cpu = MakeCpu(model, 16, 400);
  CudaBackendOptions options = CudaOptions(16, 400, DType::kFp16);
  options.max_batch_tokens = 48;  // the timed prompt: 48 tokens in pages 0, 1 and 2
  options.time_prefill_kernel = true;
  auto gpu = MakeCuda(model, options);
  ASSERT_NE(gpu, nullptr);
  if (PrefillWgmmaAvailable()) {
    EXPECT_NE(gpu->prefill_kernel(), PrefillKernel::kAuto);
  } else {
    EXPECT_EQ(gpu->prefill_kernel(), PrefillKernel::kAuto);  // one kernel: nothing to time
  }
  ASSERT_OK(gpu->InitSwapSpace(3));
  ASSERT_OK(gpu->SwapOut(std::vector<SwapCopy>{{0, 0}, {1, 1}, {2, 2}}));
  for (int page : {0, 1, 2}) {
    const std::span<const std::byte> kv = gpu->swap_slot(page);
    EXPECT_TRUE(std::all_of(kv.begin(), kv.end(), [](std::byte x) { return x == std::byte{0xff}; }))
        << "page " << page;
  }
  // Whichever kernel won (on the emulator, mma.sync; on a GPU, at 48 tokens, either): both
  // match the CPU in their own tests, this checks the backend after the timing.
  CompareRagged(*cpu, *gpu, rng, 6, 40, 4, 6e-3);
}

// Programmatic launches pass their start-up check (two kernels, eagerly and from a graph) and
// stay on; off by option, every kernel launches plainly. And SiLU·up fused into the gate/up GEMV
// or in its own kernel. Every way a prefill and decode steps replayed from graphs, with our GEMV
// for the products (so the whole layer is our kernels), give the same logits and tokens, bit for
// bit.
TEST(CudaBackendGpuTest, ProgrammaticLaunchAndFusedSiluKeepTheLogits) {
  SKIP_WITHOUT_GPU();
  struct Restore {  // the process-wide switch back to its default, whatever happens
    ~Restore() { SetProgrammaticLaunch(true); }
  } restore;
  auto model = RandomF16Model(256, 4, 2, 2, 5);
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
  struct Variant {
    bool programmatic, fuse_glu;
  };
  for (const Variant v : {Variant{true, true}, Variant{false, true}, Variant{true, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << "programmatic " << v.programmatic << ", fused SiLU " << v.fuse_glu);
    const bool programmatic = v.programmatic;
    CudaBackendOptions options = CudaOptions(16, 64, DType::kFp16);
    options.programmatic_launch = programmatic;
    options.fuse_glu = v.fuse_glu;
    options.dense_gemv_max_tokens = kQuantGemvMaxTokens;
    auto gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(gpu->programmatic_launch(), programmatic);
    EXPECT_EQ(ProgrammaticLaunch(), programmatic);
    std::vector<int32_t> seq = {5, 77, 200, 12, 9};
    const std::vector<int32_t> pages = {3};
    std::vector<float> out;
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{seq, 0, pages, true}}, &out));
    logits.push_back(out);
    tokens.emplace_back();
    for (int step = 0; step < 4; ++step) {
      const int start = static_cast<int>(seq.size()) - 1;
      const SeqInput in{std::span<const int32_t>(seq).subspan(start), start, pages, true};
      const SampleInput greedy{SamplingParams{}, 0};
      std::vector<int32_t> sampled;
      ASSERT_OK(gpu->ForwardSample({&in, 1}, {&greedy, 1}, &sampled));
      ASSERT_EQ(sampled.size(), 1u);
      seq.push_back(sampled[0]);
      tokens.back().push_back(sampled[0]);
    }
    EXPECT_GT(gpu->graph_replays(), 0);
  }
  for (size_t i = 1; i < logits.size(); ++i) {
    EXPECT_EQ(logits[0], logits[i]) << "variant " << i;
    EXPECT_EQ(tokens[0], tokens[i]) << "variant " << i;
  }
}

TEST(CudaBackendGpuTest, LongContextDecodeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  auto model = RandomF16Model(512, 4, 1, 1, 9, /*context=*/4096);
  auto cpu = MakeCpu(model, 16, 600);
  // Room for both prompts in one step: a chunk may be a whole prompt of up to 4,000 tokens.
  auto gpu = MakeCuda(model, 16, 600, DType::kFp16, true, /*max_batch_tokens=*/8192);
  ASSERT_NE(gpu, nullptr);
  // Two sequences prefilled to ~4k in big chunks, then decodes across partition borders.
  CompareRagged(*cpu, *gpu, rng, 2, 4000, 12, 6e-3);
}

struct GoldenCase {
  std::vector<int32_t> prompt, expected;
};

std::vector<GoldenCase> ReadGolden(const std::string& path) {
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    cases.push_back({c["prompt_token_ids"].get<std::vector<int32_t>>(),
                     c["expected_token_ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

// Every golden case at once: one batched prefill, then batched greedy decodes sampled on the
// GPU (decode steps replay CUDA graphs when `graphs`).
std::vector<std::vector<int32_t>> GreedyGolden(CudaBackend& b,
                                               const std::vector<GoldenCase>& cases) {
  const int ps = b.page_size();
  std::vector<std::vector<int32_t>> pages(cases.size()), out(cases.size());
  int next_page = b.num_pages() - 1;
  std::vector<int32_t> last(cases.size());
  size_t max_len = 0;
  for (const auto& c : cases) max_len = std::max(max_len, c.expected.size());
  std::vector<int32_t> tokens;
  for (size_t step = 0; step < max_len; ++step) {
    std::vector<SeqInput> batch;
    std::vector<SampleInput> samples;
    std::vector<size_t> who;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (out[i].size() >= cases[i].expected.size()) continue;
      const size_t pos = step == 0 ? 0 : cases[i].prompt.size() + step - 1;
      const size_t n = step == 0 ? cases[i].prompt.size() : 1;
      while (pages[i].size() * ps < pos + n) pages[i].push_back(next_page--);
      std::span<const int32_t> toks = step == 0 ? std::span<const int32_t>(cases[i].prompt)
                                                : std::span<const int32_t>(&last[i], 1);
      batch.push_back({toks, static_cast<int32_t>(pos), pages[i], true});
      samples.push_back({SamplingParams{}, step});
      who.push_back(i);
    }
    auto st = b.ForwardSample(batch, samples, &tokens);
    EXPECT_OK(st);
    if (!st.ok()) break;
    for (size_t r = 0; r < who.size(); ++r) {
      last[who[r]] = tokens[r];
      out[who[r]].push_back(tokens[r]);
    }
  }
  return out;
}

// A 16-bit forward pass may pick another token than the float32 reference only where the
// reference itself nearly ties. So `got` must equal the golden ids up to its first difference,
// and there the CPU backend's logits of the golden token and of ours must be within kNearTie;
// past it the continuation is another, equally greedy, text and is not compared.
constexpr float kNearTie = 0.02f;

void ExpectGoldenUpToNearTie(CpuBackend& cpu, const GoldenCase& c, const std::vector<int32_t>& got,
                             const std::string& what) {
  size_t k = 0;
  while (k < got.size() && k < c.expected.size() && got[k] == c.expected[k]) ++k;
  if (k == c.expected.size() && got.size() == c.expected.size()) return;
  ASSERT_LT(k, std::min(got.size(), c.expected.size()))
      << what << ": " << got.size() << " tokens for " << c.expected.size() << " golden ones";
  std::vector<int32_t> tokens = c.prompt;
  tokens.insert(tokens.end(), c.expected.begin(), c.expected.begin() + k);
  std::vector<int32_t> pages((tokens.size() + cpu.page_size() - 1) / cpu.page_size());
  std::iota(pages.begin(), pages.end(), 0);
  const SeqInput in{tokens, 0, pages, true};
  std::vector<float> logits;
  ASSERT_OK(cpu.Forward({&in, 1}, &logits));
  const float margin = logits[c.expected[k]] - logits[got[k]];
  EXPECT_LT(margin, kNearTie) << what << ": step " << k << " gave token " << got[k]
                              << " for golden " << c.expected[k]
                              << "; the float32 logits differ by " << margin << ", not a near tie";
  std::printf("%s: near tie at step %zu of %zu (golden %d, got %d, float32 margin %.4f)\n",
              what.c_str(), k, c.expected.size(), c.expected[k], got[k], margin);
}

class TrainedModelGolden : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(TrainedModelGolden, GreedyTokensMatch) {
  SKIP_WITHOUT_GPU();
  const auto [dtype, graphs] = GetParam();
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model_path, "stories260K-f32.gguf");
  auto model = LlamaModel::Load(*model_path);
  ASSERT_OK(model);
  const auto cases = ReadGolden(*golden_path);
  ASSERT_FALSE(cases.empty());
  auto cpu = MakeCpu(*model, 16, 256);
  ASSERT_NE(cpu, nullptr);
  auto gpu = MakeCuda(*model, 16, 256, dtype, graphs);
  ASSERT_NE(gpu, nullptr);
  const auto out = GreedyGolden(*gpu, cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    ExpectGoldenUpToNearTie(
        *cpu, cases[i], out[i],
        absl::StrCat("case ", i, " ", DTypeName(dtype), graphs ? " graphs" : " eager"));
  }
  if (graphs) {
    EXPECT_GT(gpu->graph_replays(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(CudaBackendGpuTest, TrainedModelGolden,
                         ::testing::Combine(::testing::Values(DType::kFp16, DType::kBf16),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<TrainedModelGolden::ParamType>& info) {
                           return DTypeTestName(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_Graphs" : "_Eager");
                         });

// Decode-only batches of every size up to 70: graph replays (padded to their bucket) give the
// tokens eager steps give, greedy and seeded sampling alike.
TEST(CudaBackendGpuTest, GraphReplaysMatchEagerSteps) {
  SKIP_WITHOUT_GPU();
  auto model = RandomF16Model(256, 8, 2, 2, 21);
  auto graph = MakeCuda(model, 16, 4096, DType::kFp16, true);
  auto eager = MakeCuda(model, 16, 4096, DType::kFp16, false);
  std::mt19937_64 rng(3);
  for (int n : {1, 3, 8, 9, 17, 33, 64, 70}) {
    std::vector<std::vector<int32_t>> pages(n), toks(n);
    std::vector<SeqInput> prefill, decode;
    std::vector<SampleInput> samples;
    int next = 0;
    for (int i = 0; i < n; ++i) {
      // Contexts past one decode partition (512) put replays in a two-partition bucket; under
      // the emulator the first sequence of each batch has one, the rest stay short.
      const int len = !kEmulated ? 1 + static_cast<int>(rng() % 700)
                      : i == 0   ? 513 + static_cast<int>(rng() % 188)
                                 : 1 + static_cast<int>(rng() % 100);
      for (int t = 0; t <= len; ++t)
        toks[i].push_back(static_cast<int32_t>(rng() % model->config().vocab_size));
      for (int p = 0; p * 16 < len + 1; ++p) pages[i].push_back(next++);
      prefill.push_back({std::span<const int32_t>(toks[i]).first(len), 0, pages[i], false});
      decode.push_back({std::span<const int32_t>(toks[i]).subspan(len, 1), len, pages[i], true});
      SamplingParams sp;
      if (i % 2 == 1) sp = {0.8f, 40, 0.9f, 1000u + i};
      samples.push_back({sp, static_cast<uint64_t>(i)});
    }
    std::vector<int32_t> none, a, b;
    ASSERT_OK(graph->ForwardSample(prefill, {}, &none));
    ASSERT_OK(eager->ForwardSample(prefill, {}, &none));
    ASSERT_OK(graph->ForwardSample(decode, samples, &a));
    ASSERT_OK(eager->ForwardSample(decode, samples, &b));
    EXPECT_EQ(a, b) << "batch " << n;
    ASSERT_EQ(a.size(), static_cast<size_t>(n));
  }
  EXPECT_GT(graph->graphs_captured(), 0);
  EXPECT_EQ(eager->graphs_captured(), 0);
}

TEST(CudaBackendGpuTest, SeededSamplingRepeats) {
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 8, 2, 2, 4));
  auto gpu = MakeCuda(model, 16, 64, DType::kBf16);
  const std::vector<int32_t> prompt = {5, 9, 77, 200, 3};
  const std::vector<int32_t> pages = {10, 11};
  std::set<int32_t> seen;
  for (uint64_t seed : {1u, 2u, 3u, 1u}) {
    std::vector<int32_t> first, again;
    SeqInput in{prompt, 0, pages, true};
    const SampleInput s{{1.5f, 0, 1.0f, seed}, 0};
    ASSERT_OK(gpu->ForwardSample({&in, 1}, {&s, 1}, &first));
    ASSERT_OK(gpu->ForwardSample({&in, 1}, {&s, 1}, &again));
    EXPECT_EQ(first, again) << "seed " << seed;
    seen.insert(first[0]);
  }
  EXPECT_GE(seen.size(), 2u) << "different seeds should draw different tokens at temperature 1.5";
}

// Rows with logit_bias/penalty adjustments and logprobs, batched with a plain row: the adjusted
// greedy token and the logprobs equal the CPU sampler's on this backend's own logits (Forward),
// adjusted on the host: same token, same top ids, logprobs within 1e-4.
TEST(CudaBackendGpuTest, AdjustmentsAndLogprobsMatchTheCpuSampler) {
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 8, 2, 2, 4));
  auto gpu = MakeCuda(model, 16, 64, DType::kBf16);
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 77, 200, 3}, {1, 2, 3}, {40, 41}};
  std::vector<std::vector<int32_t>> pages = {{10}, {11}, {12}};
  std::vector<SeqInput> batch;
  for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({prompts[i], 0, pages[i], true});
  std::vector<float> logits;
  ASSERT_OK(gpu->Forward(batch, &logits));
  const int vocab = gpu->config().vocab_size;
  std::vector<std::vector<LogitAdjustment>> adjust(3);
  adjust[0] = {{.token = 7, .bias = 50.0f}, {.token = 9, .repetition = 1.5f, .subtract = 0.5f}};
  adjust[2] = {{.token = 41, .repetition = 2.0f}, {.token = 100, .bias = -3.0f, .subtract = 1}};
  std::vector<SampleInput> samples(3);
  samples[0].params.top_logprobs = 20;      // greedy, forced to 7 by its bias
  samples[1].params = {0.8f, 40, 0.9f, 5};  // no extras, no logprobs
  samples[2].params = {1.3f, 0, 1.0f, 6};
  samples[2].params.top_logprobs = 3;
  for (size_t i = 0; i < 3; ++i) samples[i].adjustments = adjust[i];
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> logprobs;
  ASSERT_OK(gpu->ForwardSample(batch, samples, &tokens, &logprobs));
  ASSERT_EQ(tokens.size(), 3u);
  ASSERT_EQ(logprobs.size(), 3u);
  EXPECT_EQ(tokens[0], 7);
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("row ", r));
    std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    ApplyAdjustments(row, adjust[r]);
    if (r == 0) {
      EXPECT_EQ(tokens[r], Sample(row, samples[r].params, 0));
    }
    SampledLogprobs want;
    ComputeLogprobs(row, samples[r].params.temperature, tokens[r], samples[r].params.top_logprobs,
                    &want);
    EXPECT_NEAR(logprobs[r].logprob, want.logprob, 1e-4);
    ASSERT_EQ(logprobs[r].num_top, want.num_top);
    for (int k = 0; k < want.num_top; ++k) {
      EXPECT_EQ(logprobs[r].top_ids[k], want.top_ids[k]) << "rank " << k;
      EXPECT_NEAR(logprobs[r].top_logprobs[k], want.top_logprobs[k], 1e-4) << "rank " << k;
    }
  }
}

TEST(CudaBackendGpuTest, ArenaIsSizedFromMemoryFraction) {
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 8, 2, 2, 4));
  CudaBackendOptions o;
  o.gpu_memory_fraction = 0.3;
  auto b = CudaBackend::Create(model, o);
  ASSERT_OK(b);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_GT((*b)->num_pages(), 1000);
  EXPECT_LE((*b)->kv_bytes(), static_cast<size_t>(0.3 * total));
  EXPECT_GT((*b)->kv_bytes(), static_cast<size_t>(0.2 * total));
  // What the worker reports as pagoda_worker_device_memory_used_bytes: weights, workspace, KV.
  EXPECT_GT((*b)->device_bytes(), (*b)->kv_bytes() + (*b)->weight_bytes());
  EXPECT_LE((*b)->device_bytes(), total - free_bytes);
  b->reset();
  o.num_pages = 1 << 24;  // far past the device
  o.gpu_memory_fraction = 0.9;
  auto too_many = CudaBackend::Create(model, o);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted) << too_many.status();
}

// qwen2's Q/K/V biases, qwen3's per-head Q/K RMSNorm and Llama 3.1's scaled RoPE frequencies
// (worker/model/architecture.h) give the CPU backend's logits, prefill and decode alike, from F16
// and from quantized files (the Q/K rows permuted in their stored type, dequantized at upload or
// kept in their blocks).
TEST(CudaBackendGpuTest, ArchitecturesMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(13);
  struct Case {
    std::string arch;
    float scaling;
    common::GgmlType dtype;
  };
  for (const Case& k :
       {Case{"qwen2", 0.0f, common::GgmlType::F16}, Case{"qwen3", 0.0f, common::GgmlType::F16},
        Case{"llama", 8.0f, common::GgmlType::F16}, Case{"qwen3", 8.0f, common::GgmlType::Q4_K}}) {
    modelgen::RandomModelOptions o = testing::SmallRandomOptions(256, 4, 2, 2, rng());
    o.architecture = k.arch;
    o.rope_scaling_factor = k.scaling;
    o.dtype = k.dtype;
    if (k.dtype == common::GgmlType::Q4_K) {
      o.k_m_mix = true;
      o.ffn_dim = 512;  // K-quant blocks are 256 wide
    }
    auto model = testing::RandomModel(o);
    ASSERT_NE(model, nullptr);
    auto cpu = MakeCpu(model, 16, 64);
    auto gpu = MakeCuda(model, 16, 64, DType::kFp16);
    ASSERT_NE(gpu, nullptr);
    SCOPED_TRACE(k.arch + (k.scaling > 0 ? " with scaled RoPE " : " ") +
                 common::GgmlTypeName(k.dtype));
    CompareRagged(*cpu, *gpu, rng, 3, 90, 4, 6e-3);
    if (k.dtype == common::GgmlType::Q4_K) {  // the permuted Q/K rows kept in their blocks too
      CudaBackendOptions o;
      o.page_size = 16;
      o.num_pages = 64;
      o.dtype = DType::kFp16;
      o.keep_quantized = true;
      auto kept = CudaBackend::Create(model, o);
      ASSERT_OK(kept);
      CompareRagged(*cpu, **kept, rng, 3, 90, 4, 6e-3);
    }
  }
}

// Copy on write (n > 1): a fork that shares the prompt's whole pages and gets a copy of the
// partial last page, then recomputes the last prompt token, sees exactly the prompt's KV: its
// logits equal the prefill's last row, and the CPU backend's after the same copy.
TEST(CudaBackendGpuTest, PageCopiesGiveAForkThePromptKv) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(17);
  modelgen::RandomModelOptions o = testing::SmallRandomOptions(256, 8, 2, 2, 5);
  o.dtype = common::GgmlType::F16;
  auto model = testing::RandomModel(o);
  ASSERT_NE(model, nullptr);
  constexpr int kPage = 8, kPrompt = 20;
  auto cpu = MakeCpu(model, kPage, 16);
  auto gpu = MakeCuda(model, kPage, 16, DType::kFp16);
  ASSERT_NE(gpu, nullptr);
  std::vector<int32_t> prompt(kPrompt);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % model->config().vocab_size);
  const std::vector<int32_t> pages = {3, 9, 4};        // positions [0, 24)
  const std::vector<int32_t> fork_pages = {3, 9, 12};  // page 4 copied to 12
  const std::vector<PageCopy> copies = {{4, 12}};
  std::vector<float> cpu_fork, gpu_full, gpu_fork;
  for (Backend* b : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(gpu.get())}) {
    std::vector<float> full, fork;
    ASSERT_OK(b->Forward(std::vector<SeqInput>{{prompt, 0, pages, true}}, &full));
    ASSERT_OK(b->CopyPages(copies));
    const std::vector<int32_t> last = {prompt.back()};
    ASSERT_OK(b->Forward(std::vector<SeqInput>{{last, kPrompt - 1, fork_pages, true}}, &fork));
    EXPECT_LT(RelError(fork, full), 1e-2) << b->name() << ": the fork reads the copied KV";
    if (b == cpu.get()) cpu_fork = fork;
    if (b == gpu.get()) gpu_full = full, gpu_fork = fork;
  }
  EXPECT_LT(RelError(gpu_fork, cpu_fork), 6e-3);
  // Without the copy the fork reads another page: different logits.
  std::vector<float> wrong;
  const std::vector<int32_t> uncopied = {3, 9, 13};
  const std::vector<int32_t> last = {prompt.back()};
  ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{last, kPrompt - 1, uncopied, true}}, &wrong));
  EXPECT_GT(RelError(wrong, gpu_full), 1e-2);
}

// Swap preemption: a prompt's pages go out to pinned host slots, another prompt overwrites them,
// and they come back into other pages: a decode step over those gives bitwise the logits of the
// same step unswapped, and a page swapped in and out again gives its slot's bytes back. Both
// copy paths run: one 2D copy per page, and one copy per layer's K or V where the arena's layers
// lie further apart than a 2D copy may stride (under the emulator, whose limit is 1 MiB, the
// arena of 1,100 pages; on a GPU, 2 GiB, neither).
TEST(CudaBackendGpuTest, SwapRoundTripRestoresTheKv) {
  SKIP_WITHOUT_GPU();
  modelgen::RandomModelOptions o = testing::SmallRandomOptions(256, 8, 2, 2, 23);
  o.dtype = common::GgmlType::F16;
  auto model = testing::RandomModel(o);
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> prompt(20), other(24);
  std::iota(prompt.begin(), prompt.end(), 40);
  std::iota(other.begin(), other.end(), 100);
  const std::vector<int32_t> pages = {3, 9, 4}, moved = {10, 1, 14}, next = {77};
  for (int num_pages : {16, 1100}) {
    SCOPED_TRACE(absl::StrCat(num_pages, " pages"));
    auto gpu = MakeCuda(model, 8, num_pages, DType::kFp16);  // pages of 1 KiB per layer's K
    ASSERT_NE(gpu, nullptr);
    const std::vector<SwapCopy> one = {{.page = 0, .slot = 0}};
    EXPECT_EQ(gpu->SwapOut(one).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_OK(gpu->InitSwapSpace(4));
    EXPECT_EQ(gpu->num_swap_pages(), 4);
    EXPECT_EQ(gpu->InitSwapSpace(4).code(), absl::StatusCode::kFailedPrecondition);
    std::vector<float> logits, want, got;
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{prompt, 0, pages, false}}, &logits));
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{next, 20, pages, true}}, &want));
    ASSERT_OK(gpu->SwapOut(std::vector<SwapCopy>{{3, 2}, {9, 0}, {4, 3}}));
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{other, 0, pages, false}}, &logits));
    ASSERT_OK(gpu->SwapIn(std::vector<SwapCopy>{{10, 2}, {1, 0}, {14, 3}}));
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{next, 20, moved, true}}, &got));
    EXPECT_EQ(got, want);
    ASSERT_OK(gpu->Forward(std::vector<SeqInput>{{next, 20, pages, true}}, &logits));
    EXPECT_GT(RelError(logits, want), 1e-3) << "the overwritten pages give other logits";
    // Page 1 back out to slot 1: the bytes of slot 0, which held page 9, real KV (not poison).
    ASSERT_OK(gpu->SwapOut(std::vector<SwapCopy>{{1, 1}}));
    const std::span<const std::byte> a = gpu->swap_slot(0), b = gpu->swap_slot(1);
    ASSERT_EQ(a.size(), gpu->kv_layout().bytes_per_pool_page());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    EXPECT_TRUE(std::any_of(a.begin(), a.end(), [](std::byte x) { return x != std::byte{0xff}; }));
  }
}

TEST(CudaBackendGpuTest, BadBatchesAreRejected) {
  SKIP_WITHOUT_GPU();
  auto model = testing::RandomModel(testing::SmallRandomOptions(256, 8, 2, 2, 4));
  auto gpu = MakeCuda(model, 16, 8, DType::kBf16);
  const std::vector<int32_t> tok = {1}, bad_page = {99};
  std::vector<float> logits;
  SeqInput in{tok, 0, bad_page, true};
  EXPECT_EQ(gpu->Forward({&in, 1}, &logits).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> page = {0}, bad_tok = {100000};
  SeqInput in2{bad_tok, 0, page, true};
  EXPECT_EQ(gpu->Forward({&in2, 1}, &logits).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker::cuda
