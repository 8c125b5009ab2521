// BlockPool: the KV pages of one worker, handed out as page ids.
//
// Contract: a page is either free or owned by exactly one sequence; Free() of a page that is not
// allocated aborts. Reservations let admission promise pages that a sequence will take later,
// so a running sequence never finds the pool empty (the skeleton's substitute for preemption).
// Invariant: num_free() == num_pages() - allocated, and reserved() <= num_free().
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_pages);

  int32_t num_pages() const { return static_cast<int32_t>(allocated_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t reserved() const { return reserved_; }
  // Pages neither allocated nor promised.
  int32_t available() const { return num_free() - reserved_; }

  // Promises `n` pages for later Take(); nullopt-like false when not available.
  bool Reserve(int32_t n);
  // Gives back `n` promised pages that will not be taken.
  void Unreserve(int32_t n);
  // Takes one previously reserved page.
  PageId TakeReserved();
  // Returns pages to the free list.
  void Free(const std::vector<PageId>& pages);

  bool IsAllocated(PageId page) const { return allocated_[page]; }

 private:
  std::vector<PageId> free_;     // LIFO free list
  std::vector<bool> allocated_;  // by page id
  int32_t reserved_ = 0;
};

}  // namespace pagoda::scheduler
