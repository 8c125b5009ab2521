// BlockPool: the KV pages of one worker, handed out as page ids with reference counts.
//
// Contract: a page is free (ref count 0) or owned (ref count >= 1). Today every owner is one
// sequence, so owned pages have ref count 1; the prefix cache will share pages by raising it.
// Release() of a free page aborts: a double free is a scheduler bug, never an input error.
// Invariant: num_free() + (pages with ref count > 0) == num_pages().
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_pages);

  int32_t num_pages() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // A free page with ref count 1, or nullopt when none is free.
  std::optional<PageId> Allocate();
  // Drops one reference to each page; pages reaching 0 return to the free list.
  void Release(const std::vector<PageId>& pages);

  int32_t ref_count(PageId page) const { return ref_counts_[page]; }

 private:
  std::vector<PageId> free_;         // LIFO: recently freed pages are reused first
  std::vector<int32_t> ref_counts_;  // by page id
};

}  // namespace pagoda::scheduler
