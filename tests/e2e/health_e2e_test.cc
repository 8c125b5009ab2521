// grpc.health.v1: NOT_SERVING until a worker attaches, SERVING after, NOT_SERVING once it
// leaves. The health proto is not shipped with Debian's grpc++, so the test speaks its two
// tiny messages by hand through a generic stub.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/testing/test_models.h"

namespace pagoda::testing {
namespace {

// HealthCheckResponse.status: 1 SERVING, 2 NOT_SERVING; -1 when the call failed.
int CheckHealth(const std::string& address, const std::string& service) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // HealthCheckRequest { string service = 1; }
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ByteBuffer recv;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &send, &recv,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  recv.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse { ServingStatus status = 1; } -> 0x08 <varint>, empty when 0.
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
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
  EXPECT_EQ(CheckHealth(cluster->address(), ""), 2);
  EXPECT_EQ(CheckHealth(cluster->address(), "pagoda.v1.Generation"), 2);
  const std::string dir = MakeTempDir("health");
  ChildProcess worker({BinDir() + "/pagoda-worker", "--scheduler", cluster->address(), "--model",
                       *model, "--backend", "cpu"},
                      dir + "/worker.log");
  ASSERT_TRUE(worker.Start());
  int status = 0;
  for (int i = 0; i < 500 && status != 1; ++i) {
    status = CheckHealth(cluster->address(), "pagoda.v1.Generation");
    if (status != 1) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, 1) << worker.Log();
  EXPECT_EQ(CheckHealth(cluster->address(), ""), 1);
  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(absl::Seconds(10)), 0) << worker.Log();
  for (int i = 0; i < 500 && status != 2; ++i) {
    status = CheckHealth(cluster->address(), "");
    if (status != 2) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, 2);
}

}  // namespace
}  // namespace pagoda::testing
