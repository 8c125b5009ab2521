// End-to-end: several workers, a worker dying or hanging mid-run, and the link token.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

std::vector<v1::GenerateRequest> MixedGreedyRequests(const nlohmann::json& cases, int n,
                                                     uint32_t length) {
  std::vector<v1::GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    v1::GenerateRequest r =
        TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), length + 3 * (i % 8));
    r.set_ignore_eos(true);
    out.push_back(r);
  }
  return out;
}

std::vector<Generation> RunConcurrently(Cluster& cluster,
                                        const std::vector<v1::GenerateRequest>& requests) {
  std::vector<Generation> out(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = cluster.Generate(requests[i]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Polls until `n` workers are attached.
bool WaitForWorkers(Cluster& cluster, int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cluster.Status().workers_size() == n) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// KV pages that sequences hold on the worker registered as `name` (0 when it is not attached).
// kv_pages_free counts the prefix cache's unreferenced pages too (kv_pages_cached of them), so
// total - free is exactly the pages running sequences hold: a worker with only cached pages
// (its sequences finished) holds none.
uint32_t PagesHeld(const v1::ServerStatus& status, const std::string& name) {
  for (const v1::WorkerState& w : status.workers()) {
    if (w.name() == name) return w.kv_pages_total() - w.kv_pages_free();
  }
  return 0;
}

void ExpectSameOutputs(const std::vector<Generation>& got, const std::vector<Generation>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK(want[i].status);
    ASSERT_OK(got[i].status);
    // Equal token lists mean no token was sent twice or skipped across the recovery.
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].text, want[i].text);
  }
}

// Kills worker `index` (registered as `name`) with SIGKILL once the run is under way and it holds
// sequences: some tokens streamed, most not. Without that, the kill would prove nothing.
// Returns the pages it held when killed (0: it never held any within 20 s; not killed).
uint32_t KillWhenBusy(Cluster& cluster, int index, const std::string& name) {
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until) {
    const v1::ServerStatus status = cluster.Status();
    const uint32_t pages = PagesHeld(status, name);
    if (status.requests_running() >= 8 && pages > 0) {
      cluster.worker(index).Signal(SIGKILL);
      return pages;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return 0;
}

// Runs `requests` concurrently on `cluster` (three workers), fault-free, then again
// killing worker w1 mid-run (KillWhenBusy); expects w1 to have held sequences and the second
// run's outputs (tokens, text, logprobs) to equal the first's.
void ExpectKillChangesNothing(Cluster& cluster, const std::vector<v1::GenerateRequest>& requests) {
  const std::vector<Generation> fault_free = RunConcurrently(cluster, requests);
  std::vector<Generation> faulty;
  std::thread load([&] { faulty = RunConcurrently(cluster, requests); });
  const uint32_t victim_pages = KillWhenBusy(cluster, 1, "w1");
  load.join();
  ASSERT_GT(victim_pages, 0u) << "worker w1 held no sequence while the load ran";
  ExpectSameOutputs(faulty, fault_free);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(faulty[i].logprobs.size(), fault_free[i].logprobs.size()) << "request " << i;
    for (size_t k = 0; k < faulty[i].logprobs.size(); ++k) {
      EXPECT_EQ(faulty[i].logprobs[k].SerializeAsString(),
                fault_free[i].logprobs[k].SerializeAsString())
          << "request " << i << " token " << k;
    }
  }
}

// One of three workers is killed (SIGKILL) in the middle of 64 concurrent greedy requests:
// its sequences are recomputed on the others, every stream completes with exactly the tokens
// of a fault-free run, and every remaining pool ends free.
TEST_F(TrainedModelTest, KilledWorkerLosesNoRequest) {
  StartCluster({"--max-batch-tokens", "256"}, {"--page-size", "8", "--threads", "1"},
               /*workers=*/3);
  const auto requests = MixedGreedyRequests(LoadGolden(*golden_)["cases"], 64, 200);
  ASSERT_NO_FATAL_FAILURE(ExpectKillChangesNothing(*cluster_, requests));
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
  EXPECT_EQ(cluster_->Status().workers_size(), 2);
}

// The same with penalties, logit_bias, seeded sampling and logprobs: the sequences moved to the
// other workers rebuild their token history from the plan that introduces them there, and
// every token and logprob equals the fault-free run's.
TEST_F(TrainedModelTest, KilledWorkerKeepsPenalizedOutputsExact) {
  StartCluster({"--max-batch-tokens", "256"}, {"--page-size", "8", "--threads", "1"},
               /*workers=*/3);
  const auto cases = LoadGolden(*golden_)["cases"];
  std::vector<v1::GenerateRequest> requests = MixedGreedyRequests(cases, 32, 120);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto* sp = requests[i].mutable_sampling();
    sp->set_repetition_penalty(1.25f);
    sp->set_frequency_penalty(0.4f);
    sp->set_presence_penalty(i % 2 ? 0.3f : -0.3f);
    (*sp->mutable_logit_bias())[static_cast<int32_t>(300 + i)] = 2.0f;
    if (i % 2) {
      sp->set_temperature(0.9f);
      sp->set_seed(i);
    }
    requests[i].set_logprobs(true);
    requests[i].set_top_logprobs(2);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectKillChangesNothing(*cluster_, requests));
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// The same with constraints: the sequences moved to the other workers rebuild their matchers
// from the plan that introduces them there, and every token equals the fault-free run's.
TEST_F(TrainedModelTest, KilledWorkerKeepsConstrainedOutputsExact) {
  StartCluster({"--max-batch-tokens", "256"}, {"--page-size", "8", "--threads", "1"},
               /*workers=*/3);
  const auto cases = LoadGolden(*golden_)["cases"];
  const std::string schema = R"({"type": "object", "properties": {
      "story": {"type": "string", "minLength": 60, "maxLength": 120},
      "mood": {"enum": ["happy", "sad", null]}}, "required": ["story", "mood"]})";
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 32; ++i) {
    v1::GenerateRequest r = TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), 200);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(static_cast<uint64_t>(i));
    r.mutable_constraint()->set_json_schema(schema);
    requests.push_back(r);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectKillChangesNothing(*cluster_, requests));
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// A worker that stops answering (SIGSTOP: its stream stays open) is cut after
// --worker-timeout, and its requests finish on the other worker.
TEST_F(TrainedModelTest, HungWorkerIsCutAfterTheTimeout) {
  ASSERT_NO_FATAL_FAILURE(
      StartCluster({"--worker-timeout", "1"}, {"--threads", "1"}, /*workers=*/2));
  const auto requests = MixedGreedyRequests(LoadGolden(*golden_)["cases"], 16, 400);
  const std::vector<Generation> fault_free = RunConcurrently(*cluster_, requests);
  std::vector<Generation> faulty;
  std::thread load([&] { faulty = RunConcurrently(*cluster_, requests); });
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (cluster_->Status().requests_running() < 4 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  cluster_->worker(0).Signal(SIGSTOP);
  load.join();
  cluster_->worker(0).Signal(SIGCONT);
  ExpectSameOutputs(faulty, fault_free);
  EXPECT_NE(cluster_->scheduler().Log().find("--worker-timeout"), std::string::npos)
      << cluster_->Logs();
  // The resumed worker reconnects on a fresh link.
  EXPECT_TRUE(WaitForWorkers(*cluster_, 2, absl::Seconds(10))) << cluster_->Logs();
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// With --link-token-file, only workers with the same token attach; others are refused with
// UNAUTHENTICATED, exit 1 saying so, and the scheduler logs the refusal.
TEST_F(TrainedModelTest, LinkTokenIsRequired) {
  const std::string dir = MakeTempDir("token");
  std::ofstream(dir + "/token") << "correct horse battery staple\n";
  std::ofstream(dir + "/wrong") << "incorrect\n";
  ASSERT_NO_FATAL_FAILURE(
      StartCluster({"--link-token-file", dir + "/token"}, {"--link-token-file", dir + "/token"}));
  Generation g = cluster_->Generate(TextRequest("Once upon a time", 8));
  ASSERT_OK(g.status);

  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--link-token-file", dir + "/wrong"},
        std::vector<std::string>{}}) {
    std::vector<std::string> args = {BinDir() + "/pagoda-worker",
                                     "--scheduler",
                                     cluster_->address(),
                                     "--model",
                                     *model_,
                                     "--backend",
                                     "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    ChildProcess intruder(args, dir + "/intruder.log");
    ASSERT_TRUE(intruder.Start());
    EXPECT_EQ(intruder.Wait(absl::Seconds(20)), 1) << intruder.Log();
    EXPECT_NE(intruder.Log().find("link token"), std::string::npos) << intruder.Log();
  }
  EXPECT_EQ(cluster_->Status().workers_size(), 1);
  EXPECT_NE(cluster_->scheduler().Log().find("refused a worker link"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::testing
