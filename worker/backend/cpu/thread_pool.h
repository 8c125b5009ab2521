// A persistent pool of worker threads for the CPU backend's parallel loops (replaces OpenMP).
//
// Contract: ParallelFor(n, fn) splits [0, n) into about kPartsPerThread * size() contiguous
// parts, which the threads (thread 0 is the caller) claim one at a time as they come free, and
// returns when every part is done; fn(begin, end, thread) is never called with an empty range,
// and no two calls running at once have the same `thread` (per-thread scratch is safe). Which
// thread runs which part depends on timing, so a thread that the OS preempts (a scheduler or a
// client on the same cores) delays a loop by one part, not by a whole share; fn must compute
// each index the same way whichever thread and part run it (the kernels do: results do not
// depend on the split). One ParallelFor at a time (the backend's single caller). Between calls,
// helper threads spin for at most kSpinMicros (a forward pass issues its loops back to back) and
// then sleep on a condition variable, so idle workers on shared cores cost nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace pagoda::worker::cpu {

class ThreadPool {
 public:
  static constexpr int kSpinMicros = 50;
  static constexpr int kPartsPerThread = 4;

  explicit ThreadPool(int num_threads);  // >= 1; starts num_threads - 1 helpers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  void ParallelFor(int n, absl::FunctionRef<void(int begin, int end, int thread)> fn);

 private:
  void HelperLoop(int thread);
  void RunParts(int thread);         // claims and runs parts of the current job until none is left
  bool WaitForWork(uint64_t* seen);  // false when stopping

  const int size_;
  std::vector<std::thread> helpers_;
  // The current job: written by the caller before `generation_` is bumped (release), read by
  // helpers after they observe the bump (acquire).
  const absl::FunctionRef<void(int, int, int)>* job_ = nullptr;
  int job_n_ = 0;
  int job_grain_ = 1;         // indices per part
  std::atomic<int> next_{0};  // first index of the next unclaimed part
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  absl::Mutex mu_;
  absl::CondVar wake_;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};  // written under mu_, read anywhere
};

}  // namespace pagoda::worker::cpu
