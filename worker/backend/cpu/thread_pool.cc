#include "worker/backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace pagoda::worker::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : size_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < size_; ++i) helpers_.emplace_back([this, i] { HelperLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
    wake_.SignalAll();
  }
  for (std::thread& t : helpers_) t.join();
}

void ThreadPool::RunParts(int thread) {
  const int n = job_n_, grain = job_grain_;
  for (;;) {
    const int begin = next_.fetch_add(grain, std::memory_order_relaxed);
    if (begin >= n) return;
    (*job_)(begin, std::min(n, begin + grain), thread);
  }
}

bool ThreadPool::WaitForWork(uint64_t* seen) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int spins = 0;; ++spins) {
    if (generation_.load(std::memory_order_acquire) != *seen) break;
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() > deadline) {
      absl::MutexLock lock(&mu_);
      while (generation_.load(std::memory_order_acquire) == *seen && !stop_) {
        ++sleepers_;
        wake_.Wait(&mu_);
        --sleepers_;
      }
      break;
    }
    CpuRelax();
  }
  *seen = generation_.load(std::memory_order_acquire);
  return !stop_.load(std::memory_order_acquire);
}

void ThreadPool::HelperLoop(int thread) {
  uint64_t seen = 0;
  while (WaitForWork(&seen)) {
    RunParts(thread);
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int n, absl::FunctionRef<void(int, int, int)> fn) {
  if (n <= 0) return;
  if (size_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = std::max(1, n / (size_ * kPartsPerThread));
  next_.store(0, std::memory_order_relaxed);
  remaining_.store(size_ - 1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) wake_.SignalAll();
  }
  RunParts(0);
  for (int spins = 0; remaining_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

}  // namespace pagoda::worker::cpu
