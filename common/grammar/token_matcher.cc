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
#include <cstdint>
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
// A shared walk covers the trie down to this depth (bytes) and is keyed by the part of the
// region within that many bytes of its state; below it, each grammar walks on alone. A bounded
// repetition (maxLength, formats, patterns) makes a chain of states, one per position, whose
// regions all differ, but whose positions at least this many bytes from the chain's end look
// alike to this depth: they share one walk. The depth trades the shared keys (one per chain
// position within it of an end) against the part each state walks alone (the trie below it:
// a few thousand nodes of a 150k-token vocabulary at 16).
constexpr int32_t kSharedWalkDepth = 16;

struct WalkScratch {
  internal::Stepper stepper;
  internal::ArenaNodeMaker arena;
  std::vector<internal::RawConfig> levels;
  // The most stacks any step of the current mask's walk held or visited in its closure.
  int64_t peak = 0;

  // Steps `in` by `byte` into `out`, keeping `peak`.
  bool Step(const Grammar& grammar, const internal::RawConfig& in, uint8_t byte,
            internal::RawConfig* out) {
    const bool ok =
        stepper.Step(grammar.automaton(), in, byte, arena, grammar.limits().max_stacks, out);
    peak = std::max({peak, stepper.last_visits(), static_cast<int64_t>(out->stacks.size())});
    return ok;
  }
};
thread_local WalkScratch tls_walk;

// Sets the mask bits of the tokens of trie node `node`.
void SetTokens(const Vocabulary::Index& v, uint32_t node, uint32_t* mask) {
  for (uint32_t k = v.tokens_begin[node]; k < v.tokens_begin[node + 1]; ++k) {
    const int32_t t = v.token_ids[k];
    mask[t >> 5] |= 1u << (t & 31);
  }
}

// Sets the mask bits of the tokens below trie nodes [begin, end), which all lie below depth
// `base_depth`, accepted from `base` (the configuration after the first base_depth bytes; it
// and its nodes must stay alive).
void WalkRange(const Grammar& grammar, const Vocabulary::Index& v, uint32_t begin, uint32_t end,
               uint32_t base_depth, const internal::RawConfig& base, uint32_t* mask) {
  const Automaton& a = grammar.automaton();
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
        ok = w.Step(grammar, prev, b, &cur);
      }
    } else if (prev.stacks.empty()) {
      ok = false;
    } else {
      ok = w.Step(grammar, prev, b, &cur);
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
// bytes all step through walkable states (edges, no calls: the parent frames are not needed
// to stay in the rule), and the boundaries, trie nodes whose byte leads where the walk must
// continue with the real stack (a state that calls, or that has no edges).
//
// A walkable state may be final (the rule may end there, as after each character of an e-mail
// address's domain): the walk stays in the rule, and records where it could also return, the
// children of the nodes that entered a final state, by byte. Returning pops the same frame
// whichever state the rule ended in, so the mask steps that returned configuration once per
// byte (WalkOneStack).
//
// The expensive part, walking the whole trie, is shared between states through a process-wide
// cache, keyed by the part of the state's region the walk reads, numbered canonically (breadth
// first from the state); boundaries name their state by region index. Two cuts keep that part
// small and common:
//  * Depth: the walk down to trie depth D reads only the states within D - 1 bytes of the
//    state. A region that reaches further than D = kSharedWalkDepth bytes is keyed to that
//    depth, and its walk stops there and lists its frontier, the nodes at depth D reached
//    through walkable states that have children. So the positions of a bounded repetition
//    (maxLength, formats, patterns: a chain of states, one per position) that lie D or more
//    bytes before its end share one walk, and the positions nearer the end one walk each,
//    whichever grammar they are in.
//  * Narrow text: a one-byte edge into a narrow state (every edge of one byte: literal text,
//    the choice of `,` or `}`) ends the shared walk like a boundary. What follows a string's
//    closing quote (`","email":"`, the next key) differs from schema to schema, but few tokens
//    reach it: the shared walk of the string body then stays common to every schema.
// Each grammar continues the shared walk below its frontier and its cut edges with its own
// states (LocalWalk::Continue: a few thousand trie nodes at most). A region within D bytes
// with no cut edge is walked whole, as one shared walk.
struct StateWalk {
  std::vector<uint32_t> plain_mask;
  struct Boundary {
    int32_t from;  // the state before the byte
    uint8_t byte;
    uint32_t node;  // trie node of the byte
  };
  // Boundaries and the nodes of cut edges, sorted by (from, byte, node).
  std::vector<Boundary> boundaries;
  struct Frontier {
    int32_t state;  // the state after the node's byte
    uint32_t node;
  };
  std::vector<Frontier> frontier;  // in trie order; empty unless the region was truncated
  // Where the rule may return: the children of the nodes that entered a final state, by byte:
  // those of byte b are return_nodes[return_begin[b], return_begin[b + 1]) (no entries: none).
  std::vector<uint32_t> return_begin;
  std::vector<uint32_t> return_nodes;

  // Ends a truncated key (no entry or target in a key is below -1).
  static constexpr int32_t kTruncated = -2;

  size_t bytes() const {
    return plain_mask.size() * sizeof(uint32_t) + boundaries.size() * sizeof(Boundary) +
           frontier.size() * sizeof(Frontier) +
           (return_begin.size() + return_nodes.size()) * sizeof(uint32_t);
  }

  // A state the walk can stay in without the parent frames: it has edges and no calls.
  static bool Walkable(const Automaton& a, int32_t t) {
    const Automaton::State& s = a.states[t];
    return (s.flags & Automaton::kHasEdges) && s.call_end == s.call_begin;
  }
  // A narrow state: every edge of one byte, as in literal text, or the choices after a
  // string's closing quote (`,` or `}`) or an escape's backslash.
  static bool Narrow(const Automaton& a, int32_t t) {
    const Automaton::State& s = a.states[t];
    for (uint32_t e = s.edge_begin; e < s.edge_end; ++e) {
      if (a.edges[e].lo != a.edges[e].hi) return false;
    }
    return true;
  }
  // Whether an edge into a walkable state ends the shared walk: a one-byte edge into a narrow
  // state. A range into a narrow state (the class into a bounded repetition's last position)
  // continues it: many tokens end there.
  static bool Cut(const Automaton& a, uint8_t lo, uint8_t hi, int32_t t) {
    return lo == hi && Narrow(a, t);
  }
  // Whether the edge of `byte` from q (which has one) is of that byte alone.
  static bool OneByteEdge(const Automaton& a, int32_t q, uint8_t byte) {
    uint32_t e = a.states[q].edge_begin;
    while (a.edges[e].hi < byte) ++e;  // sorted, disjoint, and one holds the byte
    return a.edges[e].lo == a.edges[e].hi;
  }
  // Whether `byte` from q into t continues the shared walk.
  static bool Shared(const Automaton& a, int32_t q, uint8_t byte, int32_t t) {
    return Walkable(a, t) && !(Narrow(a, t) && OneByteEdge(a, q, byte));
  }

  // The region of `state` as far as `depth` bytes reach: *states in canonical order (those
  // within depth - 1 bytes, then those exactly `depth` bytes away), *key the edges and
  // finality of the states within depth - 1 bytes (targets where the shared walk stops as -1),
  // then, when some state lies `depth` bytes away (*truncated), kTruncated and the finality of
  // those states; *index from state to region index. False when it exceeds `limit` states
  // (the outputs then incomplete).
  static bool Region(const Automaton& a, int32_t state, size_t limit, int32_t depth,
                     std::vector<int32_t>* key, std::vector<int32_t>* states,
                     absl::flat_hash_map<int32_t, int32_t>* index, bool* truncated) {
    key->clear();
    states->assign(1, state);
    index->clear();
    index->emplace(state, 0);
    *truncated = false;
    // Breadth first: states [i, level_end) are `distance` bytes from `state`.
    size_t level_end = 1;
    int32_t distance = 0;
    for (size_t i = 0; i < states->size(); ++i) {
      if (i == level_end) {
        ++distance;
        level_end = states->size();
      }
      if (distance >= depth) {
        // The walk enters these states too (at depth `depth`): whether each is final.
        *truncated = true;
        key->push_back(kTruncated);
        for (; i < states->size(); ++i) {
          key->push_back((a.states[(*states)[i]].flags & Automaton::kFinal) ? 1 : 0);
        }
        return true;
      }
      const Automaton::State& st = a.states[(*states)[i]];
      const int32_t final = (st.flags & Automaton::kFinal) ? 1 : 0;
      key->push_back(static_cast<int32_t>(st.edge_end - st.edge_begin) * 2 + final);
      for (uint32_t e = st.edge_begin; e < st.edge_end; ++e) {
        const Automaton::Edge& edge = a.edges[e];
        int32_t target = -1;
        if (Walkable(a, edge.target) && !Cut(a, edge.lo, edge.hi, edge.target)) {
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

  // The walk from `state`, down to `depth` when the region was truncated there (else to the
  // bottom of the trie), with `index` from Region.
  static std::shared_ptr<const StateWalk> Compute(
      const Automaton& a, const Vocabulary::Index& v, int32_t state, int32_t mask_words,
      const absl::flat_hash_map<int32_t, int32_t>& index, bool truncated, int32_t depth) {
    auto sw = std::make_shared<StateWalk>();
    sw->plain_mask.assign(static_cast<size_t>(mask_words), 0);
    const uint32_t stop = truncated ? static_cast<uint32_t>(depth) : UINT32_MAX;
    std::vector<int32_t> states(v.max_depth + 1);
    std::vector<std::pair<uint8_t, uint32_t>> returns;  // (byte, node)
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
      if (!Shared(a, q, v.byte[i], t)) {
        sw->boundaries.push_back({index.at(q), v.byte[i], i});
        i = v.end[i];
        continue;
      }
      states[d] = t;
      for (uint32_t k = v.tokens_begin[i]; k < v.tokens_begin[i + 1]; ++k) {
        const int32_t tok = v.token_ids[k];
        sw->plain_mask[tok >> 5] |= 1u << (tok & 31);
      }
      if (a.states[t].flags & Automaton::kFinal) {
        for (uint32_t m = i + 1; m < v.end[i]; m = v.end[m]) returns.emplace_back(v.byte[m], m);
      }
      if (d == stop) {
        if (i + 1 < v.end[i]) sw->frontier.push_back({index.at(t), i});
        i = v.end[i];
        continue;
      }
      ++i;
    }
    SortBoundaries(&sw->boundaries);
    if (!returns.empty()) {
      // Bucketed by byte (a counting sort: there may be a node per trie node).
      sw->return_begin.assign(257, 0);
      for (const auto& r : returns) ++sw->return_begin[r.first + 1];
      for (int b = 0; b < 256; ++b) sw->return_begin[b + 1] += sw->return_begin[b];
      std::vector<uint32_t> next(sw->return_begin.begin(), sw->return_begin.end() - 1);
      sw->return_nodes.resize(returns.size());
      for (const auto& r : returns) sw->return_nodes[next[r.first]++] = r.second;
    }
    return sw;
  }

  static void SortBoundaries(std::vector<Boundary>* boundaries) {
    std::sort(boundaries->begin(), boundaries->end(), [](const Boundary& x, const Boundary& y) {
      if (x.from != y.from) return x.from < y.from;
      if (x.byte != y.byte) return x.byte < y.byte;
      return x.node < y.node;
    });
  }
};

// A state's walk in one grammar: the shared walk, the region's states in this grammar, and
// what the shared walk left to the grammar (LocalWalk::Continue): the tokens allowed below its
// frontier and its cut edges through plain states (walkable and not final), and the
// boundaries, where the real stack is stepped.
struct LocalWalk {
  std::shared_ptr<const StateWalk> walk;
  std::vector<int32_t> region;  // the walk's region, then states only Continue reaches
  std::vector<int32_t> tokens;
  std::vector<StateWalk::Boundary> boundaries;  // by region index; sorted by (from, byte, node)

  size_t bytes() const {
    return walk->bytes() + region.size() * sizeof(int32_t) + tokens.size() * sizeof(int32_t) +
           boundaries.size() * sizeof(StateWalk::Boundary);
  }

  // Fills tokens and boundaries from the shared walk; `index` is the region's (from
  // StateWalk::Region), extended with the states met on the way.
  void Continue(const Automaton& a, const Vocabulary::Index& v,
                absl::flat_hash_map<int32_t, int32_t>* index) {
    std::vector<int32_t> states(v.max_depth + 1);
    for (const StateWalk::Boundary& b : walk->boundaries) {
      const int32_t q = region[b.from];
      const int32_t t = a.Next(q, b.byte);  // exists: the region is the walk's
      if (!(a.states[t].flags & Automaton::kPlain)) {
        boundaries.push_back(b);
        continue;
      }
      // A cut edge: in this grammar, a plain state.
      AddTokens(v, b.node);
      states[v.depth[b.node]] = t;
      WalkBelow(a, v, b.node, &states, index);
    }
    for (const StateWalk::Frontier& f : walk->frontier) {
      const int32_t t = region[f.state];
      states[v.depth[f.node]] = t;
      if (a.states[t].flags & Automaton::kPlain) {
        WalkBelow(a, v, f.node, &states, index);
        continue;
      }
      // A final state (its returns are the shared walk's): what stays in the rule steps with
      // the real stack, from the byte after.
      for (uint32_t m = f.node + 1; m < v.end[f.node]; m = v.end[m]) {
        if (a.Next(t, v.byte[m]) >= 0) AddBoundary(t, v.byte[m], m, index);
      }
    }
    StateWalk::SortBoundaries(&boundaries);
  }

 private:
  void AddTokens(const Vocabulary::Index& v, uint32_t node) {
    for (uint32_t k = v.tokens_begin[node]; k < v.tokens_begin[node + 1]; ++k) {
      tokens.push_back(v.token_ids[k]);
    }
  }

  void AddBoundary(int32_t q, uint8_t byte, uint32_t node,
                   absl::flat_hash_map<int32_t, int32_t>* index) {
    auto [it, inserted] = index->try_emplace(q, static_cast<int32_t>(region.size()));
    if (inserted) region.push_back(q);
    boundaries.push_back({it->second, byte, node});
  }

  // The plain walk of the subtree below `node`, whose byte led to (*states)[depth of node].
  void WalkBelow(const Automaton& a, const Vocabulary::Index& v, uint32_t node,
                 std::vector<int32_t>* states, absl::flat_hash_map<int32_t, int32_t>* index) {
    uint32_t i = node + 1;
    while (i < v.end[node]) {
      const uint32_t d = v.depth[i];
      const int32_t q = (*states)[d - 1];
      const int32_t t = a.Next(q, v.byte[i]);
      if (t < 0) {
        i = v.end[i];
        continue;
      }
      if (!(a.states[t].flags & Automaton::kPlain)) {
        AddBoundary(q, v.byte[i], i, index);
        i = v.end[i];
        continue;
      }
      (*states)[d] = t;
      AddTokens(v, i);
      ++i;
    }
  }
};

namespace {

// The mask of a one-stack configuration whose top state has walk `local`: the plain tokens,
// then each boundary group (same state, same byte) stepped once with the real stack and its
// subtrees walked, then the shared walk's returns: the configuration after popping the stack's
// frame, stepped once per byte, and the subtrees of that byte's return nodes walked.
//
// The stay and return branches are walked apart, and a token is allowed when some branch
// allows it: exact unless a step of all of them together would exceed the stack or closure
// bounds that no branch alone reached. Along a token at most 1 + (its length) branches are
// alive, each with at most `peak` stacks, so with returns the walk's bound is
// (max_depth + 2) * peak (2: the step into a final state also visits that state); the caller
// walks the whole configuration instead when that exceeds max_stacks. Returns the bound.
int64_t WalkOneStack(const Grammar& grammar, const Vocabulary::Index& v, const LocalWalk& local,
                     const internal::RawStack& stack, uint32_t* mask) {
  const StateWalk& sw = *local.walk;
  std::memcpy(mask, sw.plain_mask.data(), sw.plain_mask.size() * sizeof(uint32_t));
  for (const int32_t t : local.tokens) mask[t >> 5] |= 1u << (t & 31);
  const std::vector<StateWalk::Boundary>& boundaries = local.boundaries;
  WalkScratch& w = tls_walk;
  w.peak = 1;
  internal::RawConfig from, after;
  for (size_t g = 0; g < boundaries.size();) {
    size_t h = g;
    while (h < boundaries.size() && boundaries[h].from == boundaries[g].from &&
           boundaries[h].byte == boundaries[g].byte) {
      ++h;
    }
    from.stacks.assign(1, {local.region[boundaries[g].from], stack.parent});
    from.accepting = false;
    if (w.Step(grammar, from, boundaries[g].byte, &after)) {
      for (size_t k = g; k < h; ++k) {
        const uint32_t node = boundaries[k].node;
        SetTokens(v, node, mask);
        if (!after.stacks.empty() && node + 1 < v.end[node]) {
          WalkRange(grammar, v, node + 1, v.end[node], v.depth[node], after, mask);
        }
      }
    }
    g = h;
  }
  // The root frame returns to nothing: only its end, which adds no byte.
  if (sw.return_nodes.empty() || stack.parent == nullptr) return w.peak;
  const Automaton& a = grammar.automaton();
  internal::RawConfig returned;
  const std::vector<internal::RawStack> popped = {{stack.parent->state, stack.parent->parent}};
  const bool closed = w.stepper.Close(a, popped, w.arena, grammar.limits().max_stacks, &returned);
  w.peak =
      std::max({w.peak, w.stepper.last_visits() + 1, static_cast<int64_t>(returned.stacks.size())});
  if (closed) {
    for (int b = 0; b < 256; ++b) {
      const uint32_t begin = sw.return_begin[b], end = sw.return_begin[b + 1];
      if (begin == end || !w.Step(grammar, returned, static_cast<uint8_t>(b), &after)) continue;
      for (uint32_t k = begin; k < end; ++k) {
        const uint32_t node = sw.return_nodes[k];
        SetTokens(v, node, mask);
        if (!after.stacks.empty() && node + 1 < v.end[node]) {
          WalkRange(grammar, v, node + 1, v.end[node], v.depth[node], after, mask);
        }
      }
    }
  }
  return static_cast<int64_t>(v.max_depth + 2) * std::max<int64_t>(w.peak, 1);
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
    int64_t peak;  // WalkScratch::peak of its walk (of its stacks' walks, summed)
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
  bool truncated;
  if (StateWalk::Region(a, state, kMaxSharedRegion, kSharedWalkDepth, &key, &local->region, &index,
                        &truncated)) {
    local->walk = SharedWalks::Get().Find(v.uid, key);
    if (local->walk == nullptr) {
      local->walk =
          StateWalk::Compute(a, v, state, vocab_->mask_words(), index, truncated, kSharedWalkDepth);
      SharedWalks::Get().Put(v.uid, std::move(key), local->walk);
    }
  } else {
    // Too large a region to key: computed for this grammar alone, whole.
    StateWalk::Region(a, state, a.states.size(), INT32_MAX, &key, &local->region, &index,
                      &truncated);
    local->walk =
        StateWalk::Compute(a, v, state, vocab_->mask_words(), index, truncated, INT32_MAX);
  }
  local->Continue(a, v, &index);
  std::lock_guard<std::mutex> lock(c.mu);
  const size_t bytes = local->bytes();
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
  internal::RawConfig config;
  internal::MatcherAccess::Get(matcher, &config);
  ConfigMask(config, mask);
}

int64_t CompiledConstraint::ConfigMask(const internal::RawConfig& config, uint32_t* mask) {
  const size_t words = static_cast<size_t>(vocab_->mask_words());
  std::vector<int32_t> key;
  internal::SerializeConfig(config, &key);
  Cache& c = *cache_;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.index.find(key); it != c.index.end()) {
      c.lru.splice(c.lru.begin(), c.lru, it->second);
      ++c.hits;
      std::memcpy(mask, it->second->mask->data(), words * sizeof(uint32_t));
      return it->second->peak;
    }
    ++c.misses;
  }
  auto computed = std::make_shared<std::vector<uint32_t>>(words, 0);
  const Vocabulary::Index& v = vocab_->index();
  WalkScratch& w = tls_walk;
  int64_t peak = 0;
  if (config.stacks.size() == 1) {
    // One stack (the usual case): the per-state walk does most of the work, once per state.
    auto local = GetStateWalk(config.stacks[0].state);
    peak = WalkOneStack(*grammar_, v, *local, config.stacks[0], computed->data());
    w.arena.Reset();
  } else if (config.stacks.size() > 1) {
    // Stacks step independently, so the mask is the union of each stack's own (cached, and
    // quick through the per-state walks), unless a step of the whole configuration could
    // exceed the stack or closure bounds where no stack's own walk did. It cannot when the
    // stacks' bounds sum to at most max_stacks: a step of the union holds and visits at most
    // the sum of what its stacks' steps do.
    std::vector<uint32_t> one(words);
    internal::RawConfig single;
    for (const internal::RawStack& stack : config.stacks) {
      single.stacks.assign(1, stack);
      peak += ConfigMask(single, one.data());
      for (size_t k = 0; k < words; ++k) (*computed)[k] |= one[k];
    }
  }
  if (peak > grammar_->limits().max_stacks) {
    // Not provably exact in parts: the whole configuration, walked as one.
    std::fill(computed->begin(), computed->end(), 0u);
    w.peak = static_cast<int64_t>(config.stacks.size());
    WalkRange(*grammar_, v, 0, static_cast<uint32_t>(v.byte.size()), 0, config, computed->data());
    peak = w.peak;
    w.arena.Reset();
  }
  std::memcpy(mask, computed->data(), words * sizeof(uint32_t));
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.index.contains(key)) return peak;  // another thread computed it meanwhile
  c.lru.push_front({key, std::move(computed), peak});
  c.index.emplace(std::move(key), c.lru.begin());
  while (c.lru.size() > c.capacity) {
    c.index.erase(c.lru.back().key);
    c.lru.pop_back();
  }
  return peak;
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
