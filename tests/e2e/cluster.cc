#include "tests/e2e/cluster.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/test_models.h"

namespace pagoda::testing {

std::string MakeTempDir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(tmp ? tmp : "/tmp") / absl::StrCat("pagoda-e2e-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

int ReadPortFile(const std::string& path, ChildProcess& process) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port) return port;
    if (!process.Running()) return 0;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

int CheckHealth(const std::string& address, const std::string& service) {
  // The health proto is not shipped with Debian's grpc++: its two tiny messages are written by
  // hand and sent through a generic stub.
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

namespace {

// A connected TCP socket to 127.0.0.1:`port`, or -1.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int HttpGet(const std::string& host_port, const std::string& path, std::string* body) {
  const std::vector<std::string> parts = absl::StrSplit(host_port, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) return -1;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  // HTTP/1.0: the server closes the connection after the body, with no chunked encoding.
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  std::string response;
  char buf[16384];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, n);
  close(fd);
  // "HTTP/1.x 200 OK\r\n...headers...\r\n\r\nbody"
  const size_t header_end = response.find("\r\n\r\n");
  int code = 0;
  if (header_end == std::string::npos || response.size() < 12 ||
      !absl::SimpleAtoi(response.substr(9, 3), &code)) {
    return -1;
  }
  *body = response.substr(header_end + 4);
  return code;
}

int64_t ResidentKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    // "VmRSS:\t   12345 kB"
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    int64_t kib = -1;
    const std::vector<absl::string_view> parts =
        absl::StrSplit(line.substr(6), ' ', absl::SkipWhitespace());
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kib)) return kib;
  }
  return -1;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::unique_ptr<Cluster> Cluster::Start(const ClusterOptions& options, std::string* error) {
  static int counter = 0;
  std::unique_ptr<Cluster> c(new Cluster());
  c->dir_ = MakeTempDir(absl::StrCat("cluster", counter++));
  const std::string bin = BinDir();
  std::vector<std::string> sargs = {
      bin + "/pagoda-scheduler", "--listen", "127.0.0.1:0", "--port-file",
      c->dir_ + "/port",         "--model",  options.model};
  if (options.metrics) {
    sargs.insert(sargs.end(), {"--metrics-listen", "127.0.0.1:0", "--metrics-port-file",
                               c->dir_ + "/metrics-port"});
  }
  sargs.insert(sargs.end(), options.scheduler_flags.begin(), options.scheduler_flags.end());
  c->scheduler_ = std::make_unique<ChildProcess>(sargs, c->dir_ + "/scheduler.log");
  if (!c->scheduler_->Start()) {
    *error = "cannot fork the scheduler";
    return nullptr;
  }
  const int port = ReadPortFile(c->dir_ + "/port", *c->scheduler_);
  if (port == 0) {
    *error = "the scheduler did not start:\n" + c->Logs();
    return nullptr;
  }
  c->address_ = absl::StrCat("127.0.0.1:", port);
  if (options.metrics) {
    // Written before --port-file.
    c->scheduler_metrics_port_ = ReadPortFile(c->dir_ + "/metrics-port", *c->scheduler_);
  }
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> wargs = {bin + "/pagoda-worker", "--scheduler", c->address_, "--model",
                                      options.model,          "--backend",   "cpu",       "--name",
                                      absl::StrCat("w", i)};
    if (options.metrics) {
      wargs.insert(wargs.end(), {"--metrics-listen", "127.0.0.1:0", "--metrics-port-file",
                                 absl::StrCat(c->dir_, "/worker", i, ".metrics-port")});
    }
    if (options.worker_health) {
      wargs.insert(wargs.end(), {"--health-listen", "127.0.0.1:0", "--health-port-file",
                                 absl::StrCat(c->dir_, "/worker", i, ".health-port")});
    }
    wargs.insert(wargs.end(), options.worker_flags.begin(), options.worker_flags.end());
    c->workers_.push_back(
        std::make_unique<ChildProcess>(wargs, absl::StrCat(c->dir_, "/worker", i, ".log")));
    c->workers_.back()->Start();
  }
  c->stub_ = pagoda::v1::Generation::NewStub(grpc::CreateChannel(
      c->address_, options.credentials ? options.credentials : grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 1500; ++i) {
    if (static_cast<int>(c->Status().workers_size()) == options.workers) {
      return c->ReadWorkerPorts(options, error) ? std::move(c) : nullptr;
    }
    for (auto& w : c->workers_) {
      if (!w->Running()) {
        *error = "a worker exited:\n" + c->Logs();
        return nullptr;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  *error = "workers did not attach in 30 s:\n" + c->Logs();
  return nullptr;
}

bool Cluster::ReadWorkerPorts(const ClusterOptions& options, std::string* error) {
  for (int i = 0; i < options.workers; ++i) {
    // Both files are written before the worker loads its model, so they exist by now.
    const int metrics =
        options.metrics
            ? ReadPortFile(absl::StrCat(dir_, "/worker", i, ".metrics-port"), *workers_[i])
            : 0;
    const int health =
        options.worker_health
            ? ReadPortFile(absl::StrCat(dir_, "/worker", i, ".health-port"), *workers_[i])
            : 0;
    if ((options.metrics && metrics == 0) || (options.worker_health && health == 0)) {
      *error = absl::StrCat("worker ", i, " reported no metrics or health port:\n", Logs());
      return false;
    }
    worker_metrics_ports_.push_back(metrics);
    worker_health_ports_.push_back(health);
  }
  if (options.metrics && scheduler_metrics_port_ == 0) {
    *error = "the scheduler reported no metrics port:\n" + Logs();
    return false;
  }
  return true;
}

Cluster::~Cluster() {
  stub_.reset();  // close our connection first: the scheduler's shutdown waits for open calls
  for (auto& w : workers_) w->Signal(SIGTERM);
  if (scheduler_) scheduler_->Signal(SIGTERM);
  for (auto& w : workers_) w->Wait(absl::Seconds(10));
  if (scheduler_) scheduler_->Wait(absl::Seconds(10));
}

std::string Cluster::Logs() const {
  std::string out = "--- scheduler ---\n" + scheduler_->Log();
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "--- worker ", i, " ---\n", workers_[i]->Log());
  }
  return out;
}

bool MakeRandomModel(const std::string& path, const std::vector<std::string>& shape,
                     std::string* error) {
  std::vector<std::string> args = {BinDir() + "/pagoda-make-model", "--output", path};
  args.insert(args.end(), shape.begin(), shape.end());
  ChildProcess make(args, path + ".log");
  if (!make.Start() || make.Wait(absl::Seconds(60)) != 0) {
    *error = "pagoda-make-model failed:\n" + make.Log();
    return false;
  }
  return true;
}

Generation Cluster::Generate(const pagoda::v1::GenerateRequest& request, absl::Duration timeout) {
  Generation g;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub_->Generate(&ctx, request);
  pagoda::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    ++g.messages;
    g.tokens.insert(g.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    g.logprobs.insert(g.logprobs.end(), resp.logprobs().begin(), resp.logprobs().end());
    g.text += resp.text();
    if (resp.has_finished()) g.finished = resp.finished();
  }
  g.status = reader->Finish();
  return g;
}

std::vector<Generation> Cluster::GenerateAll(
    const std::vector<pagoda::v1::GenerateRequest>& requests) {
  std::vector<Generation> results(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Generate(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

pagoda::v1::ServerStatus Cluster::Status() {
  pagoda::v1::ServerStatus status;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  stub_->GetServerStatus(&ctx, pagoda::v1::GetServerStatusRequest(), &status);
  return status;
}

bool Cluster::WaitIdleAndFree(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    pagoda::v1::ServerStatus s = Status();
    bool free = s.requests_running() == 0 && s.requests_waiting() == 0;
    for (const auto& w : s.workers()) free = free && w.kv_pages_free() == w.kv_pages_total();
    if (free) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

}  // namespace pagoda::testing
