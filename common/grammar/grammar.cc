// Grammar::FromGbnf (the parse, gbnf_parse.cc, then the compilation, gbnf_compile.cc), the
// parse stacks and the Matcher that runs the automaton over bytes.
#include "common/grammar/grammar.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grammar/automaton.h"
#include "common/grammar/gbnf_tree.h"
#include "common/status_macros.h"

namespace pagoda::grammar {
namespace {

thread_local internal::Stepper tls_stepper;
thread_local internal::ArenaNodeMaker tls_arena;

}  // namespace

size_t Automaton::MemoryBytes() const {
  size_t n = states.capacity() * sizeof(State) + edges.capacity() * sizeof(Edge) +
             calls.capacity() * sizeof(Call) + tables.capacity() * sizeof(int32_t) +
             rule_start.capacity() * sizeof(int32_t);
  for (const auto& name : rule_names) n += sizeof(std::string) + name.capacity();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Stacks

namespace internal {

uint64_t NodeHash(int32_t state, const StackNode* parent) {
  uint64_t h = (parent != nullptr ? parent->hash : 0x243F6A8885A308D3ull) ^
               (static_cast<uint64_t>(static_cast<uint32_t>(state)) * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return h;
}

int CompareChains(const StackNode* a, const StackNode* b) {
  while (a != b) {
    if (a == nullptr) return -1;
    if (b == nullptr) return 1;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    a = a->parent;
    b = b->parent;
  }
  return 0;
}

StackRef::StackRef(const StackNode* node) : node_(node) {
  if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
}

StackRef::StackRef(const StackRef& other) : node_(other.node_) {
  if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
}

StackRef::~StackRef() {
  // Iterative, so a deep chain is freed without deep recursion.
  const StackNode* n = node_;
  while (n != nullptr && n->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    const StackNode* parent = n->parent;
    delete n;
    n = parent;
  }
}

const StackNode* HeapNodeMaker::Make(int32_t state, const StackNode* parent) {
  auto* n =
      new StackNode{state, parent ? parent->depth + 1 : 1, NodeHash(state, parent), parent, true};
  // The node owns a reference to its parent (heap nodes only have heap parents).
  if (parent != nullptr) parent->refs.fetch_add(1, std::memory_order_relaxed);
  made_.emplace_back(n);
  return n;
}

const StackNode* ArenaNodeMaker::Make(int32_t state, const StackNode* parent) {
  if (used_ == kChunk) {
    if (chunks_.empty() || chunk_index_ + 1 >= chunks_.size()) {
      chunks_.push_back(std::make_unique<StackNode[]>(kChunk));
      chunk_index_ = chunks_.size() - 1;
    } else {
      ++chunk_index_;
    }
    used_ = 0;
  }
  StackNode& n = chunks_[chunk_index_][used_++];
  n.state = state;
  n.depth = parent ? parent->depth + 1 : 1;
  n.hash = NodeHash(state, parent);
  n.parent = parent;
  n.heap = false;
  return &n;
}

void ArenaNodeMaker::Reset() {
  // Keeps a few chunks for the next walk.
  if (chunks_.size() > 64) chunks_.resize(64);
  chunk_index_ = 0;
  used_ = chunks_.empty() ? kChunk : 0;
}

namespace {
bool StackLess(const RawStack& x, const RawStack& y) {
  if (x.state != y.state) return x.state < y.state;
  return CompareChains(x.parent, y.parent) < 0;
}
bool StackEqual(const RawStack& x, const RawStack& y) {
  return x.state == y.state && CompareChains(x.parent, y.parent) == 0;
}
}  // namespace

void Canonicalize(std::vector<RawStack>* stacks) {
  if (stacks->size() < 2) return;
  std::sort(stacks->begin(), stacks->end(), StackLess);
  stacks->erase(std::unique(stacks->begin(), stacks->end(), StackEqual), stacks->end());
}

bool Stepper::Close(const Automaton& a, const std::vector<RawStack>& seeds, NodeMaker& maker,
                    int32_t max_stacks, RawConfig* out) {
  out->clear();
  visited_.clear();
  memo_.clear();
  work_.assign(seeds.begin(), seeds.end());
  // Each visit either yields an output stack, pops a frame or pushes one; the bound keeps a
  // pathological closure (deep nullable frames, wide nullable fan-out) from running long.
  const int64_t max_visits = int64_t{16} * max_stacks + 4096;
  last_visits_ = 0;
  while (!work_.empty()) {
    const RawStack cur = work_.back();
    work_.pop_back();
    if (!visited_.insert({cur.state, cur.parent}).second) continue;
    if (++last_visits_ > max_visits) return false;
    const Automaton::State& s = a.states[cur.state];
    if (s.flags & Automaton::kHasEdges) {
      out->stacks.push_back(cur);
      if (static_cast<int64_t>(out->stacks.size()) > 4 * static_cast<int64_t>(max_stacks)) {
        return false;
      }
    }
    if (s.flags & Automaton::kFinal) {
      if (cur.parent == nullptr) {
        out->accepting = true;
      } else {
        work_.push_back({cur.parent->state, cur.parent->parent});
      }
    }
    for (uint32_t c = s.call_begin; c < s.call_end; ++c) {
      const Automaton::Call& call = a.calls[c];
      const StackNode* parent = cur.parent;
      if (!(a.states[call.ret].flags & Automaton::kPureFinal)) {
        auto [it, inserted] = memo_.try_emplace({call.ret, cur.parent}, nullptr);
        if (inserted) it->second = maker.Make(call.ret, cur.parent);
        parent = it->second;
      }
      work_.push_back({a.rule_start[call.rule], parent});
    }
  }
  Canonicalize(&out->stacks);
  return static_cast<int64_t>(out->stacks.size()) <= max_stacks;
}

bool Stepper::Step(const Automaton& a, const RawConfig& in, uint8_t byte, NodeMaker& maker,
                   int32_t max_stacks, RawConfig* out) {
  seeds_.clear();
  last_visits_ = 0;
  bool plain = true;
  for (const RawStack& s : in.stacks) {
    const int32_t t = a.Next(s.state, byte);
    if (t < 0) continue;
    seeds_.push_back({t, s.parent});
    if (!(a.states[t].flags & Automaton::kPlain)) plain = false;
  }
  if (seeds_.empty()) {
    out->clear();
    return false;
  }
  if (plain) {
    // Every stack moved within its rule: no calls or returns to follow.
    out->accepting = false;
    out->stacks.assign(seeds_.begin(), seeds_.end());
    Canonicalize(&out->stacks);
    return true;
  }
  if (!Close(a, seeds_, maker, max_stacks, out)) {
    out->clear();
    return false;
  }
  return out->alive();
}

void SerializeConfig(const RawConfig& config, std::vector<int32_t>* out) {
  out->clear();
  out->push_back(config.accepting ? 1 : 0);
  for (const RawStack& s : config.stacks) {
    out->push_back(s.parent ? static_cast<int32_t>(s.parent->depth) : 0);
    out->push_back(s.state);
    for (const StackNode* n = s.parent; n != nullptr; n = n->parent) out->push_back(n->state);
  }
}

void MatcherAccess::Get(const Matcher& m, RawConfig* out) {
  out->stacks.clear();
  for (const auto& s : m.stacks_) out->stacks.push_back({s.state, s.parent.get()});
  out->accepting = m.accepting_;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Grammar and Matcher

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::FromGbnf(std::string_view gbnf,
                                                                 const Limits& limits) {
  if (gbnf.size() > limits.max_source_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar text is %d bytes, over max_source_bytes = %d", gbnf.size(),
                        limits.max_source_bytes));
  }
  absl::StatusOr<internal::ParsedGbnf> parsed = internal::ParseGbnf(gbnf, limits);
  if (!parsed.ok()) return parsed.status();
  auto automaton = internal::CompileGbnf(*parsed, limits);
  if (!automaton.ok()) return automaton.status();
  return std::make_shared<const Grammar>(std::string(gbnf), *std::move(automaton), limits);
}

Grammar::Grammar(std::string source, std::unique_ptr<Automaton> automaton, Limits limits)
    : source_(std::move(source)), automaton_(std::move(automaton)), limits_(limits) {}

Grammar::~Grammar() = default;

size_t Grammar::memory_bytes() const {
  return sizeof(Grammar) + source_.capacity() + automaton_->MemoryBytes();
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const Automaton& a = grammar_->automaton();
  internal::HeapNodeMaker maker;
  internal::RawConfig config;
  std::vector<internal::RawStack> seeds{{a.rule_start[a.root], nullptr}};
  if (!tls_stepper.Close(a, seeds, maker, grammar_->limits().max_stacks, &config)) return;
  for (const auto& s : config.stacks) stacks_.push_back({s.state, internal::StackRef(s.parent)});
  accepting_ = config.accepting;
}

bool Matcher::Advance(std::string_view bytes) {
  if (bytes.empty()) return true;
  const Automaton& a = grammar_->automaton();
  internal::HeapNodeMaker maker;
  internal::RawConfig cur, next;
  internal::MatcherAccess::Get(*this, &cur);
  for (char c : bytes) {
    if (!tls_stepper.Step(a, cur, static_cast<uint8_t>(c), maker, grammar_->limits().max_stacks,
                          &next)) {
      return false;
    }
    std::swap(cur, next);
  }
  std::vector<Stack> stacks;
  stacks.reserve(cur.stacks.size());
  for (const auto& s : cur.stacks) stacks.push_back({s.state, internal::StackRef(s.parent)});
  stacks_ = std::move(stacks);
  accepting_ = cur.accepting;
  return true;
}

bool Matcher::CanAdvance(std::string_view bytes) const {
  if (bytes.empty()) return true;
  const Automaton& a = grammar_->automaton();
  internal::RawConfig cur, next;
  internal::MatcherAccess::Get(*this, &cur);
  bool ok = true;
  for (char c : bytes) {
    if (!tls_stepper.Step(a, cur, static_cast<uint8_t>(c), tls_arena, grammar_->limits().max_stacks,
                          &next)) {
      ok = false;
      break;
    }
    std::swap(cur, next);
  }
  tls_arena.Reset();
  return ok;
}

bool Matcher::Accepting() const { return accepting_; }

bool Matcher::Complete() const { return accepting_ && stacks_.empty(); }

}  // namespace pagoda::grammar
