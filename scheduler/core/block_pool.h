// BlockPool: the KV pages of one worker, handed out as page ids with reference counts.
//
// Contract: a page is free (on the free list, ref count 0), held (ref count >= 1: the number of
// block tables that list it) or parked (ref count 0, off the free list: an unreferenced page the
// prefix cache keeps for reuse). The pool knows only counts and the free list; KvCacheManager
// decides whether a page whose last reference went away is freed or parked.
// Misuse (a reference to a free page, dropping a reference nobody holds, freeing a held page)
// aborts: it is a scheduler bug, never an input error.
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
  // One more holder of a held or parked page (a prefix-cache hit).
  void AddRef(PageId page);
  // Drops one reference; true when none is left (the caller then frees or parks the page).
  bool DropRef(PageId page);
  // Returns an unreferenced page to the free list.
  void Free(PageId page);
  // DropRef and Free for each page: for pages the prefix cache never names.
  void Release(const std::vector<PageId>& pages);

  int32_t ref_count(PageId page) const { return ref_counts_[page]; }
  bool is_free(PageId page) const { return on_free_list_[page]; }

 private:
  [[noreturn]] static void Die(const char* what, PageId page);
  void Check(PageId page, const char* what) const;

  std::vector<PageId> free_;         // LIFO: recently freed pages are reused first
  std::vector<int32_t> ref_counts_;  // by page id
  std::vector<bool> on_free_list_;   // by page id
};

}  // namespace pagoda::scheduler
