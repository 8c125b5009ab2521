#include "scheduler/core/kv_cache_manager.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "absl/strings/str_format.h"

namespace pagoda::scheduler {

struct KvCacheManager::Worker {
  Worker(int32_t num_pages, int32_t size, int32_t num_swap)
      : page_size(size), swap_slots(num_swap), pool(num_pages), cache(num_pages) {
    for (int32_t slot = num_swap - 1; slot >= 0; --slot) free_slots.push_back(slot);
  }
  int32_t page_size;
  int32_t swap_slots;
  std::vector<int32_t> free_slots;       // swap slots free now
  std::vector<int32_t> releasing_slots;  // freed by swap-ins of the plan being built
  BlockPool pool;
  PrefixCache cache;
  absl::flat_hash_map<uint64_t, int32_t> computing;  // page hash -> tables computing it
};

KvCacheManager::KvCacheManager(bool enable_prefix_caching)
    : enable_prefix_caching_(enable_prefix_caching) {}
KvCacheManager::~KvCacheManager() = default;

KvCacheManager::Worker& KvCacheManager::worker(WorkerId id) const {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    std::fprintf(stderr, "KvCacheManager: unknown worker %u\n", id);
    std::abort();
  }
  return *it->second;
}

KvCacheManager::Table& KvCacheManager::NewTable(RequestId seq) {
  auto [it, inserted] = tables_.try_emplace(seq);
  if (!inserted) {
    std::fprintf(stderr, "KvCacheManager: sequence %lu already has a table\n",
                 static_cast<unsigned long>(seq));
    std::abort();
  }
  return it->second;
}

void KvCacheManager::AddWorker(WorkerId id, int32_t num_pages, int32_t page_size,
                               int32_t num_swap_pages) {
  workers_[id] = std::make_unique<Worker>(num_pages, page_size, num_swap_pages);
}

void KvCacheManager::RemoveWorker(WorkerId id) {
  absl::erase_if(tables_, [id](const auto& entry) { return entry.second.worker == id; });
  absl::erase_if(swapped_, [id](const auto& entry) { return entry.second.worker == id; });
  workers_.erase(id);
}

int32_t KvCacheManager::page_size(WorkerId id) const { return worker(id).page_size; }

const BlockPool* KvCacheManager::pool(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second->pool;
}

int32_t KvCacheManager::AvailablePages(WorkerId id) const {
  const Worker& w = worker(id);
  return w.pool.num_free() + w.cache.num_parked();
}

KvUsage KvCacheManager::usage(WorkerId id) const {
  const Worker& w = worker(id);
  KvUsage u;
  u.total = w.pool.num_pages();
  u.free = w.pool.num_free();
  u.parked = w.cache.num_parked();
  u.held = u.total - u.free - u.parked;
  u.named = w.cache.num_named();
  return u;
}

const std::vector<PageId>& KvCacheManager::pages(RequestId seq) const {
  return tables_.at(seq).pages;
}

const std::vector<uint64_t>& KvCacheManager::HashesFor(RequestId seq,
                                                       const std::vector<int32_t>& tokens,
                                                       const std::string& salt, int32_t page_size,
                                                       int32_t num_pages) {
  Chain& chain = chains_[seq];
  if (chain.page_size != page_size || chain.salt != salt) {
    chain = Chain{page_size, salt, {}};
  }
  // A sequence's tokens only grow, so the memo extends; it never changes.
  while (static_cast<int32_t>(chain.hashes.size()) < num_pages) {
    const size_t k = chain.hashes.size();
    const uint64_t parent = k == 0 ? ChainRoot(salt) : chain.hashes[k - 1];
    chain.hashes.push_back(
        PageHash(parent, std::span<const int32_t>(tokens.data() + k * page_size, page_size)));
  }
  return chain.hashes;
}

std::vector<PageId> KvCacheManager::FindRun(Worker& w, RequestId seq,
                                            const std::vector<int32_t>& tokens,
                                            const std::string& salt) {
  std::vector<PageId> run;
  if (!enable_prefix_caching_ || tokens.empty()) return run;
  const int32_t ps = w.page_size;
  // Full pages strictly before the last token's position: that token is always computed.
  const int32_t max_pages = (static_cast<int32_t>(tokens.size()) - 1) / ps;
  if (max_pages == 0 || (w.cache.num_named() == 0 && w.computing.empty())) return run;
  const std::vector<uint64_t>& hashes = HashesFor(seq, tokens, salt, ps, max_pages);
  for (int32_t k = 0; k < max_pages; ++k) {
    const uint64_t parent = k == 0 ? ChainRoot(salt) : hashes[k - 1];
    std::optional<PageId> page =
        w.cache.Find(hashes[k], parent, std::span<const int32_t>(tokens.data() + k * ps, ps));
    if (!page) break;
    run.push_back(*page);
  }
  return run;
}

PrefixHit KvCacheManager::Lookup(WorkerId id, RequestId seq, const std::vector<int32_t>& tokens,
                                 const std::string& salt) {
  Worker& w = worker(id);
  PrefixHit hit;
  const std::vector<PageId> run = FindRun(w, seq, tokens, salt);
  for (PageId page : run) {
    hit.tokens += w.page_size;
    hit.parked_pages += w.cache.parked(page);
  }
  const int32_t max_pages = (static_cast<int32_t>(tokens.size()) - 1) / w.page_size;
  if (w.computing.empty() || max_pages == 0) return hit;
  const std::vector<uint64_t>& hashes = HashesFor(seq, tokens, salt, w.page_size, max_pages);
  for (int32_t k = static_cast<int32_t>(run.size()); k < max_pages; ++k) {
    if (!w.computing.contains(hashes[k])) break;
    hit.computing_tokens += w.page_size;
  }
  return hit;
}

int32_t KvCacheManager::Open(WorkerId id, RequestId seq, const std::vector<int32_t>& tokens,
                             const std::string& salt) {
  Worker& w = worker(id);
  Table& table = NewTable(seq);
  table.worker = id;
  table.pages = FindRun(w, seq, tokens, salt);
  table.salt = salt;
  for (PageId page : table.pages) {
    if (w.cache.parked(page)) w.cache.Unpark(page);  // parked pages are off the free list
    w.pool.AddRef(page);
  }
  table.committed = static_cast<int32_t>(table.pages.size());
  const int32_t cached = table.committed * w.page_size;
  Announce(w, table, seq, tokens);
  if (enable_prefix_caching_) {
    queried_tokens_ += static_cast<int64_t>(tokens.size());
    hit_tokens_ += cached;
  }
  return cached;
}

void KvCacheManager::Announce(Worker& w, Table& table, RequestId seq,
                              const std::vector<int32_t>& tokens) {
  if (!enable_prefix_caching_) return;
  const int32_t full = static_cast<int32_t>(tokens.size()) / w.page_size;
  if (full <= table.committed) return;
  const std::vector<uint64_t>& hashes = HashesFor(seq, tokens, table.salt, w.page_size, full);
  for (int32_t k = table.committed; k < full; ++k) {
    table.computing.push_back(hashes[k]);
    ++w.computing[hashes[k]];
  }
}

void KvCacheManager::Unannounce(Worker& w, Table& table, size_t count) {
  count = std::min(count, table.computing.size());
  for (size_t i = 0; i < count; ++i) {
    auto it = w.computing.find(table.computing[i]);
    if (--it->second == 0) w.computing.erase(it);
  }
  table.computing.erase(table.computing.begin(), table.computing.begin() + count);
}

std::optional<PageId> KvCacheManager::TakePage(Worker& w) {
  if (std::optional<PageId> page = w.pool.Allocate()) return page;
  std::optional<PageId> evicted = w.cache.Evict();
  if (!evicted) return std::nullopt;
  w.pool.Free(*evicted);
  return w.pool.Allocate();
}

bool KvCacheManager::Grow(RequestId seq, int32_t positions) {
  Table& table = tables_.at(seq);
  Worker& w = worker(table.worker);
  const size_t needed = static_cast<size_t>((positions + w.page_size - 1) / w.page_size);
  if (needed <= table.pages.size()) return true;
  if (needed - table.pages.size() > static_cast<size_t>(AvailablePages(table.worker))) {
    return false;
  }
  while (table.pages.size() < needed) table.pages.push_back(*TakePage(w));
  return true;
}

void KvCacheManager::Commit(RequestId seq, const std::vector<int32_t>& tokens,
                            int32_t num_computed) {
  if (!enable_prefix_caching_) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  Table& table = it->second;
  Worker& w = worker(table.worker);
  const int32_t ps = w.page_size;
  const int32_t full = std::min({num_computed, static_cast<int32_t>(tokens.size()),
                                 static_cast<int32_t>(table.pages.size()) * ps}) /
                       ps;
  if (full <= table.committed) return;
  const std::string& salt = table.salt;
  const std::vector<uint64_t>& hashes = HashesFor(seq, tokens, salt, ps, full);
  for (int32_t k = table.committed; k < full; ++k) {
    const uint64_t parent = k == 0 ? ChainRoot(salt) : hashes[k - 1];
    w.cache.Insert(table.pages[k], hashes[k], parent,
                   std::span<const int32_t>(tokens.data() + k * ps, ps));
  }
  Unannounce(w, table, static_cast<size_t>(full - table.committed));
  table.committed = full;
}

std::optional<std::optional<PageCopy>> KvCacheManager::Fork(RequestId parent, RequestId child,
                                                            int32_t positions) {
  const Table& from = tables_.at(parent);
  Worker& w = worker(from.worker);
  const size_t whole = static_cast<size_t>(positions / w.page_size);
  const bool partial = positions % w.page_size != 0;
  std::optional<PageId> own;
  if (partial && !(own = TakePage(w))) return std::nullopt;
  Table table;
  table.worker = from.worker;
  table.salt = from.salt;
  table.pages.assign(from.pages.begin(), from.pages.begin() + whole);
  for (PageId page : table.pages) w.pool.AddRef(page);
  std::optional<PageCopy> copy;
  if (own) {
    copy = PageCopy{from.pages[whole], *own};
    table.pages.push_back(*own);
  }
  NewTable(child) = std::move(table);
  return copy;
}

void KvCacheManager::Release(RequestId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  Table& table = it->second;
  Worker& w = worker(table.worker);
  Unannounce(w, table, table.computing.size());
  for (auto p = table.pages.rbegin(); p != table.pages.rend(); ++p) {
    if (!w.pool.DropRef(*p)) continue;
    if (w.cache.named(*p)) {
      w.cache.Park(*p);
    } else {
      w.pool.Free(*p);
    }
  }
  tables_.erase(it);
}

void KvCacheManager::Forget(RequestId seq) {
  Release(seq);
  DropSwapped(seq);
  chains_.erase(seq);
}

std::optional<std::vector<SwapCopy>> KvCacheManager::SwapOut(RequestId seq, int32_t positions) {
  Table& table = tables_.at(seq);
  Worker& w = worker(table.worker);
  const size_t count = static_cast<size_t>((positions + w.page_size - 1) / w.page_size);
  if (count == 0 || count > table.pages.size() || count > w.free_slots.size()) return std::nullopt;
  Swapped out{table.worker, table.salt, {}};
  std::vector<SwapCopy> copies;
  copies.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    out.slots.push_back(w.free_slots.back());
    w.free_slots.pop_back();
    copies.push_back({table.pages[k], out.slots.back()});
  }
  Release(seq);
  swapped_.emplace(seq, std::move(out));
  return copies;
}

std::optional<std::vector<SwapCopy>> KvCacheManager::SwapIn(RequestId seq) {
  auto it = swapped_.find(seq);
  if (it == swapped_.end()) return std::nullopt;
  Swapped& from = it->second;
  Worker& w = worker(from.worker);
  if (static_cast<int32_t>(from.slots.size()) > AvailablePages(from.worker)) return std::nullopt;
  Table& table = NewTable(seq);
  table.worker = from.worker;
  table.salt = from.salt;
  std::vector<SwapCopy> copies;
  copies.reserve(from.slots.size());
  for (int32_t slot : from.slots) {
    table.pages.push_back(*TakePage(w));
    copies.push_back({table.pages.back(), slot});
    w.releasing_slots.push_back(slot);
  }
  swapped_.erase(it);
  return copies;
}

void KvCacheManager::DropSwapped(RequestId seq) {
  auto it = swapped_.find(seq);
  if (it == swapped_.end()) return;
  Worker& w = worker(it->second.worker);
  w.free_slots.insert(w.free_slots.end(), it->second.slots.begin(), it->second.slots.end());
  swapped_.erase(it);
}

void KvCacheManager::EndPlan(WorkerId id) {
  Worker& w = worker(id);
  w.free_slots.insert(w.free_slots.end(), w.releasing_slots.begin(), w.releasing_slots.end());
  w.releasing_slots.clear();
}

int32_t KvCacheManager::swapped_pages(RequestId seq) const {
  auto it = swapped_.find(seq);
  return it == swapped_.end() ? 0 : static_cast<int32_t>(it->second.slots.size());
}

int32_t KvCacheManager::free_swap_slots(WorkerId id) const {
  return static_cast<int32_t>(worker(id).free_slots.size());
}

int32_t KvCacheManager::swap_slots(WorkerId id) const { return worker(id).swap_slots; }

namespace {

absl::Status Violation(const std::string& what) { return absl::InternalError(what); }

}  // namespace

absl::Status KvCacheManager::CheckInvariants(
    const std::function<const std::vector<int32_t>*(RequestId)>& tokens_of) const {
  absl::flat_hash_map<WorkerId, std::vector<int32_t>> holders;
  absl::flat_hash_map<WorkerId, absl::flat_hash_map<uint64_t, int32_t>> computing;
  for (const auto& [id, w] : workers_) holders[id].assign(w->pool.num_pages(), 0);
  for (const auto& [seq, table] : tables_) {
    for (uint64_t hash : table.computing) ++computing[table.worker][hash];
    auto h = holders.find(table.worker);
    if (h == holders.end()) {
      return Violation(
          absl::StrFormat("seq %d has a table on unknown worker %d", seq, table.worker));
    }
    const Worker& w = *workers_.at(table.worker);
    const std::vector<int32_t>* tokens = tokens_of(seq);
    if (tokens == nullptr) return Violation(absl::StrFormat("table of unknown seq %d", seq));
    uint64_t parent = ChainRoot(table.salt);
    for (size_t k = 0; k < table.pages.size(); ++k) {
      const PageId p = table.pages[k];
      if (p < 0 || p >= w.pool.num_pages()) {
        return Violation(absl::StrFormat("seq %d lists page %d out of range", seq, p));
      }
      ++h->second[p];
      // A named page in a table: the holder put exactly the page's tokens there.
      const int32_t ps = w.page_size;
      const bool full = static_cast<int32_t>(tokens->size()) >= static_cast<int32_t>(k + 1) * ps;
      if (!full) {
        if (w.cache.named(p)) {
          return Violation(absl::StrFormat("seq %d lists named page %d past its tokens", seq, p));
        }
        continue;
      }
      const uint64_t hash = PageHash(parent, std::span<const int32_t>(tokens->data() + k * ps, ps));
      if (w.cache.named(p) && (w.cache.hash(p) != hash || w.cache.parent(p) != parent)) {
        return Violation(
            absl::StrFormat("seq %d: named page %d (index %d) does not match its "
                            "tokens",
                            seq, p, k));
      }
      parent = hash;
    }
  }
  for (const auto& [id, w] : workers_) {
    const std::vector<int32_t>& count = holders.at(id);
    int32_t held = 0, free = 0, parked = 0;
    for (PageId p = 0; p < w->pool.num_pages(); ++p) {
      const int32_t rc = w->pool.ref_count(p);
      if (rc != count[p]) {
        return Violation(
            absl::StrFormat("worker %d page %d: ref count %d, %d holders", id, p, rc, count[p]));
      }
      const bool is_free = w->pool.is_free(p), is_parked = w->cache.parked(p);
      if (rc > 0 && (is_free || is_parked)) {
        return Violation(absl::StrFormat("worker %d: held page %d is free or parked", id, p));
      }
      if (rc == 0 && is_free == is_parked) {
        return Violation(
            absl::StrFormat("worker %d: unheld page %d is neither free nor parked "
                            "(or both)",
                            id, p));
      }
      if (is_parked && !w->cache.named(p)) {
        return Violation(absl::StrFormat("worker %d: parked page %d is not named", id, p));
      }
      if (is_free && w->cache.named(p)) {
        return Violation(absl::StrFormat("worker %d: free page %d is still named", id, p));
      }
      if (w->cache.named(p) &&
          w->cache.hash(p) != PageHash(w->cache.parent(p), w->cache.tokens(p))) {
        return Violation(
            absl::StrFormat("worker %d: page %d's hash does not match its tokens", id, p));
      }
      held += rc > 0;
      free += is_free;
      parked += is_parked;
    }
    if (free != w->pool.num_free() || parked != w->cache.num_parked() ||
        free + parked + held != w->pool.num_pages()) {
      return Violation(absl::StrFormat("worker %d: %d free + %d parked + %d held != %d pages", id,
                                       free, parked, held, w->pool.num_pages()));
    }
    if (static_cast<int32_t>(w->cache.ParkedOldestFirst().size()) != parked) {
      return Violation(absl::StrFormat("worker %d: the LRU list is broken", id));
    }
    if (computing[id] != w->computing) {
      return Violation(absl::StrFormat("worker %d: pages announced as computing drifted", id));
    }
    if (!enable_prefix_caching_ && w->cache.num_named() != 0) {
      return Violation(absl::StrFormat("worker %d names pages with caching off", id));
    }
  }
  return CheckSwapInvariants();
}

absl::Status KvCacheManager::CheckSwapInvariants() const {
  absl::flat_hash_map<WorkerId, std::vector<int32_t>> owners;
  for (const auto& [id, w] : workers_) {
    std::vector<int32_t>& slot_owners = owners[id];
    slot_owners.assign(w->swap_slots, 0);
    for (int32_t slot : w->free_slots) ++slot_owners.at(slot);
    for (int32_t slot : w->releasing_slots) ++slot_owners.at(slot);
  }
  for (const auto& [seq, s] : swapped_) {
    if (tables_.contains(seq)) {
      return Violation(absl::StrFormat("seq %d is swapped out and holds a table", seq));
    }
    auto it = owners.find(s.worker);
    if (it == owners.end()) {
      return Violation(
          absl::StrFormat("seq %d is swapped out to unknown worker %d", seq, s.worker));
    }
    for (int32_t slot : s.slots) {
      if (slot < 0 || slot >= static_cast<int32_t>(it->second.size())) {
        return Violation(absl::StrFormat("seq %d holds swap slot %d out of range", seq, slot));
      }
      ++it->second[slot];
    }
  }
  for (const auto& [id, slot_owners] : owners) {
    for (size_t slot = 0; slot < slot_owners.size(); ++slot) {
      if (slot_owners[slot] != 1) {
        return Violation(absl::StrFormat(
            "worker %d swap slot %d is free, releasing or held %d times (must be once)", id, slot,
            slot_owners[slot]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
