#include "worker/runner/mask_filler.h"

#include <utility>

namespace pagoda::worker {

MaskFiller::MaskFiller(int helpers) {
  for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

MaskFiller::~MaskFiller() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  for (std::thread& t : helpers_) t.join();
}

void MaskFiller::Start(size_t rows, std::function<void(size_t row)> fill) {
  std::shared_ptr<Set> set;
  if (rows > 0) {
    set = std::make_shared<Set>();
    set->rows = rows;
    set->fill = std::move(fill);
  }
  absl::MutexLock lock(&mu_);
  set_ = std::move(set);
  woken_ = false;
}

void MaskFiller::Run(Set& set) {
  for (size_t i = set.next.fetch_add(1, std::memory_order_relaxed); i < set.rows;
       i = set.next.fetch_add(1, std::memory_order_relaxed)) {
    set.fill(i);
    // Release: the row's writes happen before a Wait that sees the count.
    if (set.done.fetch_add(1, std::memory_order_acq_rel) + 1 == set.rows) {
      absl::MutexLock lock(&mu_);  // so that Wait cannot miss the signal
      finished_.SignalAll();
    }
  }
}

void MaskFiller::Wait() {
  std::shared_ptr<Set> set;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    set = set_;
    if (set == nullptr) return;
    // One row is the caller's own: waking a helper for it would only cost a switch.
    if (!woken_ && set->rows > 1 && !helpers_.empty()) {
      woken_ = true;
      ++generation_;
      wake = true;
    }
  }
  if (wake) wake_.SignalAll();
  Run(*set);
  absl::MutexLock lock(&mu_);
  while (set->done.load(std::memory_order_acquire) < set->rows) finished_.Wait(&mu_);
}

void MaskFiller::HelperLoop() {
  uint64_t seen = 0;
  while (true) {
    std::shared_ptr<Set> set;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && generation_ == seen) wake_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
      set = set_;  // null when a set of no rows has replaced the one that woke it
    }
    if (set != nullptr) Run(*set);
  }
}

}  // namespace pagoda::worker
