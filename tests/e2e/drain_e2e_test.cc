// Graceful drain of the scheduler on SIGTERM: admitted requests finish, new ones get
// UNAVAILABLE, workers stay attached, the process exits 0 promptly; past --drain-timeout the
// requests still running are cut with UNAVAILABLE.
//
// A random model of realistic width on one worker thread makes a long generation last seconds,
// so that the signal surely lands mid-stream. The request that must outlast a 1 s drain asks for
// 30,000 tokens: 15 s of generation even on a machine that makes 2,000 of this model's tokens a
// second.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kNotServing = 2;
constexpr int kServing = 1;

// One Generate call read to the end on its own thread; Started() once a token arrived.
class BackgroundStream {
 public:
  BackgroundStream(Cluster& cluster, v1::GenerateRequest request)
      : thread_([this, &cluster, request] { Run(cluster, request); }) {}
  ~BackgroundStream() {
    if (thread_.joinable()) thread_.join();
  }

  bool WaitStarted(absl::Duration timeout) {
    return started_.WaitForNotificationWithTimeout(timeout);
  }
  bool Done() const { return done_.HasBeenNotified(); }
  const Generation& Join() {
    thread_.join();
    return result_;
  }

 private:
  void Run(Cluster& cluster, const v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    auto reader = cluster.stub().Generate(&ctx, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      ++result_.messages;
      result_.tokens.insert(result_.tokens.end(), response.token_ids().begin(),
                            response.token_ids().end());
      if (response.has_finished()) result_.finished = response.finished();
      if (!started_.HasBeenNotified()) started_.Notify();
    }
    result_.status = reader->Finish();
    if (!started_.HasBeenNotified()) started_.Notify();
    done_.Notify();
  }

  Generation result_;
  absl::Notification started_;
  absl::Notification done_;
  std::thread thread_;
};

v1::GenerateRequest LongRequest(const std::string& prompt, uint32_t max_tokens) {
  v1::GenerateRequest r = TextRequest(prompt, max_tokens);
  r.set_ignore_eos(true);
  return r;
}

class DrainTest : public ::testing::Test {
 protected:
  void StartCluster(const std::string& drain_timeout, const std::string& context = "2048") {
    const std::string model = MakeTempDir("drain") + "/random.gguf";
    std::string error;
    ASSERT_TRUE(MakeRandomModel(model,
                                {"--layers", "4", "--dim", "256", "--heads", "8", "--kv-heads", "4",
                                 "--ffn-dim", "688", "--vocab", "2048", "--context", context},
                                &error))
        << error;
    ClusterOptions options;
    options.model = model;
    options.scheduler_flags = {"--drain-timeout", drain_timeout};
    options.worker_flags = {"--threads", "1"};
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  // Polls the scheduler's overall health until it reports `want`.
  int AwaitHealth(int want) {
    int status = CheckHealth(cluster_->address(), "");
    for (int i = 0; i < 250 && status != want; ++i) {
      absl::SleepFor(absl::Milliseconds(20));
      status = CheckHealth(cluster_->address(), "");
    }
    return status;
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(DrainTest, AdmittedRequestsFinishNewOnesAreRefusedAndTheSchedulerExitsZero) {
  // A drain timeout far past the streams' time: under TSan on two cores their 800 tokens take
  // about a minute (a few seconds otherwise), and this test is about the drain letting them end.
  ASSERT_NO_FATAL_FAILURE(StartCluster("300"));
  constexpr uint32_t kTokens = 800;
  BackgroundStream a(*cluster_, LongRequest("Once upon a time", kTokens));
  BackgroundStream b(*cluster_, LongRequest("The quick brown fox", kTokens));
  ASSERT_TRUE(a.WaitStarted(absl::Seconds(30)));
  ASSERT_TRUE(b.WaitStarted(absl::Seconds(30)));
  cluster_->scheduler().Signal(SIGTERM);

  // Draining: not ready, still alive, still serving what it admitted, workers attached.
  EXPECT_EQ(AwaitHealth(kNotServing), kNotServing);
  EXPECT_EQ(CheckHealth(cluster_->address(), "pagoda.v1.Generation"), kNotServing);
  EXPECT_EQ(CheckHealth(cluster_->address(), "liveness"), kServing);
  const Generation refused = cluster_->Generate(LongRequest("jumps over the lazy dog", 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.status.error_message();
  EXPECT_TRUE(absl::StrContains(refused.status.error_message(), "draining"))
      << refused.status.error_message();
  EXPECT_EQ(cluster_->Status().workers_size(), 1) << "workers stay attached during the drain";
  ASSERT_FALSE(a.Done() && b.Done())
      << "the streams ended before the checks above: they did not test a drain in progress";

  for (BackgroundStream* s : {&a, &b}) {
    const Generation& g = s->Join();
    EXPECT_OK(g.status);
    EXPECT_EQ(g.tokens.size(), kTokens);
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_LENGTH);
  }
  // Prompt exit although the test's own channel stays open and the worker stays attached.
  const absl::Time streams_done = absl::Now();
  EXPECT_EQ(cluster_->scheduler().Wait(absl::Seconds(10)), 0) << cluster_->Logs();
  EXPECT_LT(absl::Now() - streams_done, absl::Seconds(3));
  EXPECT_TRUE(cluster_->worker(0).Running()) << "the worker outlives its scheduler";
  const std::string log = cluster_->scheduler().Log();
  EXPECT_TRUE(absl::StrContains(log, "drain started: 2 requests")) << log;
  EXPECT_TRUE(absl::StrContains(log, "2 of 2 requests completed, 0 cut short")) << log;
  EXPECT_TRUE(absl::StrContains(log, "1 new requests refused")) << log;
}

TEST_F(DrainTest, TimeoutCutsWhatIsLeftWithUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartCluster("1", "32768"));
  constexpr uint32_t kTokens = 30000;
  BackgroundStream stream(*cluster_, LongRequest("Once upon a time", kTokens));
  ASSERT_TRUE(stream.WaitStarted(absl::Seconds(30)));
  const absl::Time signalled = absl::Now();
  cluster_->scheduler().Signal(SIGTERM);
  const Generation& g = stream.Join();
  const absl::Duration cut_after = absl::Now() - signalled;
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::UNAVAILABLE) << g.status.error_message();
  EXPECT_TRUE(absl::StrContains(g.status.error_message(), "shut down before the request finished"))
      << g.status.error_message();
  EXPECT_LT(g.tokens.size(), kTokens) << "the request was meant to outlast the drain";
  EXPECT_GE(cut_after, absl::Milliseconds(900));
  EXPECT_LT(cut_after, absl::Seconds(4));
  EXPECT_EQ(cluster_->scheduler().Wait(absl::Seconds(5)), 0) << cluster_->Logs();
  const std::string log = cluster_->scheduler().Log();
  EXPECT_TRUE(absl::StrContains(log, "0 of 1 requests completed, 1 cut short")) << log;
  EXPECT_TRUE(absl::StrContains(log, "status=UNAVAILABLE")) << log;
}

}  // namespace
}  // namespace pagoda::testing
