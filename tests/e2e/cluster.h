// Cluster: one pagoda-scheduler and N pagoda-worker processes on loopback, for e2e tests.
//
// The scheduler listens on port 0 and reports its port through --port-file; Start() returns
// once every worker is attached (or fails with the processes' logs in the error). With
// `metrics` (and `worker_health`) the processes serve those endpoints on loopback port 0 too,
// and report the ports through --metrics-port-file (--health-port-file).
//
// With `credentials` the cluster's own client (stub(), Status()) connects with them: for a
// scheduler started with --tls-* flags (passed in scheduler_flags and worker_flags).
//
// Also here: small clients for the e2e tests (grpc.health.v1 Check, HTTP GET), and the
// resident memory of a process.
#pragma once

#include <grpcpp/security/credentials.h>

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
  bool metrics = false;        // --metrics-listen 127.0.0.1:0 on the scheduler and workers
  bool worker_health = false;  // --health-listen 127.0.0.1:0 on the workers
  // The cluster's own channel credentials; null = plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// What one Generate call returned.
struct Generation {
  std::vector<int32_t> tokens;
  std::vector<pagoda::v1::TokenLogprob> logprobs;  // when the request asked for them
  std::string text;
  pagoda::v1::Finished finished;
  grpc::Status status;
  int messages = 0;
};

// A fresh directory under the test's temp dir.
std::string MakeTempDir(const std::string& name);

// grpc.health.v1.Health/Check of `service` at `address`: 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN,
// -1 when the call failed (unreachable, unknown service).
int CheckHealth(const std::string& address, const std::string& service);

// GET http://`host_port``path` (HTTP/1.0, loopback tests only). Returns the status code and
// fills `body`; -1 when the connection failed.
int HttpGet(const std::string& host_port, const std::string& path, std::string* body);

// VmRSS of process `pid` in KiB (/proc/PID/status); -1 when it cannot be read.
int64_t ResidentKiB(pid_t pid);

// A TCP port on 127.0.0.1 that was free a moment ago (for servers that cannot report theirs).
int FreeLoopbackPort();

// The first line of `path` as a port, polled until `process` exits or ~10 s pass; 0 if none.
int ReadPortFile(const std::string& path, ChildProcess& process);

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
  int num_workers() const { return static_cast<int>(workers_.size()); }
  // Ports of the optional endpoints; 0 when not enabled.
  int scheduler_metrics_port() const { return scheduler_metrics_port_; }
  int worker_metrics_port(int i) const { return worker_metrics_ports_[i]; }
  int worker_health_port(int i) const { return worker_health_ports_[i]; }
  std::string Logs() const;

  // One Generate call, read to the end; `timeout` becomes the gRPC deadline.
  Generation Generate(const pagoda::v1::GenerateRequest& request,
                      absl::Duration timeout = absl::Seconds(120));
  // Every request at once, each on a thread of its own; results in request order.
  std::vector<Generation> GenerateAll(const std::vector<pagoda::v1::GenerateRequest>& requests);
  pagoda::v1::ServerStatus Status();
  // Polls until nothing runs or waits and every worker's pages are free.
  bool WaitIdleAndFree(absl::Duration timeout);

 private:
  Cluster() = default;
  // Reads the workers' endpoint port files; false (with `error`) when one is missing.
  bool ReadWorkerPorts(const ClusterOptions& options, std::string* error);

  std::string dir_;
  int scheduler_metrics_port_ = 0;
  std::vector<int> worker_metrics_ports_;
  std::vector<int> worker_health_ports_;
  std::string address_;
  std::unique_ptr<ChildProcess> scheduler_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<pagoda::v1::Generation::Stub> stub_;
};

}  // namespace pagoda::testing
