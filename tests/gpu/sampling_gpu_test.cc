// CUDA sampler (worker/backend/cuda/sampling) against the CPU sampler (worker/sampling) on fresh
// random logits; outputs are poisoned (-1) before every launch and every row must be written.
//  * greedy rows equal the CPU Sample() exactly (ties, NaN, +-inf included);
//  * the device CounterUniform equals the CPU one bit for bit;
//  * sampled rows are deterministic, vary with the seed, always land in the kept set the CPU
//    definition gives (threshold ties allowed, min_p included), and follow the kept
//    distribution;
//  * logit adjustments (bias, penalties) equal the CPU's bit for bit, and logprobs (the
//    sampled token's and the top 20) equal the CPU's ComputeLogprobs within 1e-4, same ids.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/status_assertions.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/sampling/counter_uniform.cuh"
#include "worker/backend/cuda/sampling/logprobs.h"
#include "worker/backend/cuda/sampling/sampling.h"
#include "worker/sampling/sampler.h"

namespace pagoda::worker::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

#define SKIP_WITHOUT_GPU() \
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run"

// Built as sampling_emulated_test, the kernel runs on the host emulator
// (worker/backend/cuda/emulation), where a row costs milliseconds: the frequency checks, which
// need 8k-16k draws per case, run on a GPU only. Every other check runs in both builds.
#ifdef PAGODA_CUDA_EMULATION
#define SKIP_UNDER_EMULATION(what) \
  GTEST_SKIP() << what << ": too many draws for the host emulator; run on a GPU"
#else
#define SKIP_UNDER_EMULATION(what) (void)0
#endif

// Owns one device allocation.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

template <typename T>
void Upload(const std::vector<T>& host, DeviceArray<T>& dev) {
  ASSERT_EQ(cudaMalloc(&dev.ptr, host.size() * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}

// Runs LaunchSample on copies of `logits` ([rows][vocab]) and `params` ([rows]); `tokens` gets
// one token per row, each checked to be a valid id (the output starts poisoned at -1).
void RunSample(const std::vector<float>& logits, const std::vector<SampleRowParams>& params,
               int vocab, std::vector<int32_t>* tokens) {
  const int rows = static_cast<int>(params.size());
  ASSERT_EQ(logits.size(), static_cast<size_t>(rows) * vocab);
  DeviceArray<float> d_logits;
  DeviceArray<SampleRowParams> d_params;
  DeviceArray<int32_t> d_out;
  DeviceArray<uint8_t> d_workspace;
  ASSERT_NO_FATAL_FAILURE(Upload(logits, d_logits));
  ASSERT_NO_FATAL_FAILURE(Upload(params, d_params));
  ASSERT_EQ(cudaMalloc(&d_out.ptr, rows * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out.ptr, 0xff, rows * sizeof(int32_t)), cudaSuccess);  // -1 poison
  const size_t workspace_bytes = SampleWorkspaceBytes(rows, vocab);
  if (workspace_bytes > 0) {
    ASSERT_EQ(cudaMalloc(&d_workspace.ptr, workspace_bytes), cudaSuccess);
  }
  SampleParams p{};  // value-initialized: the pointers have no defaults
  p.logits = d_logits.ptr;
  p.params = d_params.ptr;
  p.out_tokens = d_out.ptr;
  p.rows = rows;
  p.vocab = vocab;
  p.workspace = d_workspace.ptr;
  ASSERT_OK(LaunchSample(p, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  tokens->assign(rows, -1);
  ASSERT_EQ(cudaMemcpy(tokens->data(), d_out.ptr, rows * sizeof(int32_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int r = 0; r < rows; ++r) {
    ASSERT_GE((*tokens)[r], 0) << "row " << r << " not written";
    ASSERT_LT((*tokens)[r], vocab) << "row " << r;
  }
}

std::span<const float> Row(const std::vector<float>& logits, int vocab, int r) {
  return std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab);
}

int32_t CpuSample(std::span<const float> row, const SampleRowParams& p) {
  return Sample(row, {p.temperature, p.top_k, p.top_p, p.seed}, p.index);
}

std::vector<float> NormalLogits(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// p_i as the CPU sampler computes it (float), NaN logits -> 0.
std::vector<float> HostProbs(std::span<const float> logits, float temperature) {
  float max_logit = -kInf;
  for (float l : logits) {
    if (l > max_logit) max_logit = l;
  }
  std::vector<float> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::isnan(logits[i]) ? 0.0f : std::exp((logits[i] - max_logit) / temperature);
  }
  return p;
}

// The smallest probability the GPU may keep: it keeps every token with p >= its top-k/top-p
// threshold (ties at the threshold included). Slack absorbs expf-vs-std::exp ulps and the
// kernel's fixed-point masses: the nucleus is taken at top_p + 1e-4, the floor lowered 1e-5.
double KeptFloor(std::vector<float> p, int top_k, float top_p) {
  std::sort(p.begin(), p.end(), std::greater<>());
  size_t keep = p.size();
  double floor = 0;
  if (top_k > 0 && static_cast<size_t>(top_k) < p.size()) {
    floor = p[top_k - 1];
    keep =
        static_cast<size_t>(std::count_if(p.begin(), p.end(), [&](float x) { return x >= floor; }));
  }
  if (top_p > 0 && top_p < 1) {
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[i];
    const double need = std::min(1.0, top_p + 1e-4) * total;
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < need) mass += p[n++];
    floor = std::max(floor, static_cast<double>(p[std::max<size_t>(n, 1) - 1]));
  }
  return floor * (1 - 1e-5);
}

// The exact kept distribution (probability per id, zero outside the kept set) for rows without
// near-ties at the thresholds; empty when a boundary is too close to call.
std::vector<double> KeptDistribution(const std::vector<float>& p, int top_k, float top_p) {
  const size_t n = p.size();
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  constexpr double kMargin = 1e-3;
  size_t keep = n;
  if (top_k > 0 && static_cast<size_t>(top_k) < n) {
    keep = static_cast<size_t>(top_k);
    if (!(p[order[keep]] < p[order[keep - 1]] * (1 - kMargin))) return {};
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[order[i]];
  if (top_p > 0 && top_p < 1) {
    const double need = top_p * total;
    double mass = 0;
    size_t m = 0;
    while (m < keep && mass < need) mass += p[order[m++]];
    if (!(mass - p[order[m - 1]] < need * (1 - kMargin) && mass > need * (1 + kMargin))) return {};
    if (m < keep && !(p[order[m]] < p[order[m - 1]] * (1 - kMargin))) return {};
    keep = m;
    total = mass;
  }
  std::vector<double> dist(n, 0.0);
  for (size_t i = 0; i < keep; ++i) dist[order[i]] = p[order[i]] / total;
  return dist;
}

// Samples `rows` copies of one row with seeds 1000.. and checks the token frequencies against
// `expected` (probability per id): no token outside its support, every frequency within
// 5 sigma (+3 counts) of its probability, and total variation distance < 0.05.
void CheckDistribution(const std::vector<float>& row, SampleRowParams params, int rows,
                       const std::vector<double>& expected, const char* what) {
  const int vocab = static_cast<int>(row.size());
  ASSERT_EQ(expected.size(), row.size()) << what;
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(rows) * vocab);
  std::vector<SampleRowParams> ps(rows, params);
  for (int r = 0; r < rows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
    ps[r].seed = 1000 + static_cast<uint64_t>(r);
  }
  std::vector<int32_t> tokens;
  ASSERT_NO_FATAL_FAILURE(RunSample(logits, ps, vocab, &tokens));
  std::vector<double> freq(vocab, 0.0);
  for (int32_t t : tokens) freq[t] += 1.0 / rows;
  double distance = 0;
  for (int i = 0; i < vocab; ++i) {
    distance += 0.5 * std::abs(freq[i] - expected[i]);
    if (expected[i] == 0) {
      EXPECT_EQ(freq[i], 0) << what << ": token " << i << " is outside the kept set";
    } else {
      const double sigma = std::sqrt(expected[i] * (1 - expected[i]) / rows);
      EXPECT_NEAR(freq[i], expected[i], 5 * sigma + 3.0 / rows) << what << ": token " << i;
    }
  }
  EXPECT_LT(distance, 0.05) << what;
}

TEST(SamplingGpuTest, RejectsBadShapes) {
  SampleParams p{};  // value-initialized: the pointers have no defaults
  p.rows = 0;
  p.vocab = 10;
  ASSERT_OK(LaunchSample(p, nullptr));  // nothing to do, no pointers needed
  p.rows = 1;
  p.vocab = 0;
  EXPECT_EQ(LaunchSample(p, nullptr).message(), "LaunchSample: vocab 0 must be in [1, 8388608]");
  p.vocab = 10;  // null pointers
  EXPECT_EQ(LaunchSample(p, nullptr).message(), "LaunchSample: logits is null");
  EXPECT_EQ(SampleWorkspaceBytes(512, 128256), 0u);
}

TEST(SamplingGpuTest, HostTwinOfCounterUniformMatchesCpu) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t seed = i < 8 ? static_cast<uint64_t>(i) - 4 : rng();
    const uint64_t index = i % 3 == 0 ? static_cast<uint64_t>(i) : rng();
    ASSERT_EQ(std::bit_cast<uint64_t>(cuda::CounterUniform(seed, index)),
              std::bit_cast<uint64_t>(worker::CounterUniform(seed, index)))
        << seed << " " << index;
  }
}

TEST(SamplingGpuTest, DeviceCounterUniformMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  const int n = 1 << 16;
  std::vector<uint64_t> seeds(n), indices(n);
  for (int i = 0; i < n; ++i) {
    seeds[i] = i < 64 ? static_cast<uint64_t>(i) - 32 : rng();
    indices[i] = i % 4 == 0 ? static_cast<uint64_t>(i / 4) : rng();
  }
  DeviceArray<uint64_t> d_seeds, d_indices;
  DeviceArray<double> d_out;
  ASSERT_NO_FATAL_FAILURE(Upload(seeds, d_seeds));
  ASSERT_NO_FATAL_FAILURE(Upload(indices, d_indices));
  ASSERT_EQ(cudaMalloc(&d_out.ptr, n * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out.ptr, 0xff, n * sizeof(double)), cudaSuccess);
  ASSERT_EQ(LaunchCounterUniformForTesting(d_seeds.ptr, d_indices.ptr, d_out.ptr, n, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), d_out.ptr, n * sizeof(double), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint64_t>(got[i]),
              std::bit_cast<uint64_t>(worker::CounterUniform(seeds[i], indices[i])))
        << "pair " << i << ": seed " << seeds[i] << " index " << indices[i];
  }
}

// Greedy rows: temperature <= 0 (or NaN) or top_k == 1. Logits carry duplicated maxima, NaN
// (never at id 0: there the CPU's `>` scan keeps id 0, see the next test) and +-inf.
TEST(SamplingGpuTest, GreedyMatchesCpuExactly) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  for (int vocab : {1, 8, 512, 32000, 128256}) {
    for (int rows : {1, 7, 64}) {
      std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 3.0f);
      std::vector<SampleRowParams> params(rows);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        std::uniform_int_distribution<int> any(0, vocab - 1),
            nonzero(std::min(1, vocab - 1), vocab - 1);
        switch (r % 6) {
          case 0:  // few distinct values: many ties at the max
            for (int i = 0; i < vocab; ++i) row[i] = std::round(row[i] / 3.0f);
            break;
          case 1: {  // the max duplicated below and above its id
            const int at = static_cast<int>(std::max_element(row, row + vocab) - row);
            for (int j = 0; j < 3; ++j) row[any(rng)] = row[at];
            break;
          }
          case 2:  // NaN sprinkled (a NaN-only row but for id 0 when vocab is small)
            for (int j = 0; j < std::max(1, vocab / 16); ++j) row[nonzero(rng)] = kNaN;
            break;
          case 3:  // -inf everywhere but one, plus NaN
            for (int i = 1; i < vocab; ++i) row[i] = i % 5 == 0 ? kNaN : -kInf;
            if (vocab > 2) row[vocab / 2] = -3.0f;
            break;
          case 4:  // +inf twice
            row[any(rng)] = kInf;
            row[any(rng)] = kInf;
            break;
          default:
            break;
        }
        const float temps[] = {0.0f, -1.0f, kNaN, 0.7f};
        params[r].temperature = temps[r % 4];
        params[r].top_k = r % 4 == 3 ? 1 : static_cast<int>(r % 3) * 10;
        params[r].top_p = r % 2 ? 0.5f : 1.0f;
        params[r].seed = static_cast<uint64_t>(r) * 31;
        params[r].index = static_cast<uint64_t>(r);
      }
      std::vector<int32_t> tokens;
      ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &tokens));
      for (int r = 0; r < rows; ++r) {
        EXPECT_EQ(tokens[r], CpuSample(Row(logits, vocab, r), params[r]))
            << "vocab " << vocab << " row " << r;
      }
    }
  }
}

// The contract: NaN counts as -infinity wherever it is, id 0 included. (The CPU Argmax's `>`
// scan returns 0 whenever logits[0] is NaN, so this case is checked against the contract.)
TEST(SamplingGpuTest, GreedyTreatsNanAsNegativeInfinity) {
  SKIP_WITHOUT_GPU();
  const int vocab = 300;
  std::mt19937 rng(2);
  std::vector<float> logits = NormalLogits(rng, 3 * vocab, 1.0f);
  logits[0] = kNaN;  // row 0: NaN at id 0, max elsewhere
  logits[17] = 9.0f;
  for (int i = vocab; i < 2 * vocab; ++i) logits[i] = kNaN;  // row 1: all NaN -> id 0
  logits[2 * vocab] = kNaN;                                  // row 2: NaN at 0, sampled row
  logits[2 * vocab + 5] = kInf;
  std::vector<SampleRowParams> params(3);
  params[2].temperature = 1.0f;
  std::vector<int32_t> tokens;
  ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &tokens));
  EXPECT_EQ(tokens[0], 17);
  EXPECT_EQ(tokens[1], 0);
  EXPECT_EQ(tokens[2], 5);  // non-finite max: argmax, as in the CPU sampler
}

SampleRowParams RandomSampledParams(std::mt19937& rng, int vocab) {
  const float temps[] = {0.3f, 0.7f, 1.0f, 1.5f, 3.0f};
  const int ks[] = {0, 0, 2, 5, 50, 1000, 8192, 8193, 20000, vocab, vocab + 5};
  const float ps[] = {1.0f, 1.0f, 0.5f, 0.9f, 0.95f, 0.99f, 0.1f, 0.0f};
  SampleRowParams p;
  p.temperature = temps[rng() % 5];
  p.top_k = ks[rng() % 11];
  p.top_p = ps[rng() % 8];
  p.seed = rng();
  p.index = rng() % 4096;
  return p;
}

TEST(SamplingGpuTest, SamplingIsDeterministicAndVariesWithSeed) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  for (int vocab : {512, 32000, 128256}) {
    const int rows = 48;
    const std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 3.0f);
    std::vector<SampleRowParams> params(rows);
    for (auto& p : params) p = RandomSampledParams(rng, vocab);
    std::vector<int32_t> first, second;
    ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &first));
    ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &second));
    EXPECT_EQ(first, second) << "vocab " << vocab;
    // One row, 64 seeds, a wide distribution (no cut): the draws must spread.
    const std::vector<float> row(logits.begin(), logits.begin() + vocab);
    std::vector<float> copies;
    std::vector<SampleRowParams> seeds(64);
    for (int r = 0; r < 64; ++r) {
      copies.insert(copies.end(), row.begin(), row.end());
      seeds[r].temperature = 1.0f;
      seeds[r].seed = static_cast<uint64_t>(r);
    }
    std::vector<int32_t> drawn;
    ASSERT_NO_FATAL_FAILURE(RunSample(copies, seeds, vocab, &drawn));
    EXPECT_GE(std::set<int32_t>(drawn.begin(), drawn.end()).size(), 8u) << "vocab " << vocab;
  }
}

TEST(SamplingGpuTest, SampledTokenIsInTheKeptSet) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  for (int vocab : {8, 512, 32000, 128256}) {
    const int rows = vocab > 100000 ? 40 : 64;
    std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 3.0f);
    for (int r = 1; r < rows; r += 3) {  // NaN (counts as -inf) and -inf in every third row
      std::uniform_int_distribution<int> any(0, vocab - 1);
      for (int j = 0; j < std::max(1, vocab / 8); ++j) {
        logits[static_cast<size_t>(r) * vocab + any(rng)] = j % 2 ? kNaN : -kInf;
      }
    }
    std::vector<SampleRowParams> params(rows);
    for (auto& p : params) p = RandomSampledParams(rng, vocab);
    std::vector<int32_t> tokens;
    ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &tokens));
    for (int r = 0; r < rows; ++r) {
      const SampleRowParams& p = params[r];
      const std::vector<float> probs = HostProbs(Row(logits, vocab, r), p.temperature);
      const double floor = KeptFloor(probs, p.top_k, p.top_p);
      EXPECT_GT(probs[tokens[r]], 0.0f) << "vocab " << vocab << " row " << r;
      EXPECT_GE(probs[tokens[r]], floor)
          << "vocab " << vocab << " row " << r << " T " << p.temperature << " top_k " << p.top_k
          << " top_p " << p.top_p << ": token " << tokens[r] << " is outside the kept set";
    }
  }
}

// One row's logits replicated over many rows with different seeds: the draws follow the kept,
// renormalized distribution (the brief's case, then top-k alone, then a wide nucleus alone).
TEST(SamplingGpuTest, FollowsTheKeptDistribution) {
  SKIP_WITHOUT_GPU();
  SKIP_UNDER_EMULATION("3 x 16,384 draws");
  std::mt19937 rng(5);
  const int vocab = 1000;
  const SampleRowParams cases[] = {
      {0.8f, 50, 0.9f, 0, 3}, {1.0f, 5, 1.0f, 0, 4}, {1.5f, 0, 0.6f, 0, 5}};
  for (const SampleRowParams& params : cases) {
    std::vector<float> row;
    std::vector<double> expected;
    while (expected.empty()) {  // redraw until no threshold is a near-tie
      row = NormalLogits(rng, vocab, 3.0f);
      expected = KeptDistribution(HostProbs(row, params.temperature), params.top_k, params.top_p);
    }
    const std::string what = "T " + std::to_string(params.temperature) + " top_k " +
                             std::to_string(params.top_k) + " top_p " +
                             std::to_string(params.top_p) + " (" +
                             std::to_string(std::count_if(expected.begin(), expected.end(),
                                                          [](double e) { return e > 0; })) +
                             " kept)";
    ASSERT_NO_FATAL_FAILURE(CheckDistribution(row, params, 16384, expected, what.c_str()));
  }
}

TEST(SamplingGpuTest, EdgeParametersDistributions) {
  SKIP_WITHOUT_GPU();
  SKIP_UNDER_EMULATION("3 x 8,192 draws");
  std::mt19937 rng(6);
  const int rows = 8192;
  {  // top_k above the vocabulary and top_p = 1: plain softmax.
    const std::vector<float> row = NormalLogits(rng, 8, 1.0f);
    SampleRowParams p;
    p.temperature = 1.0f;
    p.top_k = 100;
    p.top_p = 1.0f;
    ASSERT_NO_FATAL_FAILURE(CheckDistribution(
        row, p, rows, KeptDistribution(HostProbs(row, 1.0f), 0, 1.0f), "top_k > vocab"));
  }
  for (float temperature : {1e6f, 1e30f}) {  // huge temperature: uniform
    const std::vector<float> row = NormalLogits(rng, 16, 3.0f);
    SampleRowParams p;
    p.temperature = temperature;
    ASSERT_NO_FATAL_FAILURE(
        CheckDistribution(row, p, rows, std::vector<double>(16, 1.0 / 16), "huge temperature"));
  }
}

TEST(SamplingGpuTest, EdgeParameters) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  {  // tiny top_p or temperature keep only the argmax; same answer as the CPU.
    const int vocab = 32000;
    std::vector<float> logits = NormalLogits(rng, 4 * static_cast<size_t>(vocab), 3.0f);
    std::vector<SampleRowParams> params(4);
    params[0] = {1.0f, 0, 1e-7f, 1, 0};
    params[1] = {2.0f, 50, std::numeric_limits<float>::denorm_min(), 2, 0};
    params[2] = {1e-6f, 0, 1.0f, 3, 0};
    params[3] = {1.0f, 2, 1e-7f, 4, 0};
    std::vector<int32_t> tokens;
    ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &tokens));
    for (int r = 0; r < 4; ++r) {
      const std::span<const float> row = Row(logits, vocab, r);
      const int32_t argmax =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_EQ(tokens[r], argmax) << "row " << r;
      EXPECT_EQ(tokens[r], CpuSample(row, params[r])) << "row " << r;
    }
  }
  {  // vocab 1, an all -inf sampled row, and a sampled row with +inf: as the CPU.
    std::vector<float> one = {0.5f};
    std::vector<int32_t> tokens;
    ASSERT_NO_FATAL_FAILURE(RunSample(one, {{1.0f, 0, 0.9f, 9, 9}}, 1, &tokens));
    EXPECT_EQ(tokens[0], 0);
    std::vector<float> logits(2 * 64, -kInf);
    logits[64 + 40] = kInf;
    logits[64 + 41] = kInf;
    const std::vector<SampleRowParams> params(2, {1.0f, 10, 0.9f, 9, 9});
    ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, 64, &tokens));
    EXPECT_EQ(tokens[0], CpuSample(Row(logits, 64, 0), params[0]));
    EXPECT_EQ(tokens[1], 40);
    EXPECT_EQ(tokens[1], CpuSample(Row(logits, 64, 1), params[1]));
  }
}

// What the worker's CUDA path runs per step: adjust, logprobs, sample (logprobs.h).
struct PipelineOut {
  std::vector<int32_t> tokens;
  std::vector<float> adjusted;  // the logits after LaunchAdjustLogits
  std::vector<SampledLogprobs> logprobs;
};

void RunPipeline(const std::vector<float>& logits, const std::vector<SampleRowParams>& params,
                 const std::vector<AdjustLogitsEntry>& adjust, int vocab, PipelineOut* out) {
  const int rows = static_cast<int>(params.size());
  DeviceArray<float> d_logits, d_logp, d_norm, d_top;
  DeviceArray<SampleRowParams> d_params;
  DeviceArray<AdjustLogitsEntry> d_adjust;
  DeviceArray<int32_t> d_out, d_ids;
  ASSERT_NO_FATAL_FAILURE(Upload(logits, d_logits));
  ASSERT_NO_FATAL_FAILURE(Upload(params, d_params));
  if (!adjust.empty()) {
    ASSERT_NO_FATAL_FAILURE(Upload(adjust, d_adjust));
  }
  ASSERT_EQ(cudaMalloc(&d_out.ptr, rows * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_logp.ptr, rows * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_norm.ptr, rows * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ids.ptr, rows * kMaxLogprobsTop * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_top.ptr, rows * kMaxLogprobsTop * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_ids.ptr, 0xff, rows * kMaxLogprobsTop * sizeof(int32_t)), cudaSuccess);
  ASSERT_OK(LaunchAdjustLogits({d_logits.ptr, d_adjust.ptr, static_cast<int>(adjust.size()), vocab},
                               nullptr));
  out->adjusted.resize(logits.size());
  ASSERT_EQ(
      cudaMemcpy(out->adjusted.data(), d_logits.ptr, logits.size() * 4, cudaMemcpyDeviceToHost),
      cudaSuccess);
  LogprobsParams lp{};
  lp.logits = d_logits.ptr;
  lp.params = d_params.ptr;
  lp.log_norm = d_norm.ptr;
  lp.top_ids = d_ids.ptr;
  lp.top_logprobs = d_top.ptr;
  lp.rows = rows;
  lp.vocab = vocab;
  ASSERT_OK(LaunchLogprobs(lp, nullptr));
  SampleParams sp{};
  sp.logits = d_logits.ptr;
  sp.params = d_params.ptr;
  sp.out_tokens = d_out.ptr;
  sp.out_logprob_unnormalized = d_logp.ptr;
  sp.rows = rows;
  sp.vocab = vocab;
  ASSERT_OK(LaunchSample(sp, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> logp(rows), norm(rows), top(rows * kMaxLogprobsTop);
  std::vector<int32_t> ids(rows * kMaxLogprobsTop);
  out->tokens.resize(rows);
  ASSERT_EQ(cudaMemcpy(out->tokens.data(), d_out.ptr, rows * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(logp.data(), d_logp.ptr, rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(norm.data(), d_norm.ptr, rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ids.data(), d_ids.ptr, ids.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(top.data(), d_top.ptr, top.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  out->logprobs.assign(rows, {});
  for (int r = 0; r < rows; ++r) {
    if (params[r].top_logprobs < 0) continue;
    SampledLogprobs& o = out->logprobs[r];
    o.logprob = logp[r] - norm[r];
    o.num_top = std::min({params[r].top_logprobs, kMaxLogprobsTop, vocab});
    for (int k = 0; k < o.num_top; ++k) {
      o.top_ids[k] = ids[r * kMaxLogprobsTop + k];
      o.top_logprobs[k] = top[r * kMaxLogprobsTop + k];
    }
  }
}

// Random adjustments for each row: each token at most once, biases, penalties of either sign.
std::vector<AdjustLogitsEntry> RandomAdjustments(
    std::mt19937& rng, int rows, int vocab, std::vector<std::vector<LogitAdjustment>>* per_row) {
  std::vector<AdjustLogitsEntry> all;
  per_row->assign(rows, {});
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int r = 0; r < rows; ++r) {
    std::set<int32_t> used;
    const int n = static_cast<int>(rng() % std::min(vocab, 40));
    for (int j = 0; j < n; ++j) {
      const int32_t token = static_cast<int32_t>(rng() % vocab);
      if (!used.insert(token).second) continue;
      LogitAdjustment a;
      a.token = token;
      a.bias = j % 3 == 0 ? 0.0f : 10 * u(rng);
      a.repetition = j % 2 ? 1.0f : 1.0f + std::abs(u(rng));
      a.subtract = j % 4 == 0 ? 0.0f : u(rng);
      (*per_row)[r].push_back(a);
      all.push_back({r, a});
    }
  }
  return all;
}

TEST(SamplingGpuTest, AdjustmentsAndLogprobsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
#ifdef PAGODA_CUDA_EMULATION
  const int vocabs[] = {1, 8, 512, 3000};
#else
  const int vocabs[] = {1, 8, 512, 3000, 32000, 128256};
#endif
  for (int vocab : vocabs) {
    const int rows = 12;
    std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 3.0f);
    if (vocab > 2) {
      logits[1] = logits[0];  // an exact tie in row 0: lower id first
      logits[static_cast<size_t>(vocab) + 2] = kNaN;
    }
    std::vector<SampleRowParams> params(rows);
    const float temps[] = {0.0f, 0.7f, 1.0f, 1.6f};
    const int tops[] = {-1, 0, 1, 5, 20, 20};
    for (int r = 0; r < rows; ++r) {
      params[r].temperature = temps[r % 4];
      params[r].top_k = r % 3 == 0 ? 0 : 50;
      params[r].top_p = r % 5 == 0 ? 0.9f : 1.0f;
      params[r].min_p = r % 4 == 3 ? 0.05f : 0.0f;
      params[r].seed = static_cast<uint64_t>(r) + 17;
      params[r].index = static_cast<uint64_t>(r);
      params[r].top_logprobs = tops[r % 6];
    }
    std::vector<std::vector<LogitAdjustment>> per_row;
    const std::vector<AdjustLogitsEntry> adjust = RandomAdjustments(rng, rows, vocab, &per_row);
    PipelineOut gpu;
    ASSERT_NO_FATAL_FAILURE(RunPipeline(logits, params, adjust, vocab, &gpu));
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE(absl::StrCat("vocab ", vocab, " row ", r));
      std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(r) * vocab,
                             logits.begin() + static_cast<ptrdiff_t>(r + 1) * vocab);
      worker::ApplyAdjustments(row, per_row[r]);
      for (int i = 0; i < vocab; ++i) {
        const float g = gpu.adjusted[static_cast<size_t>(r) * vocab + i];
        ASSERT_TRUE(std::bit_cast<uint32_t>(g) == std::bit_cast<uint32_t>(row[i])) << "id " << i;
      }
      const SampleRowParams& p = params[r];
      if (!(p.temperature > 0)) {
        EXPECT_EQ(gpu.tokens[r], CpuSample(row, p)) << "greedy";
      }
      if (p.top_logprobs < 0) continue;
      SampledLogprobs cpu;
      worker::ComputeLogprobs(row, p.temperature, gpu.tokens[r], p.top_logprobs, &cpu);
      const SampledLogprobs& got = gpu.logprobs[r];
      EXPECT_NEAR(got.logprob, cpu.logprob, 1e-4);
      ASSERT_EQ(got.num_top, cpu.num_top);
      for (int k = 0; k < cpu.num_top; ++k) {
        EXPECT_EQ(got.top_ids[k], cpu.top_ids[k]) << "rank " << k;
        EXPECT_NEAR(got.top_logprobs[k], cpu.top_logprobs[k], 1e-4) << "rank " << k;
      }
    }
  }
}

// Constrained rows: LaunchMaskLogits leaves exactly what the CPU's ApplyMask leaves, bit for
// bit, on random logits and random masks over some of the rows (others untouched).
TEST(SamplingGpuTest, MaskLogitsEqualsTheCpuMask) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  for (int vocab : {1, 33, 1000, 4099}) {
    const int rows = 7, words = (vocab + 31) / 32;
    const std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 2.0f);
    std::vector<int32_t> masked_rows;
    std::vector<uint32_t> masks;
    for (int r = 0; r < rows; ++r) {
      if (r % 3 == 1) continue;
      masked_rows.push_back(r);
      for (int w = 0; w < words; ++w) masks.push_back(static_cast<uint32_t>(rng()));
    }
    DeviceArray<float> d_logits;
    DeviceArray<int32_t> d_rows;
    DeviceArray<uint32_t> d_masks;
    ASSERT_NO_FATAL_FAILURE(Upload(logits, d_logits));
    ASSERT_NO_FATAL_FAILURE(Upload(masked_rows, d_rows));
    ASSERT_NO_FATAL_FAILURE(Upload(masks, d_masks));
    ASSERT_OK(LaunchMaskLogits(
        {d_logits.ptr, d_rows.ptr, d_masks.ptr, static_cast<int>(masked_rows.size()), vocab, words},
        nullptr));
    std::vector<float> got(logits.size());
    ASSERT_EQ(cudaMemcpy(got.data(), d_logits.ptr, got.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<float> want = logits;
    for (size_t i = 0; i < masked_rows.size(); ++i) {
      worker::ApplyMask(
          std::span<float>(want.data() + static_cast<size_t>(masked_rows[i]) * vocab, vocab),
          std::span<const uint32_t>(masks.data() + i * words, words));
    }
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << "vocab " << vocab << " index " << i;
    }
  }
}

TEST(SamplingGpuTest, MinPKeepsOnlyTokensAboveTheFloor) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  const int vocab = 2000, rows = 24;
  const std::vector<float> logits = NormalLogits(rng, static_cast<size_t>(rows) * vocab, 2.0f);
  std::vector<SampleRowParams> params(rows);
  const float min_ps[] = {0.01f, 0.1f, 0.5f, 0.9f};
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 1.0f + 0.5f * (r % 3);
    params[r].min_p = min_ps[r % 4];
    params[r].top_p = r % 2 ? 0.95f : 1.0f;
    params[r].seed = static_cast<uint64_t>(r) * 7;
  }
  std::vector<int32_t> tokens;
  ASSERT_NO_FATAL_FAILURE(RunSample(logits, params, vocab, &tokens));
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> probs = HostProbs(Row(logits, vocab, r), params[r].temperature);
    EXPECT_GE(probs[tokens[r]], params[r].min_p * (1 - 1e-5)) << "row " << r;
  }
}

}  // namespace
}  // namespace pagoda::worker::cuda
