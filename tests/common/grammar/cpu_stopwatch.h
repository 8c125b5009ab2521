// CpuStopwatch: the CPU time the calling thread has used since construction. The grammar tests
// bound how long a hostile input may take to be refused or compiled (an exponential blow-up would
// take minutes, not seconds); the thread's CPU time, unlike the wall clock, does not grow while
// other processes load the machine (a CI running sanitizer builds beside other jobs).
#pragma once

#include <time.h>

#include <chrono>

namespace pagoda::grammar::testing {

class CpuStopwatch {
 public:
  CpuStopwatch() : start_(Now()) {}
  std::chrono::nanoseconds Elapsed() const { return Now() - start_; }

 private:
  static std::chrono::nanoseconds Now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }
  std::chrono::nanoseconds start_;
};

}  // namespace pagoda::grammar::testing
