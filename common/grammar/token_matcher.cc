// Vocabulary (the token trie), CompiledConstraint (the mask cache) and TokenMatcher.
//
// The trie holds the non-excluded tokens' bytes in DFS preorder: node i has a byte, a depth
// (1 for a first byte) and the end of its subtree, so a walk that finds a byte refused skips the
// whole subtree in one step. A mask is one walk of the trie with the parse configuration: each
// node steps its parent's configuration by its byte (automaton.h), with a fast path for the
// common case of one stack moving to a state that needs no closure; a node whose step succeeds
// allows its tokens. Masks are cached per configuration.
#include "common/grammar/token_matcher.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "common/grammar/automaton.h"

namespace pagoda::grammar {

struct Vocabulary::Index {
  std::vector<std::string> bytes;  // per token
  std::vector<uint8_t> excluded;   // per token
  // The trie, per node.
  std::vector<uint8_t> byte;
  std::vector<uint32_t> depth;
  std::vector<uint32_t> end;
  std::vector<uint32_t> tokens_begin;  // tokens of node i: token_ids[tokens_begin[i], [i + 1])
  std::vector<int32_t> token_ids;
  uint32_t max_depth = 0;
  uint64_t uid = 0;  // distinguishes vocabularies in the process-wide walk cache
};

namespace {

// Bytes of mask one constraint's cache may hold (and again for its per-state walks).
constexpr size_t kCacheBytes = size_t{8} << 20;
// Regions up to this many states are keyed for sharing between grammars.
constexpr size_t kMaxSharedRegion = 4096;

struct WalkScratch {
  internal::Stepper stepper;
  internal::ArenaNodeMaker arena;
  std::vector<internal::RawConfig> levels;
};
thread_local WalkScratch tls_walk;

// Sets the mask bits of the tokens below trie nodes [begin, end), which all lie below depth
// `base_depth`, accepted from `base` (the configuration after the first base_depth bytes; it
// and its nodes must stay alive).
void WalkRange(const Grammar& grammar, const Vocabulary::Index& v, uint32_t begin, uint32_t end,
               uint32_t base_depth, const internal::RawConfig& base, uint32_t* mask) {
  const Automaton& a = grammar.automaton();
  const int32_t max_stacks = grammar.limits().max_stacks;
  WalkScratch& w = tls_walk;
  if (w.levels.size() < v.max_depth + 1) w.levels.resize(v.max_depth + 1);
  w.levels[base_depth].stacks.assign(base.stacks.begin(), base.stacks.end());
  w.levels[base_depth].accepting = base.accepting;
  uint32_t i = begin;
  while (i < end) {
    const uint32_t d = v.depth[i];
    const internal::RawConfig& prev = w.levels[d - 1];
    internal::RawConfig& cur = w.levels[d];
    const uint8_t b = v.byte[i];
    bool ok;
    if (prev.stacks.size() == 1) {
      const internal::RawStack& s = prev.stacks[0];
      const int32_t t = a.Next(s.state, b);
      if (t < 0) {
        ok = false;
      } else if (a.states[t].flags & Automaton::kPlain) {
        cur.stacks.resize(1);
        cur.stacks[0] = {t, s.parent};
        cur.accepting = false;
        ok = true;
      } else {
        ok = w.stepper.Step(a, prev, b, w.arena, max_stacks, &cur);
      }
    } else if (prev.stacks.empty()) {
      ok = false;
    } else {
      ok = w.stepper.Step(a, prev, b, w.arena, max_stacks, &cur);
    }
    if (!ok) {
      i = v.end[i];
      continue;
    }
    for (uint32_t k = v.tokens_begin[i]; k < v.tokens_begin[i + 1]; ++k) {
      const int32_t t = v.token_ids[k];
      mask[t >> 5] |= 1u << (t & 31);
    }
    i = cur.stacks.empty() ? v.end[i] : i + 1;
  }
}

}  // namespace

// What a single stack with top state `state` allows, whatever lies below it: the tokens whose
// bytes all step through plain states (no call, no return: the parent frames are never
// consulted), and the boundaries, trie nodes whose byte leaves the plain region (to a state
// that needs a closure), where the walk must continue with the real stack.
//
// The walk depends only on the state's plain region: the states reachable from it through
// plain states, with their edges. Regions are numbered canonically (breadth-first from the
// state), so equal regions of different grammars (every JSON grammar's string body, say) share
// one walk through a process-wide cache; boundaries name their state by region index.
struct StateWalk {
  std::vector<uint32_t> plain_mask;
  struct Boundary {
    int32_t from;  // the state before the byte
    uint8_t byte;
    uint32_t node;  // trie node of the byte
  };
  std::vector<Boundary> boundaries;  // sorted by (from, byte, node)

  size_t bytes() const {
    return plain_mask.size() * sizeof(uint32_t) + boundaries.size() * sizeof(Boundary);
  }

  // The region of `state`: *states in canonical order, *key its edges (targets outside the
  // plain region as -1), *index from state to region index. False when it exceeds `limit`
  // states (the outputs then incomplete).
  static bool Region(const Automaton& a, int32_t state, size_t limit, std::vector<int32_t>* key,
                     std::vector<int32_t>* states, absl::flat_hash_map<int32_t, int32_t>* index) {
    key->clear();
    states->assign(1, state);
    index->clear();
    index->emplace(state, 0);
    for (size_t i = 0; i < states->size(); ++i) {
      const Automaton::State& st = a.states[(*states)[i]];
      key->push_back(static_cast<int32_t>(st.edge_end - st.edge_begin));
      for (uint32_t e = st.edge_begin; e < st.edge_end; ++e) {
        const Automaton::Edge& edge = a.edges[e];
        int32_t target = -1;
        if (a.states[edge.target].flags & Automaton::kPlain) {
          auto [it, inserted] =
              index->try_emplace(edge.target, static_cast<int32_t>(states->size()));
          if (inserted) {
            states->push_back(edge.target);
            if (states->size() > limit) return false;
          }
          target = it->second;
        }
        key->push_back(edge.lo);
        key->push_back(edge.hi);
        key->push_back(target);
      }
    }
    return true;
  }

  static std::shared_ptr<const StateWalk> Compute(
      const Automaton& a, const Vocabulary::Index& v, int32_t state, int32_t mask_words,
      const absl::flat_hash_map<int32_t, int32_t>& index) {
    auto sw = std::make_shared<StateWalk>();
    sw->plain_mask.assign(static_cast<size_t>(mask_words), 0);
    std::vector<int32_t> states(v.max_depth + 1);
    states[0] = state;
    const uint32_t n = static_cast<uint32_t>(v.byte.size());
    uint32_t i = 0;
    while (i < n) {
      const uint32_t d = v.depth[i];
      const int32_t q = states[d - 1];
      const int32_t t = a.Next(q, v.byte[i]);
      if (t < 0) {
        i = v.end[i];
        continue;
      }
      if (!(a.states[t].flags & Automaton::kPlain)) {
        sw->boundaries.push_back({index.at(q), v.byte[i], i});
        i = v.end[i];
        continue;
      }
      states[d] = t;
      for (uint32_t k = v.tokens_begin[i]; k < v.tokens_begin[i + 1]; ++k) {
        const int32_t tok = v.token_ids[k];
        sw->plain_mask[tok >> 5] |= 1u << (tok & 31);
      }
      ++i;
    }
    std::sort(sw->boundaries.begin(), sw->boundaries.end(),
              [](const Boundary& x, const Boundary& y) {
                if (x.from != y.from) return x.from < y.from;
                if (x.byte != y.byte) return x.byte < y.byte;
                return x.node < y.node;
              });
    return sw;
  }
};

// A state's walk and its region's states in this grammar (boundaries index them).
struct LocalWalk {
  std::shared_ptr<const StateWalk> walk;
  std::vector<int32_t> region;
};

namespace {

// The mask from a one-stack configuration: the state's plain walk, then each boundary group
// (same state, same byte) stepped once with the real stack and its subtrees walked.
void WalkOneStack(const Grammar& grammar, const Vocabulary::Index& v, const StateWalk& sw,
                  const std::vector<int32_t>& region, const internal::RawStack& stack,
                  uint32_t* mask) {
  const Automaton& a = grammar.automaton();
  WalkScratch& w = tls_walk;
  internal::RawConfig from, after;
  for (size_t g = 0; g < sw.boundaries.size();) {
    size_t h = g;
    while (h < sw.boundaries.size() && sw.boundaries[h].from == sw.boundaries[g].from &&
           sw.boundaries[h].byte == sw.boundaries[g].byte) {
      ++h;
    }
    from.stacks.assign(1, {region[sw.boundaries[g].from], stack.parent});
    from.accepting = false;
    if (w.stepper.Step(a, from, sw.boundaries[g].byte, w.arena, grammar.limits().max_stacks,
                       &after)) {
      for (size_t k = g; k < h; ++k) {
        const uint32_t node = sw.boundaries[k].node;
        for (uint32_t x = v.tokens_begin[node]; x < v.tokens_begin[node + 1]; ++x) {
          const int32_t t = v.token_ids[x];
          mask[t >> 5] |= 1u << (t & 31);
        }
        if (!after.stacks.empty() && node + 1 < v.end[node]) {
          WalkRange(grammar, v, node + 1, v.end[node], v.depth[node], after, mask);
        }
      }
    }
    g = h;
  }
}

struct KeyHash {
  size_t operator()(const std::vector<int32_t>& k) const {
    return absl::HashOf(absl::MakeConstSpan(k));
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Vocabulary

std::shared_ptr<const Vocabulary> Vocabulary::Create(std::vector<std::string> token_bytes,
                                                     std::vector<bool> excluded) {
  auto index = std::make_unique<Index>();
  Index& x = *index;
  const size_t n = token_bytes.size();
  x.excluded.resize(n);
  std::vector<int32_t> order;
  for (size_t t = 0; t < n; ++t) {
    x.excluded[t] = (t < excluded.size() && excluded[t]) || token_bytes[t].empty();
    if (!x.excluded[t]) order.push_back(static_cast<int32_t>(t));
  }
  std::sort(order.begin(), order.end(), [&](int32_t p, int32_t q) {
    return token_bytes[p] != token_bytes[q] ? token_bytes[p] < token_bytes[q] : p < q;
  });
  // Nodes on the path of the previous token, by depth - 1.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  for (int32_t t : order) {
    const std::string& s = token_bytes[t];
    size_t common = 0;
    if (prev != nullptr) {
      const size_t limit = std::min(prev->size(), s.size());
      while (common < limit && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common) {
      x.end[path.back()] = static_cast<uint32_t>(x.byte.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(x.byte.size()));
      x.byte.push_back(static_cast<uint8_t>(s[k]));
      x.depth.push_back(static_cast<uint32_t>(k + 1));
      x.end.push_back(0);
      x.tokens_begin.push_back(static_cast<uint32_t>(x.token_ids.size()));
    }
    // Sorted order puts equal byte strings together, so the token's node is the newest one.
    x.token_ids.push_back(t);
    x.max_depth = std::max(x.max_depth, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    x.end[path.back()] = static_cast<uint32_t>(x.byte.size());
    path.pop_back();
  }
  x.tokens_begin.push_back(static_cast<uint32_t>(x.token_ids.size()));
  x.bytes = std::move(token_bytes);
  static std::atomic<uint64_t> next_uid{1};
  x.uid = next_uid.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<Vocabulary> v(new Vocabulary());
  v->index_ = std::move(index);
  return v;
}

Vocabulary::~Vocabulary() = default;

int32_t Vocabulary::size() const { return static_cast<int32_t>(index_->bytes.size()); }

const std::string& Vocabulary::token_bytes(int32_t id) const { return index_->bytes[id]; }

bool Vocabulary::excluded(int32_t id) const { return index_->excluded[id] != 0; }

// ---------------------------------------------------------------------------------------------
// CompiledConstraint

struct CompiledConstraint::Cache {
  struct Entry {
    std::vector<int32_t> key;
    std::shared_ptr<const std::vector<uint32_t>> mask;
  };
  mutable std::mutex mu;
  size_t capacity = 1;
  std::list<Entry> lru;  // most recent first
  absl::flat_hash_map<std::vector<int32_t>, std::list<Entry>::iterator, KeyHash> index;
  int64_t hits = 0, misses = 0;
  // This grammar's states' walks, dropped together when they exceed the byte budget.
  absl::flat_hash_map<int32_t, std::shared_ptr<const LocalWalk>> state_walks;
  size_t state_walk_bytes = 0;
};

namespace {

// Walks shared between grammars, by (vocabulary, region), least recently used dropped first.
class SharedWalks {
 public:
  static SharedWalks& Get() {
    static auto* cache = new SharedWalks;
    return *cache;
  }

  std::shared_ptr<const StateWalk> Find(uint64_t vocab, const std::vector<int32_t>& region) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(Key{vocab, region});
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->walk;
  }

  void Put(uint64_t vocab, std::vector<int32_t> region, std::shared_ptr<const StateWalk> walk) {
    std::lock_guard<std::mutex> lock(mu_);
    Key key{vocab, std::move(region)};
    if (index_.contains(key)) return;
    bytes_ += walk->bytes();
    lru_.push_front({key, std::move(walk)});
    index_.emplace(std::move(key), lru_.begin());
    while (bytes_ > kSharedWalkBytes && lru_.size() > 1) {
      bytes_ -= lru_.back().walk->bytes();
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
  }

 private:
  static constexpr size_t kSharedWalkBytes = size_t{64} << 20;
  struct Key {
    uint64_t vocab;
    std::vector<int32_t> region;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.vocab, k.region);
    }
  };
  struct Entry {
    Key key;
    std::shared_ptr<const StateWalk> walk;
  };
  std::mutex mu_;
  std::list<Entry> lru_;
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace

std::shared_ptr<const LocalWalk> CompiledConstraint::GetStateWalk(int32_t state) {
  Cache& c = *cache_;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.state_walks.find(state); it != c.state_walks.end()) return it->second;
  }
  const Automaton& a = grammar_->automaton();
  const Vocabulary::Index& v = vocab_->index();
  auto local = std::make_shared<LocalWalk>();
  std::vector<int32_t> key;
  absl::flat_hash_map<int32_t, int32_t> index;
  if (StateWalk::Region(a, state, kMaxSharedRegion, &key, &local->region, &index)) {
    local->walk = SharedWalks::Get().Find(v.uid, key);
    if (local->walk == nullptr) {
      local->walk = StateWalk::Compute(a, v, state, vocab_->mask_words(), index);
      SharedWalks::Get().Put(v.uid, std::move(key), local->walk);
    }
  } else {
    // Too large a region to key: computed for this grammar alone.
    StateWalk::Region(a, state, a.states.size(), &key, &local->region, &index);
    local->walk = StateWalk::Compute(a, v, state, vocab_->mask_words(), index);
  }
  std::lock_guard<std::mutex> lock(c.mu);
  const size_t bytes = local->walk->bytes() + local->region.size() * sizeof(int32_t);
  if (c.state_walk_bytes + bytes > kCacheBytes) {
    c.state_walks.clear();
    c.state_walk_bytes = 0;
  }
  if (c.state_walks.try_emplace(state, local).second) c.state_walk_bytes += bytes;
  return local;
}

CompiledConstraint::CompiledConstraint(std::shared_ptr<const Grammar> grammar,
                                       std::shared_ptr<const Vocabulary> vocab,
                                       int32_t cache_entries)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), cache_(std::make_unique<Cache>()) {
  cache_->capacity = static_cast<size_t>(std::max(cache_entries, 1));
}

CompiledConstraint::~CompiledConstraint() = default;

std::shared_ptr<CompiledConstraint> CompiledConstraint::Get(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab) {
  // A live constraint keeps its grammar and vocabulary alive, so their addresses identify the
  // pair for as long as the weak reference can be locked.
  static std::mutex mu;
  static auto* registry =
      new std::map<std::pair<const Grammar*, const Vocabulary*>, std::weak_ptr<CompiledConstraint>>;
  static size_t sweep_at = 64;
  const auto key = std::make_pair(grammar.get(), vocab.get());
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = registry->find(key); it != registry->end()) {
    if (auto live = it->second.lock()) return live;
  }
  const size_t mask_bytes = static_cast<size_t>(vocab->mask_words()) * sizeof(uint32_t);
  const auto entries = static_cast<int32_t>(
      std::clamp<size_t>(kCacheBytes / std::max<size_t>(mask_bytes, 1), 16, 65536));
  auto made = std::make_shared<CompiledConstraint>(std::move(grammar), std::move(vocab), entries);
  (*registry)[key] = made;
  if (registry->size() >= sweep_at) {
    std::erase_if(*registry, [](const auto& e) { return e.second.expired(); });
    sweep_at = std::max<size_t>(64, 2 * registry->size());
  }
  return made;
}

void CompiledConstraint::TextMask(const Matcher& matcher, uint32_t* mask) {
  const size_t words = static_cast<size_t>(vocab_->mask_words());
  internal::RawConfig config;
  internal::MatcherAccess::Get(matcher, &config);
  std::vector<int32_t> key;
  internal::SerializeConfig(config, &key);
  Cache& c = *cache_;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.index.find(key); it != c.index.end()) {
      c.lru.splice(c.lru.begin(), c.lru, it->second);
      ++c.hits;
      std::memcpy(mask, it->second->mask->data(), words * sizeof(uint32_t));
      return;
    }
    ++c.misses;
  }
  auto computed = std::make_shared<std::vector<uint32_t>>(words, 0);
  const Vocabulary::Index& v = vocab_->index();
  if (config.stacks.size() == 1) {
    // One stack (the usual case): the per-state walk does most of the work, once per state.
    auto local = GetStateWalk(config.stacks[0].state);
    std::memcpy(computed->data(), local->walk->plain_mask.data(), words * sizeof(uint32_t));
    WalkOneStack(*grammar_, v, *local->walk, local->region, config.stacks[0], computed->data());
  } else if (!config.stacks.empty()) {
    WalkRange(*grammar_, v, 0, static_cast<uint32_t>(v.byte.size()), 0, config, computed->data());
  }
  tls_walk.arena.Reset();
  std::memcpy(mask, computed->data(), words * sizeof(uint32_t));
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.index.contains(key)) return;  // another thread computed it meanwhile
  c.lru.push_front({key, std::move(computed)});
  c.index.emplace(std::move(key), c.lru.begin());
  while (c.lru.size() > c.capacity) {
    c.index.erase(c.lru.back().key);
    c.lru.pop_back();
  }
}

CompiledConstraint::Stats CompiledConstraint::stats() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return {cache_->hits, cache_->misses, static_cast<int64_t>(cache_->lru.size())};
}

// ---------------------------------------------------------------------------------------------
// TokenMatcher

TokenMatcher::TokenMatcher(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> end_tokens)
    : TokenMatcher(CompiledConstraint::Get(std::move(grammar), std::move(vocab)),
                   std::move(end_tokens)) {}

TokenMatcher::TokenMatcher(std::shared_ptr<CompiledConstraint> constraint,
                           std::vector<int32_t> end_tokens)
    : shared_(std::move(constraint)),
      vocab_(shared_->vocab()),
      end_tokens_(std::move(end_tokens)),
      matcher_(shared_->grammar()) {
  std::erase_if(end_tokens_, [&](int32_t t) { return t < 0 || t >= vocab_->size(); });
  std::sort(end_tokens_.begin(), end_tokens_.end());
  end_tokens_.erase(std::unique(end_tokens_.begin(), end_tokens_.end()), end_tokens_.end());
}

bool TokenMatcher::IsEnd(int32_t token) const {
  return std::binary_search(end_tokens_.begin(), end_tokens_.end(), token);
}

bool TokenMatcher::NothingAllowed() const {
  std::vector<uint32_t> mask(static_cast<size_t>(vocab_->mask_words()));
  shared_->TextMask(matcher_, mask.data());
  for (int32_t t : end_tokens_) mask[t >> 5] &= ~(1u << (t & 31));
  return std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; });
}

void TokenMatcher::FillMask(std::span<uint32_t> mask) const {
  const size_t words = static_cast<size_t>(vocab_->mask_words());
  if (mask.size() < words) return;
  std::fill(mask.begin() + static_cast<ptrdiff_t>(words), mask.end(), 0u);
  bool ends;
  if (finished_) {
    std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(words), 0u);
    ends = true;
  } else {
    shared_->TextMask(matcher_, mask.data());
    // End tokens are never text: they end the generation.
    for (int32_t t : end_tokens_) mask[t >> 5] &= ~(1u << (t & 31));
    ends = matcher_.Accepting() ||
           std::all_of(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(words),
                       [](uint32_t w) { return w == 0; });
  }
  if (ends) {
    for (int32_t t : end_tokens_) mask[t >> 5] |= 1u << (t & 31);
  }
}

bool TokenMatcher::Accept(int32_t token) {
  if (finished_ || token < 0 || token >= vocab_->size()) return false;
  if (IsEnd(token)) {
    if (!matcher_.Accepting() && !NothingAllowed()) return false;
    finished_ = true;
    return true;
  }
  if (vocab_->excluded(token)) return false;
  return matcher_.Advance(vocab_->token_bytes(token));
}

}  // namespace pagoda::grammar
