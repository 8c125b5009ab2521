// A persistent pool of worker threads for the CPU backend's parallel loops (replaces OpenMP).
//
// Contract: ParallelFor(n, fn) splits [0, n) into size() contiguous parts, runs part i on thread
// i (thread 0 is the caller) and returns when every part is done; fn(begin, end, thread) is
// never called with an empty range. The split depends only on n and size(), never on timing.
// One ParallelFor at a time (the backend's single caller). Between calls, helper threads spin
// for at most kSpinMicros (a forward pass issues its loops back to back) and then sleep on a
// condition variable, so idle workers on shared cores cost nothing.
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

  explicit ThreadPool(int num_threads);  // >= 1; starts num_threads - 1 helpers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  void ParallelFor(int n, absl::FunctionRef<void(int begin, int end, int thread)> fn);

 private:
  void HelperLoop(int thread);
  void RunPart(int thread);
  bool WaitForWork(uint64_t* seen);  // false when stopping

  const int size_;
  std::vector<std::thread> helpers_;
  // The current job: written by the caller before `generation_` is bumped (release), read by
  // helpers after they observe the bump (acquire).
  const absl::FunctionRef<void(int, int, int)>* job_ = nullptr;
  int job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  absl::Mutex mu_;
  absl::CondVar wake_;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};  // written under mu_, read anywhere
};

}  // namespace pagoda::worker::cpu
