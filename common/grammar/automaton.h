// The compiled form of a Grammar and the parse-stack machinery that grammar.cc (Matcher) and
// token_matcher.cc (mask walks) share. Internal to pagoda_grammar: nothing outside
// common/grammar/ includes it.
//
// Automaton: each rule is a DFA over bytes whose states also carry "call rule R, then continue
// at state q" edges and a final flag (the rule may end here). All rules' states live in one
// numbering. A DFA state has at most one target per byte.
//
// Parse stacks: a stack is (top state, parent), where parent is an immutable StackNode chain
// holding the return states of the calls in progress (nullptr: the root rule's frame). Nodes
// are shared between stacks and between Matcher copies; heap nodes are reference counted
// (atomically, since forked matchers may live on different threads), arena nodes belong to one
// mask walk and are never counted. Each node carries a structural hash, so stacks that are
// equal as sequences of states compare equal whatever nodes represent them.
//
// A configuration is the set of stacks after a byte, closed under calls and returns: it keeps
// only stacks whose top state consumes bytes, sorted and deduplicated, plus `accepting` (the
// root rule could end here). Stepper::Step consumes one byte; a step fails when no stack moves,
// or when the result would exceed max_stacks, or when the closure exceeds its work bound.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/grammar/grammar.h"

namespace pagoda::grammar {

struct Grammar::Automaton {
  struct Edge {  // bytes lo..hi go to target
    uint8_t lo;
    uint8_t hi;
    int32_t target;
  };
  struct Call {  // call `rule`, then continue at `ret`
    int32_t rule;
    int32_t ret;
  };
  enum : uint8_t {
    kFinal = 1,      // the rule may end here
    kHasEdges = 2,   // consumes some byte
    kPlain = 4,      // has edges, no calls, not final: a byte into it needs no closure
    kPureFinal = 8,  // final, no edges, no calls: returning here returns again (tail call)
  };
  struct State {
    uint32_t edge_begin = 0, edge_end = 0;  // into edges, sorted by lo, disjoint
    uint32_t call_begin = 0, call_end = 0;  // into calls
    int32_t table = -1;  // offset into tables (256 targets) for states with many edges
    int32_t rule = 0;
    uint8_t flags = 0;
  };

  std::vector<State> states;
  std::vector<Edge> edges;
  std::vector<Call> calls;
  std::vector<int32_t> tables;
  std::vector<int32_t> rule_start;  // rule -> start state
  std::vector<std::string> rule_names;
  int32_t root = 0;  // the root rule

  // The target of `byte` from `state`, or -1.
  int32_t Next(int32_t state, uint8_t byte) const {
    const State& s = states[state];
    if (s.table >= 0) return tables[s.table + byte];
    for (uint32_t e = s.edge_begin; e < s.edge_end; ++e) {
      if (byte < edges[e].lo) return -1;
      if (byte <= edges[e].hi) return edges[e].target;
    }
    return -1;
  }
  size_t MemoryBytes() const;
};

using Automaton = Grammar::Automaton;

namespace internal {

struct StackNode {
  int32_t state;   // the return state of this frame
  uint32_t depth;  // frames below and including this one
  uint64_t hash;   // structural: of (state, parent's hash)
  const StackNode* parent;
  bool heap;  // reference counted (else owned by a walk's arena)
  mutable std::atomic<int32_t> refs{0};
};

uint64_t NodeHash(int32_t state, const StackNode* parent);
// Total order on node chains by content (equal iff the same sequence of states).
int CompareChains(const StackNode* a, const StackNode* b);

struct RawStack {
  int32_t state;
  const StackNode* parent;
};

struct RawConfig {
  std::vector<RawStack> stacks;  // sorted by (state, chain), unique
  bool accepting = false;
  void clear() {
    stacks.clear();
    accepting = false;
  }
  // Some stack moved, or the root could end: the byte that led here was allowed.
  bool alive() const { return accepting || !stacks.empty(); }
};

// Creates the nodes a closure pushes.
class NodeMaker {
 public:
  virtual ~NodeMaker() = default;
  virtual const StackNode* Make(int32_t state, const StackNode* parent) = 0;
};

// Heap nodes owned by the references it keeps until destroyed (or handed to a Matcher).
class HeapNodeMaker final : public NodeMaker {
 public:
  const StackNode* Make(int32_t state, const StackNode* parent) override;
  void Clear() { made_.clear(); }

 private:
  std::vector<StackRef> made_;
};

// Uncounted nodes in chunks, freed together by Reset (a mask walk's scratch).
class ArenaNodeMaker final : public NodeMaker {
 public:
  const StackNode* Make(int32_t state, const StackNode* parent) override;
  void Reset();

 private:
  static constexpr size_t kChunk = 4096;
  std::vector<std::unique_ptr<StackNode[]>> chunks_;
  size_t used_ = kChunk;  // in the last chunk
  size_t chunk_index_ = 0;
};

// Scratch space for closures; one per thread (not shared).
class Stepper {
 public:
  // Closes `seeds` (stacks whose top state was just reached) into `out`; false when over the
  // stack cap or the work bound.
  bool Close(const Automaton& a, const std::vector<RawStack>& seeds, NodeMaker& maker,
             int32_t max_stacks, RawConfig* out);
  // Consumes `byte` from `in` into `out`; false when the byte is not allowed.
  bool Step(const Automaton& a, const RawConfig& in, uint8_t byte, NodeMaker& maker,
            int32_t max_stacks, RawConfig* out);
  // The stacks the last Close or Step visited in its closure (0: a Step that needed none). It
  // bounds the stacks that closure made, before and after deduplication, and exceeds
  // max_stacks whenever a bound made the call fail.
  int64_t last_visits() const { return last_visits_; }

 private:
  struct PairHash {
    size_t operator()(const std::pair<int32_t, const StackNode*>& p) const {
      return std::hash<const void*>()(p.second) * 31 + static_cast<size_t>(p.first);
    }
  };
  std::vector<RawStack> seeds_;
  std::vector<RawStack> work_;
  absl::flat_hash_set<std::pair<int32_t, const StackNode*>, PairHash> visited_;
  absl::flat_hash_map<std::pair<int32_t, const StackNode*>, const StackNode*, PairHash> memo_;
  int64_t last_visits_ = 0;
};

// Sorts and deduplicates stacks by content.
void Canonicalize(std::vector<RawStack>* stacks);

// The canonical content of a configuration as integers (equal configurations give equal keys):
// the mask cache's key.
void SerializeConfig(const RawConfig& config, std::vector<int32_t>* out);

// Read access to a Matcher's configuration for the token matcher.
struct MatcherAccess {
  static void Get(const Matcher& m, RawConfig* out);
};

}  // namespace internal
}  // namespace pagoda::grammar
