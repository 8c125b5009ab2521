// grpc.health.v1 on both binaries.
//
// Scheduler: readiness ("" and pagoda.v1.Generation) is NOT_SERVING until a worker attaches,
// SERVING after, NOT_SERVING once it leaves; "liveness" is SERVING throughout.
// Worker (--health-listen): readiness ("") follows its link to the scheduler, through a
// scheduler restart; "liveness" stays SERVING while the process runs.
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/support/test_models.h"

namespace pagoda::testing {
namespace {

constexpr int kServing = 1;
constexpr int kNotServing = 2;

// Polls until `service` at `address` reports `want` (or ~10 s pass); returns the last answer.
int AwaitHealth(const std::string& address, const std::string& service, int want) {
  int status = CheckHealth(address, service);
  for (int i = 0; i < 500 && status != want; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    status = CheckHealth(address, service);
  }
  return status;
}

TEST(HealthTest, ServingOnlyWithAWorker) {
  auto model = TestModelFile("stories260K-f32.gguf");
  if (!model) GTEST_SKIP() << "stories260K-f32.gguf not found: set PAGODA_TEST_MODELS";
  ClusterOptions options;
  options.model = *model;
  options.workers = 0;
  std::string error;
  auto cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  EXPECT_EQ(CheckHealth(cluster->address(), ""), kNotServing);
  EXPECT_EQ(CheckHealth(cluster->address(), "pagoda.v1.Generation"), kNotServing);
  EXPECT_EQ(CheckHealth(cluster->address(), "liveness"), kServing) << "alive without workers";
  const std::string dir = MakeTempDir("health");
  ChildProcess worker({BinDir() + "/pagoda-worker", "--scheduler", cluster->address(), "--model",
                       *model, "--backend", "cpu"},
                      dir + "/worker.log");
  ASSERT_TRUE(worker.Start());
  EXPECT_EQ(AwaitHealth(cluster->address(), "pagoda.v1.Generation", kServing), kServing)
      << worker.Log();
  EXPECT_EQ(CheckHealth(cluster->address(), ""), kServing);
  EXPECT_EQ(CheckHealth(cluster->address(), "liveness"), kServing);
  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(absl::Seconds(10)), 0) << worker.Log();
  EXPECT_EQ(AwaitHealth(cluster->address(), "", kNotServing), kNotServing);
  EXPECT_EQ(CheckHealth(cluster->address(), "pagoda.v1.Generation"), kNotServing);
  EXPECT_EQ(CheckHealth(cluster->address(), "liveness"), kServing) << "alive without workers";
}

TEST(HealthTest, WorkerReadinessFollowsItsLinkThroughASchedulerRestart) {
  auto model = TestModelFile("stories260K-f32.gguf");
  if (!model) GTEST_SKIP() << "stories260K-f32.gguf not found: set PAGODA_TEST_MODELS";
  ClusterOptions options;
  options.model = *model;
  options.worker_health = true;
  std::string error;
  auto cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  const std::string worker = absl::StrCat("127.0.0.1:", cluster->worker_health_port(0));
  EXPECT_EQ(AwaitHealth(worker, "", kServing), kServing) << cluster->Logs();
  EXPECT_EQ(CheckHealth(worker, "liveness"), kServing);

  // The scheduler goes away: the worker is not ready, but alive (it must not be restarted).
  cluster->scheduler().Signal(SIGTERM);
  ASSERT_EQ(cluster->scheduler().Wait(absl::Seconds(10)), 0) << cluster->Logs();
  EXPECT_EQ(AwaitHealth(worker, "", kNotServing), kNotServing) << cluster->Logs();
  EXPECT_EQ(CheckHealth(worker, "liveness"), kServing);

  // A scheduler on the same address: the worker re-attaches and is ready again.
  const std::string dir = MakeTempDir("health-restart");
  ChildProcess scheduler(
      {BinDir() + "/pagoda-scheduler", "--listen", cluster->address(), "--model", *model},
      dir + "/scheduler.log");
  ASSERT_TRUE(scheduler.Start());
  EXPECT_EQ(AwaitHealth(worker, "", kServing), kServing) << scheduler.Log() << cluster->Logs();
  EXPECT_EQ(AwaitHealth(cluster->address(), "", kServing), kServing) << scheduler.Log();
  EXPECT_EQ(CheckHealth(worker, "liveness"), kServing);

  // The worker stops promptly on SIGTERM, with exit code 0.
  cluster->worker(0).Signal(SIGTERM);
  EXPECT_EQ(cluster->worker(0).Wait(absl::Seconds(5)), 0) << cluster->Logs();
  scheduler.Signal(SIGTERM);
  EXPECT_EQ(scheduler.Wait(absl::Seconds(10)), 0) << scheduler.Log();
}

}  // namespace
}  // namespace pagoda::testing
