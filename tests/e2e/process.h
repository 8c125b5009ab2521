// ChildProcess: runs a binary as a separate process for end-to-end tests.
//
// stdout and stderr go to a log file so a failing test can print them. The destructor kills
// (SIGKILL) and reaps a process that is still running, so no test leaves a process behind.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace pagoda::testing {

class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, std::string log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Start();
  void Signal(int sig);
  // Waits for exit; returns the exit code (128 + signal when killed), nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);
  bool Running();
  std::string Log() const;
  // Polls the log until it holds `text` (a line another thread of the process may still be
  // writing); returns the log from `text` on, or nullopt after `timeout`.
  std::optional<std::string> WaitForLog(std::string_view text, absl::Duration timeout) const;
  pid_t pid() const { return pid_; }

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace pagoda::testing
