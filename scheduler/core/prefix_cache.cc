#include "scheduler/core/prefix_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace pagoda::scheduler {
namespace {

// splitmix64's finalizer: a cheap, well-mixing 64-bit permutation.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

[[noreturn]] void Die(const char* what, PageId page) {
  std::fprintf(stderr, "PrefixCache invariant violated: %s (page %d)\n", what, page);
  std::abort();
}

}  // namespace

uint64_t ChainRoot(std::string_view cache_salt) {
  uint64_t h = Mix(0x70a90da5a17ull ^ cache_salt.size());
  for (unsigned char c : cache_salt) h = Mix(h ^ c);
  return h;
}

uint64_t PageHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ (0x51ed27ull + tokens.size()));
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h;
}

PrefixCache::PrefixCache(int32_t num_pages) : entries_(num_pages) {}

std::optional<PageId> PrefixCache::Find(uint64_t hash, uint64_t parent,
                                        std::span<const int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Entry& e = entries_[it->second];
  if (e.parent != parent ||
      !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end())) {
    return std::nullopt;  // a 64-bit collision: not the same prefix
  }
  return it->second;
}

bool PrefixCache::Insert(PageId page, uint64_t hash, uint64_t parent,
                         std::span<const int32_t> tokens) {
  Entry& e = entries_[page];
  if (e.named || by_hash_.contains(hash)) return false;
  e.named = true;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, page);
  return true;
}

void PrefixCache::Park(PageId page) {
  Entry& e = entries_[page];
  if (!e.named || e.parked) Die("park of an unnamed or parked page", page);
  e.parked = true;
  e.prev = newest_;
  e.next = -1;
  if (newest_ >= 0) entries_[newest_].next = page;
  newest_ = page;
  if (oldest_ < 0) oldest_ = page;
  ++num_parked_;
}

void PrefixCache::Unlink(PageId page) {
  Entry& e = entries_[page];
  if (e.prev >= 0) {
    entries_[e.prev].next = e.next;
  } else {
    oldest_ = e.next;
  }
  if (e.next >= 0) {
    entries_[e.next].prev = e.prev;
  } else {
    newest_ = e.prev;
  }
  e.prev = e.next = -1;
  e.parked = false;
  --num_parked_;
}

void PrefixCache::Unpark(PageId page) {
  if (!entries_[page].parked) Die("unpark of a page not parked", page);
  Unlink(page);
}

std::optional<PageId> PrefixCache::Evict() {
  if (oldest_ < 0) return std::nullopt;
  const PageId page = oldest_;
  Unlink(page);
  Entry& e = entries_[page];
  by_hash_.erase(e.hash);
  e.named = false;
  e.tokens.clear();
  return page;
}

std::vector<PageId> PrefixCache::Clear() {
  std::vector<PageId> parked;
  while (std::optional<PageId> page = Evict()) parked.push_back(*page);
  for (auto& [hash, page] : by_hash_) {
    entries_[page].named = false;
    entries_[page].tokens.clear();
  }
  by_hash_.clear();
  return parked;
}

std::vector<PageId> PrefixCache::ParkedOldestFirst() const {
  std::vector<PageId> out;
  for (PageId p = oldest_; p >= 0; p = entries_[p].next) out.push_back(p);
  return out;
}

}  // namespace pagoda::scheduler
