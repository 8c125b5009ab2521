// KvCacheManager: the one owner of KV state in the scheduler core. Per attached worker it owns
// the page pool (BlockPool) and the prefix cache (PrefixCache); per running sequence, its block
// table. Ownership reads Scheduler -> KvCacheManager -> BlockPool/PrefixCache: the Scheduler
// asks for pages (Open, Grow) and gives them back (Release), and never edits a table itself.
//
// Life of a sequence's table: Open on admission takes the longest cached run of full pages of
// its tokens (at most up to the page before the last token, which is always computed so that
// there are logits to sample); Grow appends pages as positions are scheduled; Commit names the
// full pages whose KV the worker has confirmed, so later sequences can hit them; Release drops
// the table (finish, cancel, preemption), parking named pages for reuse and freeing the rest.
// Open also announces the full pages the table will compute from known tokens; Lookup reports
// them to later requests (PrefixHit::computing_tokens) until Commit or Release withdraws them,
// so that a request can wait for a prefix in progress instead of computing it a second time.
//
// Invariants (CheckInvariants, run after every step by the randomized tests):
//  * Every page of a worker is exactly one of: free, parked (named, ref count 0, in the LRU) or
//    held (ref count == the number of block tables listing it). free + parked + held == pages.
//  * A held page is never parked, evicted or handed out again: Allocate only takes free pages,
//    and eviction only takes parked ones.
//  * A named page's hash is PageHash(parent, tokens) of what it stores, and a holder whose table
//    lists a named page at index k has exactly those tokens at positions [k*P, (k+1)*P) after
//    the chain of its first k pages.
//  * Pages are never named before the worker confirmed their KV (Commit), and a named page is
//    never written again: holders only write past their last full page.
//  * Space: Grow evicts parked pages (least recently used first) before it reports that it
//    cannot cover; the Scheduler preempts only after that, so eviction always comes first.
//  * A removed worker takes its tables and its cache with it. When no sequence runs, every page
//    is free or parked.
// With prefix caching off nothing is named: released pages go straight back to the free list.
//
// Swap space (swap preemption): a worker may have host swap slots, one page each. SwapOut copies
// the pages of a table that hold its computed positions to free slots and releases the table as
// Release does; the sequence then holds slots and no page. SwapIn gives it a new table of fresh
// pages on the same worker, filled from its slots. The copies are returned for the plan: the
// worker executes swap-outs before anything else in a plan and swap-ins after its frees, so a
// page swapped out may be handed out again in the same plan. A slot freed by a swap-in is not
// handed out again before EndPlan (the plan's swap-outs run first and would overwrite it).
// Swap invariants: free + used + releasing slots == the swap space; a swapped sequence has no
// table; each used slot belongs to exactly one swapped sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/core/block_pool.h"
#include "scheduler/core/prefix_cache.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

// What a worker's cache holds for one token sequence.
struct PrefixHit {
  int32_t tokens = 0;        // cached tokens usable (full pages, never the last token)
  int32_t parked_pages = 0;  // of the hit pages, those parked (taking them removes them from
                             // the worker's available pages)
  // Tokens right after the hit that a running sequence on the worker is computing now (its
  // prompt pages not yet confirmed): waiting for them beats computing them twice.
  int32_t computing_tokens = 0;
};

// A worker's page accounting (free + parked + held == total).
struct KvUsage {
  int32_t total = 0;
  int32_t free = 0;
  int32_t parked = 0;  // unreferenced cached pages, reusable by hits, evictable
  int32_t held = 0;    // listed by at least one block table
  int32_t named = 0;   // cached pages, held or parked
};

class KvCacheManager {
 public:
  explicit KvCacheManager(bool enable_prefix_caching);
  ~KvCacheManager();

  bool prefix_caching() const { return enable_prefix_caching_; }

  void AddWorker(WorkerId worker, int32_t num_pages, int32_t page_size, int32_t num_swap_pages = 0);
  // Drops the worker's pool, cache and every table on it.
  void RemoveWorker(WorkerId worker);

  // What `worker` has cached for `tokens` (no side effect). `seq` keys a memo of the hash
  // chain, which grows with the tokens; Forget(seq) drops it.
  PrefixHit Lookup(WorkerId worker, RequestId seq, const std::vector<int32_t>& tokens,
                   const std::string& salt);
  // Pages Grow could hand out now: free + parked.
  int32_t AvailablePages(WorkerId worker) const;

  // Creates `seq`'s block table on `worker` with the pages of Lookup's hit (which it counts in
  // the query and hit statistics); returns the cached tokens. `seq` must have no table.
  int32_t Open(WorkerId worker, RequestId seq, const std::vector<int32_t>& tokens,
               const std::string& salt);
  // Extends the table to cover `positions`, evicting parked pages (LRU) when the free list is
  // empty. False, with no change, when the worker cannot cover it.
  bool Grow(RequestId seq, int32_t positions);
  // The worker has KV for positions [0, num_computed) of `tokens`: names the full pages among
  // them (a no-op with caching off).
  void Commit(RequestId seq, const std::vector<int32_t>& tokens, int32_t num_computed);
  // n > 1: gives `child` (which has no table) the KV of `parent`'s positions [0, positions) on
  // the same worker: whole pages are shared (their ref counts rise); a partial last page, which
  // the child will write into, is copied into a page of its own (copy on write), returned for
  // the worker to execute before the child's first step. nullopt, with no change, when no page
  // is available for the copy.
  std::optional<std::optional<PageCopy>> Fork(RequestId parent, RequestId child, int32_t positions);
  // Drops the table; its named pages with no other holder are parked, tail pages first (so a
  // prefix outlives its continuations), the others freed.
  void Release(RequestId seq);
  // Release, and drops the hash memo: the request is gone for good.
  void Forget(RequestId seq);

  // Swap space (see above). SwapOut: nullopt, with no change, when the worker has fewer free
  // slots than pages to save. SwapIn: nullopt, with no change, when it has fewer available
  // pages than the sequence swapped out.
  std::optional<std::vector<SwapCopy>> SwapOut(RequestId seq, int32_t positions);
  std::optional<std::vector<SwapCopy>> SwapIn(RequestId seq);
  // Frees the slots of a swapped sequence that will never be swapped in (finished, cancelled).
  void DropSwapped(RequestId seq);
  // The plan being built for `worker` is complete: slots freed by its swap-ins may be reused.
  void EndPlan(WorkerId worker);
  bool swapped(RequestId seq) const { return swapped_.contains(seq); }
  int32_t swapped_pages(RequestId seq) const;
  int32_t free_swap_slots(WorkerId worker) const;
  int32_t swap_slots(WorkerId worker) const;

  bool has_table(RequestId seq) const { return tables_.contains(seq); }
  const std::vector<PageId>& pages(RequestId seq) const;
  int32_t page_size(WorkerId worker) const;
  KvUsage usage(WorkerId worker) const;
  const BlockPool* pool(WorkerId worker) const;

  // Prefix-cache statistics (vLLM's meanings): tokens looked up at admissions, and those hit.
  int64_t queried_tokens() const { return queried_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

  // Checks the invariants above; `tokens_of(seq)` gives the known tokens of a sequence that
  // has a table. Returns a description of the first violation, or OK.
  absl::Status CheckInvariants(
      const std::function<const std::vector<int32_t>*(RequestId)>& tokens_of) const;

 private:
  struct Worker;
  struct Table {
    WorkerId worker = 0;
    std::string salt;
    std::vector<PageId> pages;
    int32_t committed = 0;  // leading pages already offered to the cache
    // Hashes of the full pages [committed, committed + size) this table will compute (known
    // tokens), announced in the worker's `computing` map until committed or released.
    std::vector<uint64_t> computing;
  };
  struct Swapped {
    WorkerId worker = 0;
    std::string salt;
    std::vector<int32_t> slots;  // slot k holds page k of the table it was swapped out of
  };
  struct Chain {  // memo of a sequence's page hashes for one page size
    int32_t page_size = 0;
    std::string salt;
    std::vector<uint64_t> hashes;  // of full pages, in order
  };

  Worker& worker(WorkerId id) const;
  absl::Status CheckSwapInvariants() const;
  const std::vector<uint64_t>& HashesFor(RequestId seq, const std::vector<int32_t>& tokens,
                                         const std::string& salt, int32_t page_size,
                                         int32_t num_pages);
  std::vector<PageId> FindRun(Worker& w, RequestId seq, const std::vector<int32_t>& tokens,
                              const std::string& salt);
  std::optional<PageId> TakePage(Worker& w);
  Table& NewTable(RequestId seq);  // aborts when `seq` has one
  void Announce(Worker& w, Table& table, RequestId seq, const std::vector<int32_t>& tokens);
  void Unannounce(Worker& w, Table& table, size_t count);

  const bool enable_prefix_caching_;
  absl::flat_hash_map<WorkerId, std::unique_ptr<Worker>> workers_;
  absl::flat_hash_map<RequestId, Table> tables_;
  absl::flat_hash_map<RequestId, Chain> chains_;
  absl::flat_hash_map<RequestId, Swapped> swapped_;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace pagoda::scheduler
