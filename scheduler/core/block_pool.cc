#include "scheduler/core/block_pool.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda::scheduler {
namespace {

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "BlockPool invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

BlockPool::BlockPool(int32_t num_pages) : allocated_(num_pages, false) {
  free_.reserve(num_pages);
  // Highest id at the bottom so pages are handed out in increasing order.
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

bool BlockPool::Reserve(int32_t n) {
  Check(n >= 0, "negative reservation");
  if (n > available()) return false;
  reserved_ += n;
  return true;
}

void BlockPool::Unreserve(int32_t n) {
  Check(n >= 0 && n <= reserved_, "unreserve more than reserved");
  reserved_ -= n;
}

PageId BlockPool::TakeReserved() {
  Check(reserved_ > 0 && !free_.empty(), "take without reservation");
  --reserved_;
  PageId page = free_.back();
  free_.pop_back();
  allocated_[page] = true;
  return page;
}

void BlockPool::Free(const std::vector<PageId>& pages) {
  for (PageId page : pages) {
    Check(page >= 0 && page < num_pages() && allocated_[page], "free of a page not allocated");
    allocated_[page] = false;
    free_.push_back(page);
  }
}

}  // namespace pagoda::scheduler
