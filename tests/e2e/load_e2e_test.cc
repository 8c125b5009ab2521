// End-to-end load: 1,000 concurrent streaming clients on loopback against one scheduler and two
// CPU workers serving a small random model. None is lost (each stream ends OK with exactly its
// max_tokens tokens), the scheduler holds all 1,000 at once, its resident memory stays under a
// bound during and after the run, every page pool ends free, and the p99 time to first token
// is reported (stdout and the test's XML properties).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stream_driver.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kClients = 1000;
constexpr int kConnections = 8;
constexpr int kPromptTokens = 8;
constexpr int kMaxTokens = 32;
constexpr int kVocab = 600;
// The scheduler's resident memory must stay under this during and after the run (it serves
// every stream from gRPC's callback threads: no thread per stream).
constexpr int64_t kSchedulerRssBoundKiB = 256 * 1024;
// Each phase (1,000 streams of kMaxTokens tokens) must be done by then on a loaded 2-core
// machine: a stream past it fails (lost).
constexpr absl::Duration kRunDeadline = absl::Seconds(90);

// Samples the scheduler's resident memory until stopped.
class Sampler {
 public:
  explicit Sampler(Cluster& cluster) : cluster_(cluster) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        peak_rss_kib_ = std::max(peak_rss_kib_, ResidentKiB(cluster_.scheduler().pid()));
        absl::SleepFor(absl::Milliseconds(50));
      }
    });
  }
  ~Sampler() {
    if (thread_.joinable()) Stop();
  }
  void Stop() {
    stop_.store(true);
    thread_.join();
  }
  int64_t peak_rss_kib() const { return peak_rss_kib_; }

 private:
  Cluster& cluster_;
  std::atomic<bool> stop_{false};
  int64_t peak_rss_kib_ = 0;
  std::thread thread_;
};

// What one phase measured.
struct PhaseReport {
  int ok = 0;
  int peak_open = 0;
  double ttft_p50_ms = 0;
  double ttft_p99_ms = 0;
  double ttft_max_ms = 0;
  double wall_s = 0;
};

// Checks that every stream ended OK with exactly kMaxTokens tokens; TTFT is counted from each
// stream's start, or from `from` when that is later.
PhaseReport Summarize(const std::vector<StreamResult>& results, absl::Time from,
                      absl::Duration wall) {
  PhaseReport report;
  std::vector<double> ttft_ms;
  for (size_t i = 0; i < results.size(); ++i) {
    const StreamResult& r = results[i];
    if (r.status.ok() && r.finished && static_cast<int>(r.tokens.size()) == kMaxTokens &&
        r.finished->reason() == v1::FINISH_REASON_LENGTH) {
      ++report.ok;
    } else if (static_cast<int>(i) - report.ok < 5) {
      ADD_FAILURE() << "stream " << i << ": " << r.status.error_message() << ", " << r.tokens.size()
                    << " tokens";
    }
    if (r.ttft) {
      ttft_ms.push_back(absl::ToDoubleMilliseconds(r.start + *r.ttft - std::max(r.start, from)));
    }
  }
  EXPECT_EQ(report.ok, kClients) << "streams lost";
  EXPECT_EQ(static_cast<int>(ttft_ms.size()), kClients);
  report.peak_open = PeakOpenStreams(results);
  report.ttft_p50_ms = Percentile(ttft_ms, 50);
  report.ttft_p99_ms = Percentile(ttft_ms, 99);
  report.ttft_max_ms = Percentile(ttft_ms, 100);
  report.wall_s = absl::ToDoubleSeconds(wall);
  return report;
}

class LoadE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 1,000 streams take a handful of connections, but leave room for anything else.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    const std::string dir = MakeTempDir("load");
    std::string error;
    ASSERT_TRUE(MakeRandomModel(
        dir + "/model.gguf",
        {"--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn-dim", "128",
         "--vocab", std::to_string(kVocab), "--context", "256", "--seed", "11"},
        &error))
        << error;
    ClusterOptions options;
    options.model = dir + "/model.gguf";
    options.workers = 2;
    // Limits set for the test, so that all 1,000 are admitted at once whatever the defaults;
    // the workers are paused for a while in the second phase.
    options.scheduler_flags = {
        "--max-queued-requests", "4096", "--max-queued-prompt-tokens", "1000000",
        "--max-running",         "512",  "--max-batch-tokens",         "8192",
        "--max-prefill-chunk",   "512",  "--worker-timeout",           "60"};
    options.worker_flags = {"--threads",   "1",  "--kv-pages",         "2048",
                            "--page-size", "16", "--max-batch-tokens", "8192"};
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
    stubs_ = MakeStubs(cluster_->address(), kConnections);
    for (auto& s : stubs_) stub_ptrs_.push_back(s.get());
  }

  // kClients requests of kPromptTokens random ids (salted, so that no phase hits another's
  // prefix cache) and kMaxTokens tokens each.
  std::vector<StreamPlan> Plans(uint32_t salt) {
    std::mt19937 rng(salt);
    std::uniform_int_distribution<int32_t> token(3, kVocab - 1);
    std::vector<StreamPlan> plans(kClients);
    for (int i = 0; i < kClients; ++i) {
      v1::GenerateRequest& r = plans[i].request;
      r.mutable_token_ids()->add_ids(1);  // BOS
      for (int t = 1; t < kPromptTokens; ++t) r.mutable_token_ids()->add_ids(token(rng));
      r.set_max_tokens(kMaxTokens);
      r.set_ignore_eos(true);
      r.set_request_id(absl::StrCat("load-", salt, "-", i));
      plans[i].deadline = kRunDeadline;
    }
    return plans;
  }

  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<v1::Generation::Stub>> stubs_;
  std::vector<v1::Generation::Stub*> stub_ptrs_;
};

// Phase 1: 1,000 clients open their streams at once and the system serves them as they
// arrive (the p99 TTFT that clients see). Phase 2: the same with both workers paused
// (SIGSTOP) until the scheduler holds all 1,000 requests at once, then resumed (TTFT counted
// from the resume: how long the last of 1,000 queued requests waits for its first token).
TEST_F(LoadE2eTest, ThousandConcurrentStreamingClients) {
  const int64_t idle_rss = ResidentKiB(cluster_->scheduler().pid());
  Sampler sampler(*cluster_);

  absl::Time start = absl::Now();
  const std::vector<StreamResult> arriving = RunStreams(stub_ptrs_, Plans(1));
  const PhaseReport arrive = Summarize(arriving, start, absl::Now() - start);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();

  for (int i = 0; i < 2; ++i) cluster_->worker(i).Signal(SIGSTOP);
  start = absl::Now();
  std::vector<StreamResult> held_results;
  std::thread clients([&] { held_results = RunStreams(stub_ptrs_, Plans(2)); });
  int held = 0;
  for (const absl::Time until = start + absl::Seconds(60); absl::Now() < until;) {
    const v1::ServerStatus s = cluster_->Status();
    held = static_cast<int>(s.requests_waiting() + s.requests_running());
    if (held == kClients) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Time resume = absl::Now();
  for (int i = 0; i < 2; ++i) cluster_->worker(i).Signal(SIGCONT);
  clients.join();
  const PhaseReport burst = Summarize(held_results, resume, absl::Now() - start);
  EXPECT_EQ(held, kClients) << "the scheduler never held every request at once";
  EXPECT_EQ(burst.peak_open, kClients);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
  sampler.Stop();
  const int64_t after_rss = ResidentKiB(cluster_->scheduler().pid());

  std::printf(
      "load, arriving: %d of %d streams OK in %.2f s, %d open at once; TTFT p50 %.1f ms, p99 "
      "%.1f ms, max %.1f ms\n"
      "load, held: %d of %d streams OK in %.2f s, %d held by the scheduler at once; TTFT from "
      "the resume p50 %.1f ms, p99 %.1f ms, max %.1f ms\n"
      "load: scheduler RSS idle %.1f MiB, peak %.1f MiB (bound %.0f MiB), after %.1f MiB\n",
      arrive.ok, kClients, arrive.wall_s, arrive.peak_open, arrive.ttft_p50_ms, arrive.ttft_p99_ms,
      arrive.ttft_max_ms, burst.ok, kClients, burst.wall_s, held, burst.ttft_p50_ms,
      burst.ttft_p99_ms, burst.ttft_max_ms, idle_rss / 1024.0, sampler.peak_rss_kib() / 1024.0,
      kSchedulerRssBoundKiB / 1024.0, after_rss / 1024.0);
  RecordProperty("arriving_ttft_p99_ms", absl::StrCat(arrive.ttft_p99_ms));
  RecordProperty("held_ttft_p99_ms", absl::StrCat(burst.ttft_p99_ms));
  RecordProperty("scheduler_peak_rss_kib", absl::StrCat(sampler.peak_rss_kib()));
  RecordProperty("scheduler_after_rss_kib", absl::StrCat(after_rss));

  EXPECT_GT(sampler.peak_rss_kib(), 0);
  EXPECT_LT(sampler.peak_rss_kib(), kSchedulerRssBoundKiB);
  EXPECT_LT(after_rss, kSchedulerRssBoundKiB);
}

}  // namespace
}  // namespace pagoda::testing
