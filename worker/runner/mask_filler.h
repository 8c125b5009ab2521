// MaskFiller: runs the per-row work of a plan's constrained samples (feeding each matcher its
// new tokens, then filling its mask) on helper threads while the forward pass runs.
//
// Contract:
//  * Start(n, fill) sets rows 0..n-1 out; the first Wait() wakes the helper threads, which
//    claim rows one at a time and call fill(row), and runs rows on the caller's thread too,
//    then returns once fill has returned for every row. `fill` must be safe to call on several
//    threads at once for different rows, and what it touches must be left alone by everyone
//    else until Wait returns. Helpers are woken only in Wait, when the caller starts on the
//    rows itself: a helper woken earlier, on a busy machine, would take the caller's core
//    while it still prepares the forward pass that the rows are meant to overlap.
//  * The runner's rows are independent (a row's mask depends on its own matcher alone, and
//    TokenMatcher::FillMask is exact and safe on several threads at once), so the masks, and
//    the tokens sampled with them, are the same whichever thread runs which row.
//  * One caller (the runner's thread) calls Start and Wait; Start only after the previous
//    set's Wait returned. Helpers sleep between sets; a set of one row or none wakes none.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/backend/backend.h"

namespace pagoda::worker {

class MaskFiller final : public PendingMasks {
 public:
  // `helpers` threads (0: Wait runs every row on the caller's thread).
  explicit MaskFiller(int helpers);
  ~MaskFiller();
  MaskFiller(const MaskFiller&) = delete;
  MaskFiller& operator=(const MaskFiller&) = delete;

  void Start(size_t rows, std::function<void(size_t row)> fill);
  void Wait() override;

 private:
  // One Start's rows. Helpers hold it while they claim rows, so a late helper only ever
  // touches its counters, never a later set's work.
  struct Set {
    size_t rows = 0;
    std::function<void(size_t)> fill;
    std::atomic<size_t> next{0};  // the next unclaimed row
    std::atomic<size_t> done{0};  // rows finished
  };
  // Claims and runs rows of `set` until none is left.
  void Run(Set& set);
  void HelperLoop();

  absl::Mutex mu_;
  absl::CondVar wake_;      // a new set, or stop
  absl::CondVar finished_;  // the current set's last row finished
  std::shared_ptr<Set> set_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // of the sets helpers were woken for
  bool woken_ ABSL_GUARDED_BY(mu_) = false;       // for set_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace pagoda::worker
