#include "tests/e2e/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/clock.h"

namespace pagoda::testing {

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string log_path)
    : argv_(std::move(argv)), log_path_(std::move(log_path)) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
}

bool ChildProcess::Start() {
  std::vector<char*> args;
  for (std::string& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  // The environment is built before fork: between fork and exec only async-signal-safe calls
  // are allowed. Under the sanitizer tier, PAGODA_CHILD_TSAN_OPTIONS becomes the processes'
  // TSAN_OPTIONS: the scheduler and workers are what the tier checks, while the test client
  // (its gRPC calls hand messages between gRPC's threads, which TSan cannot order in Debian's
  // uninstrumented gRPC) runs with settings of its own.
  std::vector<std::string> env;
  const char* child_tsan = getenv("PAGODA_CHILD_TSAN_OPTIONS");
  for (char** e = environ; *e != nullptr; ++e) {
    if (child_tsan != nullptr && std::string_view(*e).starts_with("TSAN_OPTIONS=")) continue;
    env.emplace_back(*e);
  }
  if (child_tsan != nullptr) env.push_back(std::string("TSAN_OPTIONS=") + child_tsan);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    // The test binary may block signals; the child must start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  return true;
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !exit_code_) kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  if (exit_code_ || pid_ <= 0) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

bool ChildProcess::Running() { return pid_ > 0 && !Wait(absl::ZeroDuration()).has_value(); }

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> ChildProcess::WaitForLog(std::string_view text,
                                                    absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const std::string log = Log();
    if (const size_t at = log.find(text); at != std::string::npos) return log.substr(at);
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace pagoda::testing
