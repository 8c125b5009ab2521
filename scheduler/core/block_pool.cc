#include "scheduler/core/block_pool.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda::scheduler {

BlockPool::BlockPool(int32_t num_pages)
    : ref_counts_(num_pages, 0), on_free_list_(num_pages, true) {
  free_.reserve(num_pages);
  // Highest id at the bottom so pages are handed out in increasing order.
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

void BlockPool::Die(const char* what, PageId page) {
  std::fprintf(stderr, "BlockPool invariant violated: %s of page %d\n", what, page);
  std::abort();
}

void BlockPool::Check(PageId page, const char* what) const {
  if (page < 0 || page >= num_pages()) Die(what, page);
}

std::optional<PageId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  PageId page = free_.back();
  free_.pop_back();
  on_free_list_[page] = false;
  ref_counts_[page] = 1;
  return page;
}

void BlockPool::AddRef(PageId page) {
  Check(page, "reference");
  if (on_free_list_[page]) Die("reference to free page", page);
  ++ref_counts_[page];
}

bool BlockPool::DropRef(PageId page) {
  Check(page, "release");
  if (ref_counts_[page] <= 0) Die("release of free page", page);
  return --ref_counts_[page] == 0;
}

void BlockPool::Free(PageId page) {
  Check(page, "free");
  if (ref_counts_[page] != 0 || on_free_list_[page]) Die("free of held or free page", page);
  on_free_list_[page] = true;
  free_.push_back(page);
}

void BlockPool::Release(const std::vector<PageId>& pages) {
  for (PageId page : pages) {
    if (DropRef(page)) Free(page);
  }
}

}  // namespace pagoda::scheduler
