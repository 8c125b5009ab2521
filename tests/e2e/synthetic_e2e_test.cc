// End-to-end with synthetic workers (pagoda-worker --backend synthetic): 96 concurrent streams
// on two workers whose KV arenas are small enough to preempt, with chunked prefill; every stream
// must carry exactly the tokens SyntheticNextToken gives for its prompt and the tokens before,
// which checks the scheduler's batching, page tables, recompute and routing without a model.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stream_driver.h"
#include "worker/backend/synthetic/synthetic_backend.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kVocab = 600;
constexpr int kStreams = 96;

TEST(SyntheticE2eTest, StreamsCarryTheSyntheticTokensThroughPreemption) {
  const std::string dir = MakeTempDir("synthetic");
  std::string error;
  ASSERT_TRUE(MakeRandomModel(
      dir + "/model.gguf",
      {"--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "1", "--ffn-dim", "64",
       "--vocab", std::to_string(kVocab), "--context", "256", "--seed", "5"},
      &error))
      << error;
  ClusterOptions options;
  options.model = dir + "/model.gguf";
  options.workers = 2;
  options.scheduler_flags = {"--max-batch-tokens", "96", "--max-prefill-chunk", "24",
                             "--worker-timeout",   "60"};
  options.worker_flags = {"--backend",  "synthetic", "--synthetic-step-ms", "1",
                          "--kv-pages", "48",        "--page-size",         "8"};
  auto cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  EXPECT_NE(cluster->Logs().find("synthetic backend: NO MODEL"), std::string::npos);

  std::mt19937 rng(7);
  std::vector<StreamPlan> plans(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    v1::GenerateRequest& r = plans[i].request;
    const int prompt = 1 + static_cast<int>(rng() % 60);
    for (int t = 0; t < prompt; ++t) r.mutable_token_ids()->add_ids(3 + rng() % (kVocab - 3));
    r.set_max_tokens(1 + rng() % 70);
    r.set_ignore_eos(true);
    r.set_request_id(absl::StrCat("synthetic-", i));
  }
  auto stubs = MakeStubs(cluster->address(), 2);
  const std::vector<StreamResult> results = RunStreams({stubs[0].get(), stubs[1].get()}, plans);
  int preemptions = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    const StreamResult& r = results[i];
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_TRUE(r.finished.has_value());
    EXPECT_EQ(r.finished->reason(), v1::FINISH_REASON_LENGTH);
    preemptions += static_cast<int>(r.finished->stats().preemptions());
    std::vector<int32_t> seq(plans[i].request.token_ids().ids().begin(),
                             plans[i].request.token_ids().ids().end());
    std::vector<int32_t> want;
    for (uint32_t n = 0; n < plans[i].request.max_tokens(); ++n) {
      want.push_back(worker::SyntheticNextToken(seq, kVocab));
      seq.push_back(want.back());
    }
    EXPECT_EQ(r.tokens, want);
  }
  EXPECT_GT(preemptions, 0) << "the arenas were meant to be small enough to preempt";
  EXPECT_TRUE(cluster->WaitIdleAndFree(absl::Seconds(10))) << cluster->Status().DebugString();
}

}  // namespace
}  // namespace pagoda::testing
