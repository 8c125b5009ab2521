// Compilation of a parse (gbnf_tree.h) into the byte-level automaton (automaton.h): each rule
// becomes an NFA over bytes (code-point sets split into UTF-8 byte-range sequences; groups and
// repetitions built inline, so `x*` is a loop rather than a recursive helper rule; references to
// other rules become call edges, except small non-recursive rules, which are inlined); the NFA is
// determinized by subset construction, call edges acting as symbols. Then nullability and the
// left-recursion check run on the result. Every stage counts against Limits so that hostile
// input costs bounded time and memory.
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

namespace pagoda::grammar::internal {
namespace {

// Rules whose inlined NFA is at most this many states are built into their callers, through at
// most kMaxInlineDepth nested inlinings.
constexpr int32_t kInlineStates = 256;
constexpr int32_t kMaxInlineDepth = 16;
// States with more edges than this get a 256-entry table, within kMaxTableEntries in all.
constexpr uint32_t kTableEdges = 6;
constexpr size_t kMaxTableEntries = size_t{1} << 22;

int EncodeUtf8(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// One code-point range whose UTF-8 encodings are exactly the byte strings b0 b1 .. with each
// b_i in [lo[i], hi[i]].
struct ByteSeq {
  int len;
  uint8_t lo[4], hi[4];
};

// Splits [lo, hi] (no surrogates) into ranges that encode as byte-range sequences: first at
// the encoded-length boundaries, then wherever a continuation byte does not span its full
// 0x80..0xBF range under a shared prefix.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      SplitUtf8(lo, end, out);
      SplitUtf8(end + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSeq seq;
  uint8_t a[4], b[4];
  seq.len = EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  for (int i = 0; i < seq.len; ++i) {
    seq.lo[i] = a[i];
    seq.hi[i] = b[i];
  }
  out->push_back(seq);
}

struct NfaState {
  std::vector<Automaton::Edge> edges;
  std::vector<int32_t> eps;
  std::vector<Automaton::Call> calls;  // ret: an NFA state
};

class Compiler {
 public:
  Compiler(const ParsedGbnf& parsed, const Limits& limits) : p_(parsed), limits_(limits) {}

  absl::StatusOr<std::unique_ptr<Automaton>> Compile() {
    auto a = std::make_unique<Automaton>();
    a_ = a.get();
    const int32_t n = static_cast<int32_t>(p_.names.size());
    a->rule_names = p_.names;
    a->root = p_.root;
    a->rule_start.assign(n, -1);
    ComputeInlining();
    for (int32_t r = 0; r < n; ++r) {
      if (auto s = CompileRule(r); !s.ok()) return s;
    }
    FinishStates();
    if (auto s = CheckLeftRecursion(); !s.ok()) return s;
    return a;
  }

 private:
  absl::Status TooBig() const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grammar needs more than max_states = %d automaton states", limits_.max_states));
  }

  // Rules not on a reference cycle whose NFA is small are built into their callers. Tarjan's
  // strongly connected components (iterative) give the cycles, callees before callers, so
  // each rule's inlined size is computed after its callees'.
  void ComputeInlining() {
    const int32_t n = static_cast<int32_t>(p_.names.size());
    inline_size_.assign(n, -1);
    std::vector<std::vector<int32_t>> refs(n);
    for (int32_t r = 0; r < n; ++r) CollectRefs(*p_.bodies[r], &refs[r]);
    std::vector<int32_t> index(n, -1), low(n, 0), scc_stack;
    std::vector<uint8_t> on_stack(n, 0);
    int32_t counter = 0;
    for (int32_t r0 = 0; r0 < n; ++r0) {
      if (index[r0] >= 0) continue;
      std::vector<std::pair<int32_t, size_t>> dfs{{r0, 0}};
      index[r0] = low[r0] = counter++;
      scc_stack.push_back(r0);
      on_stack[r0] = 1;
      while (!dfs.empty()) {
        auto& [r, i] = dfs.back();
        if (i < refs[r].size()) {
          const int32_t next = refs[r][i++];
          if (index[next] < 0) {
            index[next] = low[next] = counter++;
            scc_stack.push_back(next);
            on_stack[next] = 1;
            dfs.push_back({next, 0});
          } else if (on_stack[next]) {
            low[r] = std::min(low[r], index[next]);
          }
          continue;
        }
        const int32_t done = r;
        dfs.pop_back();
        if (!dfs.empty()) low[dfs.back().first] = std::min(low[dfs.back().first], low[done]);
        if (low[done] != index[done]) continue;
        std::vector<int32_t> scc;
        int32_t x;
        do {
          x = scc_stack.back();
          scc_stack.pop_back();
          on_stack[x] = 0;
          scc.push_back(x);
        } while (x != done);
        const bool self_loop =
            std::find(refs[done].begin(), refs[done].end(), done) != refs[done].end();
        if (scc.size() > 1 || self_loop) continue;  // on a cycle: always a call
        const int64_t size = ExprSize(*p_.bodies[done]);
        if (size <= kInlineStates) inline_size_[done] = static_cast<int32_t>(size);
      }
    }
  }

  static void CollectRefs(const Expr& e, std::vector<int32_t>* out) {
    if (e.kind == Expr::kRef) out->push_back(e.rule);
    for (const Expr& k : e.kids) CollectRefs(k, out);
  }

  // About how many NFA states the expression needs with inlinable rules built in (a call counts
  // one state).
  int64_t ExprSize(const Expr& e) const {
    switch (e.kind) {
      case Expr::kLiteral: {
        int64_t n = 0;
        uint8_t buf[4];
        for (char32_t c : e.text) n += EncodeUtf8(c, buf);
        return n + 1;
      }
      case Expr::kClass:
        return 4 * static_cast<int64_t>(e.ranges.size()) + 2;
      case Expr::kRef: {
        const int32_t s = inline_size_[e.rule];
        return s >= 0 ? s : 1;
      }
      case Expr::kRepeat: {
        const int64_t k = ExprSize(e.kids[0]);
        const int64_t copies = e.max < 0 ? e.min + 1 : e.max;
        return std::min<int64_t>(k * (copies + 1) + 2, int64_t{1} << 40);
      }
      default: {
        int64_t n = 2;
        for (const Expr& k : e.kids) n = std::min<int64_t>(n + ExprSize(k), int64_t{1} << 40);
        return n;
      }
    }
  }

  int32_t NewState() {
    nfa_.emplace_back();
    return static_cast<int32_t>(nfa_.size()) - 1;
  }

  absl::Status AddRanges(const Ranges& ranges, int32_t from, int32_t to) {
    std::vector<ByteSeq> seqs;
    for (const auto& r : ranges) SplitUtf8(r.first, r.second, &seqs);
    for (const ByteSeq& s : seqs) {
      int32_t cur = from;
      for (int i = 0; i < s.len; ++i) {
        const int32_t next = i + 1 == s.len ? to : NewState();
        nfa_[cur].edges.push_back({s.lo[i], s.hi[i], next});
        cur = next;
      }
    }
    if (static_cast<int64_t>(nfa_.size()) > limits_.max_states) return TooBig();
    return absl::OkStatus();
  }

  // Builds `e` from NFA state `from`; *to receives its end state.
  absl::Status Build(const Expr& e, int32_t from, int32_t* to, int32_t inline_depth) {
    if (static_cast<int64_t>(nfa_.size()) > limits_.max_states) return TooBig();
    switch (e.kind) {
      case Expr::kLiteral: {
        int32_t cur = from;
        for (char32_t c : e.text) {
          uint8_t buf[4];
          const int n = EncodeUtf8(c, buf);
          for (int i = 0; i < n; ++i) {
            const int32_t next = NewState();
            nfa_[cur].edges.push_back({buf[i], buf[i], next});
            cur = next;
          }
        }
        *to = cur;
        return absl::OkStatus();
      }
      case Expr::kClass:
        *to = NewState();
        return AddRanges(e.ranges, from, *to);
      case Expr::kRef:
        if (inline_size_[e.rule] >= 0 && inline_depth < kMaxInlineDepth) {
          return Build(*p_.bodies[e.rule], from, to, inline_depth + 1);
        }
        *to = NewState();
        nfa_[from].calls.push_back({e.rule, *to});
        return absl::OkStatus();
      case Expr::kSeq: {
        int32_t cur = from;
        for (const Expr& k : e.kids) {
          int32_t next;
          if (auto s = Build(k, cur, &next, inline_depth); !s.ok()) return s;
          cur = next;
        }
        *to = cur;
        return absl::OkStatus();
      }
      case Expr::kAlt: {
        const int32_t end = NewState();
        for (const Expr& k : e.kids) {
          const int32_t start = NewState();
          nfa_[from].eps.push_back(start);
          int32_t kend;
          if (auto s = Build(k, start, &kend, inline_depth); !s.ok()) return s;
          nfa_[kend].eps.push_back(end);
        }
        *to = end;
        return absl::OkStatus();
      }
      case Expr::kRepeat: {
        const Expr& x = e.kids[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          // A fresh start state per copy keeps copies from sharing edges.
          const int32_t start = NewState();
          nfa_[cur].eps.push_back(start);
          if (auto s = Build(x, start, &cur, inline_depth); !s.ok()) return s;
        }
        const int32_t end = NewState();
        nfa_[cur].eps.push_back(end);
        if (e.max < 0) {
          // Loop: end -> x -> end.
          const int32_t start = NewState();
          nfa_[end].eps.push_back(start);
          int32_t kend;
          if (auto s = Build(x, start, &kend, inline_depth); !s.ok()) return s;
          nfa_[kend].eps.push_back(end);
        } else {
          // x{0,k} as x (x (x)?)?)?: each copy may be the last, so the NFA stays unambiguous.
          for (int32_t i = e.min; i < e.max; ++i) {
            const int32_t start = NewState();
            nfa_[cur].eps.push_back(start);
            if (auto s = Build(x, start, &cur, inline_depth); !s.ok()) return s;
            nfa_[cur].eps.push_back(end);
          }
        }
        *to = end;
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown expression");
  }

  void EpsClosure(std::vector<int32_t>* set) {
    ++stamp_;
    std::vector<int32_t>& s = *set;
    for (int32_t x : s) mark_[x] = stamp_;
    for (size_t i = 0; i < s.size(); ++i) {
      for (int32_t y : nfa_[s[i]].eps) {
        if (mark_[y] != stamp_) {
          mark_[y] = stamp_;
          s.push_back(y);
        }
      }
    }
    std::sort(s.begin(), s.end());
  }

  absl::Status CompileRule(int32_t r) {
    nfa_.clear();
    const int32_t start = NewState();
    int32_t end;
    if (auto s = Build(*p_.bodies[r], start, &end, 0); !s.ok()) return s;
    mark_.assign(nfa_.size(), 0);
    stamp_ = 0;

    // Subset construction. DFA states of this rule are numbered from `base`.
    const int32_t base = static_cast<int32_t>(a_->states.size());
    absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> subsets;
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      EpsClosure(&set);
      auto [it, inserted] = ids.try_emplace(set, base + static_cast<int32_t>(subsets.size()));
      if (inserted) subsets.push_back(std::move(set));
      return it->second;
    };
    a_->rule_start[r] = intern({start});
    int64_t work = 0;
    const int64_t work_limit = int64_t{64} * limits_.max_states;
    struct Pending {
      std::vector<Automaton::Edge> edges;
      std::vector<Automaton::Call> calls;
      bool final;
    };
    std::vector<Pending> built;
    for (size_t i = 0; i < subsets.size(); ++i) {
      if (static_cast<int64_t>(base) + static_cast<int64_t>(subsets.size()) > limits_.max_states) {
        return TooBig();
      }
      Pending out;
      const std::vector<int32_t> set = subsets[i];  // copy: intern() may grow `subsets`
      out.final = std::binary_search(set.begin(), set.end(), end);
      std::vector<Automaton::Edge> edges;
      std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, nfa ret)
      for (int32_t s : set) {
        edges.insert(edges.end(), nfa_[s].edges.begin(), nfa_[s].edges.end());
        for (const auto& c : nfa_[s].calls) calls.push_back({c.rule, c.ret});
      }
      work += static_cast<int64_t>(set.size() + edges.size() + calls.size());
      if (work > work_limit) return TooBig();
      // Elementary byte intervals between edge boundaries.
      std::vector<int> bounds;
      for (const auto& e : edges) {
        bounds.push_back(e.lo);
        bounds.push_back(e.hi + 1);
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        const int lo = bounds[b], hi = bounds[b + 1] - 1;
        std::vector<int32_t> targets;
        for (const auto& e : edges) {
          if (e.lo <= lo && hi <= e.hi) targets.push_back(e.target);
        }
        work += static_cast<int64_t>(edges.size());
        if (targets.empty()) continue;
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        const int32_t t = intern(std::move(targets));
        if (!out.edges.empty() && out.edges.back().target == t && out.edges.back().hi + 1 == lo) {
          out.edges.back().hi = static_cast<uint8_t>(hi);
        } else {
          out.edges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), t});
        }
      }
      std::sort(calls.begin(), calls.end());
      for (size_t c = 0; c < calls.size();) {
        size_t d = c;
        std::vector<int32_t> rets;
        while (d < calls.size() && calls[d].first == calls[c].first)
          rets.push_back(calls[d++].second);
        out.calls.push_back({calls[c].first, intern(std::move(rets))});
        c = d;
      }
      built.push_back(std::move(out));
    }
    for (Pending& p : built) {
      Automaton::State st;
      st.rule = r;
      st.edge_begin = static_cast<uint32_t>(a_->edges.size());
      a_->edges.insert(a_->edges.end(), p.edges.begin(), p.edges.end());
      st.edge_end = static_cast<uint32_t>(a_->edges.size());
      st.call_begin = static_cast<uint32_t>(a_->calls.size());
      a_->calls.insert(a_->calls.end(), p.calls.begin(), p.calls.end());
      st.call_end = static_cast<uint32_t>(a_->calls.size());
      st.flags = p.final ? Automaton::kFinal : 0;
      a_->states.push_back(st);
    }
    return absl::OkStatus();
  }

  void FinishStates() {
    Automaton& a = *a_;
    // Calls name rules; their starts are now known. Nothing to patch: Call::rule stays a rule.
    for (Automaton::State& s : a.states) {
      const bool edges = s.edge_end > s.edge_begin;
      const bool calls = s.call_end > s.call_begin;
      const bool final = (s.flags & Automaton::kFinal) != 0;
      if (edges) s.flags |= Automaton::kHasEdges;
      if (edges && !calls && !final) s.flags |= Automaton::kPlain;
      if (final && !edges && !calls) s.flags |= Automaton::kPureFinal;
      if (s.edge_end - s.edge_begin > kTableEdges && a.tables.size() + 256 <= kMaxTableEntries) {
        s.table = static_cast<int32_t>(a.tables.size());
        a.tables.resize(a.tables.size() + 256, -1);
        for (uint32_t e = s.edge_begin; e < s.edge_end; ++e) {
          for (int b = a.edges[e].lo; b <= a.edges[e].hi; ++b) {
            a.tables[s.table + b] = a.edges[e].target;
          }
        }
      }
    }
  }

  // Nullable rules, then the "may call at a nullable prefix" graph must be acyclic.
  absl::Status CheckLeftRecursion() {
    const Automaton& a = *a_;
    const int32_t n = static_cast<int32_t>(a.rule_start.size());
    std::vector<uint8_t> nullable(n, 0);
    // States of each rule reachable from its start through calls of nullable rules.
    auto prefix_states = [&](int32_t r, std::vector<int32_t>* out) {
      out->clear();
      out->push_back(a.rule_start[r]);
      ++stamp_;
      if (mark_.size() < a.states.size()) mark_.assign(a.states.size(), 0);
      mark_[a.rule_start[r]] = stamp_;
      for (size_t i = 0; i < out->size(); ++i) {
        const auto& s = a.states[(*out)[i]];
        for (uint32_t c = s.call_begin; c < s.call_end; ++c) {
          const int32_t ret = a.calls[c].ret;
          if (nullable[a.calls[c].rule] && mark_[ret] != stamp_) {
            mark_[ret] = stamp_;
            out->push_back(ret);
          }
        }
      }
    };
    mark_.assign(a.states.size(), 0);
    stamp_ = 0;
    std::vector<int32_t> reach;
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        prefix_states(r, &reach);
        for (int32_t s : reach) {
          if (a.states[s].flags & Automaton::kFinal) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> graph(n);
    for (int32_t r = 0; r < n; ++r) {
      prefix_states(r, &reach);
      for (int32_t s : reach) {
        const auto& st = a.states[s];
        for (uint32_t c = st.call_begin; c < st.call_end; ++c) graph[r].push_back(a.calls[c].rule);
      }
      std::sort(graph[r].begin(), graph[r].end());
      graph[r].erase(std::unique(graph[r].begin(), graph[r].end()), graph[r].end());
    }
    // Iterative DFS for a cycle.
    std::vector<uint8_t> color(n, 0);
    std::vector<int32_t> parent(n, -1);
    for (int32_t r0 = 0; r0 < n; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<int32_t, size_t>> stack{{r0, 0}};
      color[r0] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i == graph[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t next = graph[r][i++];
        if (color[next] == 1) {
          std::vector<std::string> path{a.rule_names[next]};
          for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
            path.push_back(a.rule_names[it->first]);
            if (it->first == next) break;
          }
          std::reverse(path.begin(), path.end());
          return absl::InvalidArgumentError(absl::StrFormat(
              "left recursion: rule '%s' can reach itself without consuming input (%s)",
              a.rule_names[next], absl::StrJoin(path, " -> ")));
        }
        if (color[next] == 0) {
          color[next] = 1;
          stack.push_back({next, 0});
        }
      }
    }
    return absl::OkStatus();
  }

  const ParsedGbnf& p_;
  const Limits& limits_;
  Automaton* a_ = nullptr;
  std::vector<int32_t> inline_size_;
  std::vector<NfaState> nfa_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Automaton>> CompileGbnf(const ParsedGbnf& parsed,
                                                       const Limits& limits) {
  Compiler compiler(parsed, limits);
  return compiler.Compile();
}

}  // namespace pagoda::grammar::internal
