#include "tests/e2e/cluster.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/test_models.h"

namespace pagoda::testing {

std::string MakeTempDir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(tmp ? tmp : "/tmp") / absl::StrCat("pagoda-e2e-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

namespace {

std::string ReadPort(const std::string& path, ChildProcess& scheduler) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(path);
    std::string port;
    if (in >> port) return port;
    if (!scheduler.Running()) return "";
    absl::SleepFor(absl::Milliseconds(20));
  }
  return "";
}

}  // namespace

std::unique_ptr<Cluster> Cluster::Start(const ClusterOptions& options, std::string* error) {
  static int counter = 0;
  // CPU workers parallelize with OpenMP, whose threads spin between parallel regions. Tests
  // run several clusters at once on few cores, where spinning workers starve each other (a
  // 0.4 s test took minutes): let idle threads sleep. Inherited by the children; a value the
  // caller set wins.
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  std::unique_ptr<Cluster> c(new Cluster());
  c->dir_ = MakeTempDir(absl::StrCat("cluster", counter++));
  const std::string bin = BinDir();
  std::vector<std::string> sargs = {
      bin + "/pagoda-scheduler", "--listen", "127.0.0.1:0", "--port-file",
      c->dir_ + "/port",         "--model",  options.model};
  sargs.insert(sargs.end(), options.scheduler_flags.begin(), options.scheduler_flags.end());
  c->scheduler_ = std::make_unique<ChildProcess>(sargs, c->dir_ + "/scheduler.log");
  if (!c->scheduler_->Start()) {
    *error = "cannot fork the scheduler";
    return nullptr;
  }
  const std::string port = ReadPort(c->dir_ + "/port", *c->scheduler_);
  if (port.empty()) {
    *error = "the scheduler did not start:\n" + c->Logs();
    return nullptr;
  }
  c->address_ = "127.0.0.1:" + port;
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> wargs = {bin + "/pagoda-worker", "--scheduler", c->address_, "--model",
                                      options.model,          "--backend",   "cpu",       "--name",
                                      absl::StrCat("w", i)};
    wargs.insert(wargs.end(), options.worker_flags.begin(), options.worker_flags.end());
    c->workers_.push_back(
        std::make_unique<ChildProcess>(wargs, absl::StrCat(c->dir_, "/worker", i, ".log")));
    c->workers_.back()->Start();
  }
  c->stub_ = pagoda::v1::Generation::NewStub(
      grpc::CreateChannel(c->address_, grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 1500; ++i) {
    if (static_cast<int>(c->Status().workers_size()) == options.workers) return c;
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
    g.text += resp.text();
    if (resp.has_finished()) g.finished = resp.finished();
  }
  g.status = reader->Finish();
  return g;
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
