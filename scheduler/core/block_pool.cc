#include "scheduler/core/block_pool.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda::scheduler {

BlockPool::BlockPool(int32_t num_pages) : ref_counts_(num_pages, 0) {
  free_.reserve(num_pages);
  // Highest id at the bottom so pages are handed out in increasing order.
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<PageId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  PageId page = free_.back();
  free_.pop_back();
  ref_counts_[page] = 1;
  return page;
}

void BlockPool::Release(const std::vector<PageId>& pages) {
  for (PageId page : pages) {
    if (page < 0 || page >= num_pages() || ref_counts_[page] <= 0) {
      std::fprintf(stderr, "BlockPool invariant violated: release of free page %d\n", page);
      std::abort();
    }
    if (--ref_counts_[page] == 0) free_.push_back(page);
  }
}

}  // namespace pagoda::scheduler
