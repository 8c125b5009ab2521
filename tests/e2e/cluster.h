// Cluster: one pagoda-scheduler and N pagoda-worker processes on loopback, for e2e tests.
//
// The scheduler listens on port 0 and reports its port through --port-file; Start() returns
// once every worker is attached (or fails with the processes' logs in the error).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tests/e2e/process.h"

namespace pagoda::testing {

struct ClusterOptions {
  std::string model;
  std::vector<std::string> scheduler_flags;
  std::vector<std::string> worker_flags;
  int workers = 1;
};

// What one Generate call returned.
struct Generation {
  std::vector<int32_t> tokens;
  std::string text;
  pagoda::v1::Finished finished;
  grpc::Status status;
  int messages = 0;
};

// A fresh directory under the test's temp dir.
std::string MakeTempDir(const std::string& name);

// Writes a random-weight GGUF with pagoda-make-model; `shape` are its flags (--layers 2 ...).
// Returns false with the tool's log in `error`.
bool MakeRandomModel(const std::string& path, const std::vector<std::string>& shape,
                     std::string* error);

class Cluster {
 public:
  static std::unique_ptr<Cluster> Start(const ClusterOptions& options, std::string* error);
  ~Cluster();

  const std::string& address() const { return address_; }
  pagoda::v1::Generation::Stub& stub() { return *stub_; }
  ChildProcess& scheduler() { return *scheduler_; }
  ChildProcess& worker(int i) { return *workers_[i]; }
  std::string Logs() const;

  // One Generate call, read to the end; `timeout` becomes the gRPC deadline.
  Generation Generate(const pagoda::v1::GenerateRequest& request,
                      absl::Duration timeout = absl::Seconds(120));
  pagoda::v1::ServerStatus Status();
  // Polls until nothing runs or waits and every worker's pages are free.
  bool WaitIdleAndFree(absl::Duration timeout);

 private:
  Cluster() = default;

  std::string dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> scheduler_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<pagoda::v1::Generation::Stub> stub_;
};

}  // namespace pagoda::testing
