// Swap space: its sizing from --swap-space-mib (CreateSwapSpace), the Backend defaults of a
// backend without one, and the CPU backend's round trip (page -> slot -> another page gives
// bitwise the same logits).
#include <gtest/gtest.h>

#include <numeric>

#include "tests/support/status_assertions.h"
#include "tests/worker/model_fixtures.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/factory.h"
#include "worker/backend/synthetic/synthetic_backend.h"

namespace pagoda::worker {
namespace {

std::unique_ptr<SyntheticBackend> MakeSynthetic() {
  common::ModelConfig config;
  config.vocab_size = 97;
  config.context_length = 128;
  auto b = SyntheticBackend::Create(config, {.page_size = 4, .num_pages = 8, .step = {}});
  EXPECT_OK(b);
  return *std::move(b);
}

TEST(SwapSpaceTest, SlotsAreWholePagesOfTheMibAsked) {
  auto none = MakeSynthetic();
  EXPECT_OK(CreateSwapSpace(*none, 0, 1 << 20));
  EXPECT_EQ(none->num_swap_pages(), 0);
  auto b = MakeSynthetic();
  ASSERT_OK(CreateSwapSpace(*b, 5, (1 << 20) / 3));  // 5 MiB of 1/3 MiB pages
  EXPECT_EQ(b->num_swap_pages(), 15);
  auto capped = MakeSynthetic();
  ASSERT_OK(CreateSwapSpace(*capped, 1024, 64));
  EXPECT_EQ(capped->num_swap_pages(), 1 << 20);
  // A size that holds no page, or a negative one, is refused with the numbers.
  absl::Status s = CreateSwapSpace(*none, 2, size_t{3} << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--swap-space-mib 2 holds no KV page"), std::string::npos) << s;
  EXPECT_NE(s.message().find("at least 3"), std::string::npos) << s;
  s = CreateSwapSpace(*none, -1, 1024);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--swap-space-mib -1"), std::string::npos) << s;
  EXPECT_EQ(none->num_swap_pages(), 0);
}

// A backend that does not override the swap methods: what Backend gives every backend.
class NoSwapBackend : public Backend {
 public:
  absl::Status Forward(std::span<const SeqInput>, std::vector<float>*) override {
    return absl::OkStatus();
  }
  int page_size() const override { return 4; }
  int num_pages() const override { return 4; }
  const common::ModelConfig& config() const override { return config_; }
  std::string name() const override { return "test"; }
  size_t kv_bytes() const override { return 0; }

 private:
  common::ModelConfig config_;
};

TEST(SwapSpaceTest, BackendsWithoutSwapSpaceRefuseSwaps) {
  NoSwapBackend b;
  EXPECT_EQ(b.num_swap_pages(), 0);
  EXPECT_EQ(b.InitSwapSpace(4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateSwapSpace(b, 1, 1024).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_OK(b.SwapOut({}));
  EXPECT_OK(b.SwapIn({}));
  const std::vector<SwapCopy> one = {{.page = 0, .slot = 0}};
  absl::Status s = b.SwapOut(one);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no swap space"), std::string::npos) << s;
  EXPECT_EQ(b.SwapIn(one).code(), absl::StatusCode::kFailedPrecondition);
}

// The KV of a prompt swapped out, its pages overwritten by another prompt, swapped back into
// other pages: a decode step over them gives bitwise the logits of the same step unswapped.
TEST(SwapSpaceTest, CpuRoundTripRestoresTheKv) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(64, 4, 2, 2, 9));
  ASSERT_NE(model, nullptr);
  auto made = CpuBackend::Create(model, {.page_size = 4, .num_pages = 16, .num_threads = 1});
  ASSERT_OK(made);
  CpuBackend& b = **made;
  EXPECT_EQ(b.SwapOut(std::vector<SwapCopy>{{.page = 0, .slot = 0}}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(CreateSwapSpace(b, 1, b.kv_bytes() / 16));  // 1 MiB of pages
  EXPECT_EQ(b.num_swap_pages(), static_cast<int>((1 << 20) / (b.kv_bytes() / 16)));
  std::vector<int32_t> prompt(10), other(12);
  std::iota(prompt.begin(), prompt.end(), 40);
  std::iota(other.begin(), other.end(), 200);
  const std::vector<int32_t> pages = {5, 2, 9}, moved = {12, 0, 7};
  const std::vector<int32_t> next = {77};
  std::vector<float> logits, want, got;
  ASSERT_OK(b.Forward(std::vector<SeqInput>{{prompt, 0, pages, false}}, &logits));
  ASSERT_OK(b.Forward(std::vector<SeqInput>{{next, 10, pages, true}}, &want));
  // The step writes position 10 again with the same token: the KV is the prompt's plus its own.
  ASSERT_OK(b.SwapOut(std::vector<SwapCopy>{{5, 3}, {2, 0}, {9, 1}}));
  ASSERT_OK(b.Forward(std::vector<SeqInput>{{other, 0, pages, false}}, &logits));
  ASSERT_OK(b.SwapIn(std::vector<SwapCopy>{{12, 3}, {0, 0}, {7, 1}}));
  ASSERT_OK(b.Forward(std::vector<SeqInput>{{next, 10, moved, true}}, &got));
  EXPECT_EQ(got, want);
  // The overwritten pages give other logits: the comparison is not vacuous.
  ASSERT_OK(b.Forward(std::vector<SeqInput>{{next, 10, pages, true}}, &logits));
  EXPECT_NE(logits, want);
}

}  // namespace
}  // namespace pagoda::worker
