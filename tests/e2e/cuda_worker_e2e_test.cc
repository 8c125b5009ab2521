// End-to-end on a GPU: pagoda-scheduler driving `pagoda-worker --backend cuda` over the real
// link. Skips where there is no NVIDIA device (ctest label gpu).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

class CudaWorkerTest : public TrainedModelTest {
 protected:
  void SetUp() override {
    if (access("/dev/nvidiactl", F_OK) != 0) {
      GTEST_SKIP() << "no NVIDIA device (/dev/nvidiactl): CUDA worker e2e test not run";
    }
    TrainedModelTest::SetUp();
  }
};

// The trained model's greedy tokens through every process equal llama.cpp's with the default
// dtype (auto: BF16 for this F32 file) and with bf16 named. Both dtypes, and where a 16-bit pass
// may part from the float32 reference at a near tie, are checked kernel-side in
// cuda_backend_gpu_test.
TEST_F(CudaWorkerTest, GoldenGreedyGenerations) {
  for (const char* dtype : {"auto", "bf16"}) {
    SCOPED_TRACE(dtype);
    ASSERT_NO_FATAL_FAILURE(
        StartCluster({}, {"--backend", "cuda", "--dtype", dtype, "--kv-pages", "512"}));
    for (const auto& c : LoadGolden(*golden_)["cases"]) {
      SCOPED_TRACE(c["prompt"].get<std::string>());
      Generation g = cluster_->Generate(TextRequest(c["prompt"], c["max_tokens"]));
      ASSERT_OK(g.status) << cluster_->Logs();
      EXPECT_EQ(g.tokens, c["expected_token_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(g.text, c["expected_text"].get<std::string>());
    }
    EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
    // At the defaults the worker sizes its budget by the GPU's memory and asks for prefill
    // chunks of all of it; the scheduler plans with both.
    const std::optional<std::string> log =
        cluster_->scheduler().WaitForLog("plans of up to ", absl::Seconds(10));
    ASSERT_TRUE(log) << cluster_->Logs();
    int budget = 0, chunk = 0;
    ASSERT_EQ(std::sscanf(log->c_str(), "plans of up to %d tokens, prefill chunks of up to %d",
                          &budget, &chunk),
              2);
    EXPECT_TRUE(budget == 2048 || budget == 8192) << budget;
    EXPECT_EQ(chunk, budget);
    cluster_.reset();
  }
}

// Concurrent requests (chunked prefill mixed with decodes, graph replays of decode steps)
// return what the same requests return one at a time; seeded sampling repeats.
TEST_F(CudaWorkerTest, ConcurrentEqualsSequential) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(
      {"--max-batch-tokens", "48", "--max-prefill-chunk", "16"},
      {"--backend", "cuda", "--dtype", "fp16", "--page-size", "8", "--kv-pages", "1024"}));
  const auto cases = LoadGolden(*golden_)["cases"];
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    std::string prompt;
    for (int r = 0; r <= i % 4; ++r) {
      prompt += cases[(i + r) % cases.size()]["prompt"].get<std::string>() + " ";
    }
    requests.push_back(TextRequest(prompt, 8 + 5 * (i % 7)));
    if (i % 4 == 1) {
      auto* s = requests.back().mutable_sampling();
      s->set_temperature(0.8f);
      s->set_top_k(40);
      s->set_top_p(0.95f);
      s->set_seed(1000 + i);
    }
  }
  std::vector<Generation> sequential;
  for (const auto& r : requests) sequential.push_back(cluster_->Generate(r));
  const std::vector<Generation> concurrent = cluster_->GenerateAll(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK(concurrent[i].status);
    EXPECT_EQ(concurrent[i].tokens, sequential[i].tokens);
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

}  // namespace
}  // namespace pagoda::testing
