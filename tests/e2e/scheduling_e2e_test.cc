// End-to-end: the scheduler core's rules seen from a client — preemption under KV pressure,
// stop strings, deadlines and queue limits — with real processes on loopback.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

// A KV pool far too small for the load: sequences are preempted many times, by recompute, by
// swap to the worker's host memory, or by whichever costs less, and every greedy output still
// equals the same request served alone.
class PreemptionModeTest : public TrainedModelTest,
                           public ::testing::WithParamInterface<const char*> {};

TEST_P(PreemptionModeTest, PreemptionUnderKvPressureKeepsGreedyOutputsExact) {
  // 20 pages of 4 tokens: room for one longest request (about 12 prompt + 56 generated
  // tokens) and a bit; 12 concurrent requests must take turns.
  const std::string mode = GetParam();
  StartCluster({"--max-batch-tokens", "64", "--max-prefill-chunk", "16", "--preemption-mode", mode},
               {"--page-size", "4", "--kv-pages", "20", "--swap-space-mib", "1"});
  const auto cases = LoadGolden(*golden_)["cases"];
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    v1::GenerateRequest r =
        TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), 24 + 4 * (i % 8));
    r.set_ignore_eos(true);
    r.set_priority(static_cast<v1::Priority>(1 + i % 4));
    requests.push_back(r);
  }
  std::vector<Generation> alone;
  for (const auto& r : requests) alone.push_back(cluster_->Generate(r));
  ASSERT_EQ(cluster_->Status().preemptions_total(), 0u) << "one at a time never preempts";

  const std::vector<Generation> together = cluster_->GenerateAll(requests);
  uint32_t preemptions = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK(alone[i].status);
    ASSERT_OK(together[i].status);
    EXPECT_EQ(together[i].tokens.size(), requests[i].max_tokens());
    EXPECT_EQ(together[i].tokens, alone[i].tokens);
    EXPECT_EQ(together[i].text, alone[i].text);
    preemptions += together[i].finished.stats().preemptions();
  }
  const v1::ServerStatus status = cluster_->Status();
  RecordProperty("preemptions", static_cast<int>(preemptions));
  EXPECT_GE(preemptions, 5u) << "the pool was meant to force many preemptions";
  EXPECT_EQ(status.preemptions_total(), preemptions);
  RecordProperty("preemptions_swap", static_cast<int>(status.preemptions_swap()));
  if (mode == "recompute") {
    EXPECT_EQ(status.preemptions_swap(), 0u);
  } else {
    // Copying a page of this tiny model costs far less than recomputing its tokens.
    EXPECT_GE(status.preemptions_swap(), 5u);
    EXPECT_EQ(status.swapped_in_pages(), status.swapped_out_pages());
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
}

// Constrained, seeded sampling under the same KV pressure: a preempted sequence's matcher is
// rebuilt from its tokens on resume, so every answer equals the request served alone and is a
// sentence of its regex.
TEST_P(PreemptionModeTest, ConstrainedOutputsSurvivePreemption) {
  const std::string mode = GetParam();
  StartCluster({"--max-batch-tokens", "64", "--max-prefill-chunk", "16", "--preemption-mode", mode},
               {"--page-size", "4", "--kv-pages", "20", "--swap-space-mib", "1"});
  const auto cases = LoadGolden(*golden_)["cases"];
  const std::string pattern = "[A-Z][a-z ]{20,40}\\. [0-9]{1,3}";
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    v1::GenerateRequest r = TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), 56);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(static_cast<uint64_t>(i));
    r.mutable_constraint()->set_regex(pattern);
    requests.push_back(r);
  }
  std::vector<Generation> alone;
  for (const auto& r : requests) alone.push_back(cluster_->Generate(r));
  const std::vector<Generation> together = cluster_->GenerateAll(requests);
  uint32_t preemptions = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK(alone[i].status);
    ASSERT_OK(together[i].status);
    EXPECT_EQ(together[i].tokens, alone[i].tokens);
    EXPECT_TRUE(std::regex_match(together[i].text, std::regex(pattern))) << together[i].text;
    preemptions += together[i].finished.stats().preemptions();
  }
  EXPECT_GE(preemptions, 3u) << "the pool was meant to force preemptions";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
}

INSTANTIATE_TEST_SUITE_P(Modes, PreemptionModeTest, ::testing::Values("recompute", "swap", "auto"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// A stop string ends the stream before the match, across token boundaries, and is not sent.
TEST_F(TrainedModelTest, StopStringsEndTheStreamBeforeTheMatch) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const auto golden = LoadGolden(*golden_)["cases"][0];
  const std::string expected = golden["expected_text"];
  for (const std::string stop : {"a big, red", "Lily.", "park"}) {
    SCOPED_TRACE(stop);
    const size_t at = expected.find(stop);
    ASSERT_NE(at, std::string::npos);
    v1::GenerateRequest r = TextRequest(golden["prompt"], golden["max_tokens"]);
    r.add_stop("never appears");
    r.add_stop(stop);
    Generation g = cluster_->Generate(r);
    ASSERT_OK(g.status);
    EXPECT_EQ(g.text, expected.substr(0, at));
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_STOP_STRING);
    EXPECT_EQ(g.finished.matched_stop(), stop);
    EXPECT_EQ(g.finished.usage().completion_tokens(), g.tokens.size());
    EXPECT_LT(g.tokens.size(), golden["max_tokens"].get<size_t>());
  }
  v1::GenerateRequest bad = TextRequest("Once upon a time", 8);
  bad.add_stop("");
  Generation g = cluster_->Generate(bad);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(g.status.error_message().find("stop string"), std::string::npos);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Queue limits answer RESOURCE_EXHAUSTED at once, naming the limit and the depth; queued
// requests whose deadline passes get DEADLINE_EXCEEDED. No worker: everything stays queued.
TEST_F(TrainedModelTest, QueueLimitsAndDeadlinesOfQueuedRequests) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--max-queued-requests", "2"}, {}, /*workers=*/0));
  std::vector<Generation> queued(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      queued[i] = cluster_->Generate(TextRequest("Once upon a time", 8), absl::Seconds(2));
    });
  }
  absl::Time until = absl::Now() + absl::Seconds(2);
  while (cluster_->Status().requests_waiting() < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(cluster_->Status().requests_waiting(), 2u);
  const absl::Time start = absl::Now();
  Generation refused = cluster_->Generate(TextRequest("Once upon a time", 8));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "refused at once";
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("2 requests waiting (limit 2)"), std::string::npos)
      << refused.status.error_message();
  for (auto& t : threads) t.join();
  for (const Generation& g : queued) {
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << g.status.error_message();
  }
  until = absl::Now() + absl::Seconds(2);
  while (cluster_->Status().requests_waiting() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(cluster_->Status().requests_waiting(), 0u) << "expired requests leave the queue";
}

// A running request whose deadline passes is removed and its pages freed; others go on.
// A random model of realistic width on one thread keeps a long generation running for
// seconds, well past the deadline.
TEST(DeadlineTest, RunningRequestPastItsDeadlineFreesItsPages) {
  const std::string model = MakeTempDir("deadline") + "/random.gguf";
  std::string error;
  ASSERT_TRUE(MakeRandomModel(model,
                              {"--layers", "4", "--dim", "256", "--heads", "8", "--kv-heads", "4",
                               "--ffn-dim", "688", "--vocab", "2048", "--context", "2048"},
                              &error))
      << error;
  ClusterOptions options;
  options.model = model;
  options.worker_flags = {"--threads", "1", "--page-size", "16"};
  auto cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  v1::GenerateRequest longest = TextRequest("The quick brown fox", 2000);
  longest.set_ignore_eos(true);
  Generation other;
  std::thread neighbour([&] {
    v1::GenerateRequest r = TextRequest("jumps over the lazy dog", 16);
    r.set_ignore_eos(true);
    other = cluster->Generate(r);
  });
  const absl::Time start = absl::Now();
  Generation g = cluster->Generate(longest, absl::Milliseconds(300));
  neighbour.join();
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << g.status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_LT(g.tokens.size(), 2000u);
  EXPECT_OK(other.status);
  EXPECT_EQ(other.tokens.size(), 16u);
  EXPECT_TRUE(cluster->WaitIdleAndFree(absl::Seconds(5))) << cluster->Status().DebugString();
  EXPECT_EQ(cluster->Status().requests_running(), 0u);
}

}  // namespace
}  // namespace pagoda::testing
