// PrefixCache: one worker's index of full KV pages by content, and the LRU of the unreferenced
// ones (internal to KvCacheManager, which owns one per worker next to its BlockPool).
//
// Naming: a full page is named by a hash chain, hash = PageHash(parent, tokens), where
// `parent` is the previous page's hash, or ChainRoot(cache_salt) for a sequence's first page.
// Two sequences with the same salt and the same first k pages' tokens therefore name page k
// alike, and the KV in it (a function of the token prefix and the positions only) is the same.
// A hit is exact, not just a 64-bit match: Find compares the stored parent hash and page tokens.
//
// Contract and invariants:
//  * A page is named by at most one hash and a hash names at most one page.
//  * A named page's stored hash equals PageHash(stored parent, stored tokens).
//  * Only pages whose KV is written for all page_size positions are named (the caller's duty),
//    and a named page is never written again while named: holders only append past it.
//  * Parked pages (the LRU) are exactly the named pages that no block table holds; Evict takes
//    the least recently parked one and un-names it. Held pages are never parked.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

// The hash a sequence's first page chains from: distinct salts give disjoint caches.
uint64_t ChainRoot(std::string_view cache_salt);
// The name of a full page with these tokens after the page named `parent`.
uint64_t PageHash(uint64_t parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  explicit PrefixCache(int32_t num_pages);

  // The page named `hash` if its stored parent and tokens equal these, else nullopt.
  std::optional<PageId> Find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Names `page` (held, fully written). False, and no change, when the page is already named
  // or another page holds the same content (then the caller's page stays unnamed).
  bool Insert(PageId page, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);

  bool named(PageId page) const { return entries_[page].named; }
  bool parked(PageId page) const { return entries_[page].parked; }
  // The most recently used end of the LRU; the page must be named and not parked.
  void Park(PageId page);
  // Takes a parked page out of the LRU (a hit on it).
  void Unpark(PageId page);
  // Un-names the least recently parked page and returns it (ref count 0, for the free list or a
  // new holder); nullopt when nothing is parked.
  std::optional<PageId> Evict();
  // Un-names every page and empties the LRU; returns the pages that were parked.
  std::vector<PageId> Clear();

  int32_t num_named() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t num_parked() const { return num_parked_; }
  uint64_t hash(PageId page) const { return entries_[page].hash; }
  uint64_t parent(PageId page) const { return entries_[page].parent; }
  std::span<const int32_t> tokens(PageId page) const { return entries_[page].tokens; }
  // Pages in LRU order, oldest first (for invariant checks).
  std::vector<PageId> ParkedOldestFirst() const;

 private:
  struct Entry {
    bool named = false;
    bool parked = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    PageId prev = -1;  // LRU links, valid while parked
    PageId next = -1;
  };
  void Unlink(PageId page);

  std::vector<Entry> entries_;  // by page id
  absl::flat_hash_map<uint64_t, PageId> by_hash_;
  PageId oldest_ = -1;  // LRU head (evicted first)
  PageId newest_ = -1;  // LRU tail
  int32_t num_parked_ = 0;
};

}  // namespace pagoda::scheduler
