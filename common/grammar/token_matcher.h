// Token-level matching: which vocabulary tokens may come next under a Grammar, as a bit mask the
// sampler applies before it draws.
//
// Contract:
//  * Vocabulary holds each token's bytes (what the token adds to the text: the scheduler's
//    Tokenizer::TokenBytes, computed the same way by the worker from the GGUF) and which tokens
//    are excluded from constrained text: control and user-defined tokens (special tokens never
//    appear inside the constrained text) and tokens with no bytes. It is immutable and shared.
//  * A TokenMatcher follows one generation: Accept() each sampled token in order; FillMask()
//    sets bit t (word t / 32, bit t % 32) of a vocab_size-bit mask for every token allowed
//    next: non-excluded tokens whose bytes the grammar accepts from the current state, plus the
//    end tokens (EOS, EOT, EOM, the request's stop ids) exactly when the grammar is accepting.
//    When nothing else is allowed and the grammar is not accepting (a vocabulary that cannot
//    spell what the grammar needs), the end tokens are allowed, so a generation always ends.
//    An end token is only ever an end, never text, even when it also has bytes (a stop id
//    such as "\n"). Once Finished(), the mask holds the end tokens alone.
//  * Accept() of an end token finishes the matcher (Finished()); of a token the mask would not
//    allow, returns false and changes nothing. The mask is exact: it allows a text token iff
//    Matcher::Advance(its bytes) succeeds (Limits::max_stacks included).
//  * A TokenMatcher is a value: copy it to fork (n > 1 completions share a prompt, not a state).
//    Masks are cached per (Grammar, Vocabulary) by parse state in a bounded cache that
//    TokenMatchers of the same grammar share (CompiledConstraint; it lives as long as some
//    TokenMatcher or caller holds it, so a worker that compiles the same GBNF again gets a
//    fresh cache unless it keeps the Grammar and its constraint); FillMask is safe to call from
//    several threads on different TokenMatchers.
//
// Cost: a cache hit is a copy of the mask. A miss walks the vocabulary's token trie with the
// parse state; for a single-stack state (the usual one) the part of the walk that stays inside
// the top rule is precomputed once per state, its costly part shared process-wide between the
// states of all grammars whose region reads the same to a fixed depth (token_matcher.cc: the
// positions of a bounded repetition, what follows a string whatever the schema), so a miss
// costs the steps that leave the rule. A configuration of several stacks (a rule that may end
// or go on) is the union of its stacks' masks, each cached as its own configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"

namespace pagoda::grammar {

class Vocabulary {
 public:
  // token_bytes[id]: the token's bytes; excluded[id]: never allowed inside constrained text.
  // The two have one entry per token id.
  static std::shared_ptr<const Vocabulary> Create(std::vector<std::string> token_bytes,
                                                  std::vector<bool> excluded);
  int32_t size() const;
  const std::string& token_bytes(int32_t id) const;
  // Excluded by the caller, or has no bytes: never allowed as text.
  bool excluded(int32_t id) const;
  // Words of a mask: (size() + 31) / 32. Bits past size() are always clear.
  int32_t mask_words() const { return (size() + 31) / 32; }

  struct Index;  // the token trie (token_matcher.cc)
  const Index& index() const { return *index_; }
  ~Vocabulary();

 private:
  Vocabulary() = default;
  std::unique_ptr<Index> index_;
};

struct LocalWalk;  // token_matcher.cc
namespace internal {
struct RawConfig;  // automaton.h
}  // namespace internal

// The shared state of one grammar over one vocabulary: the mask cache (a bounded LRU keyed by
// the canonical parse configuration). Thread-safe.
class CompiledConstraint {
 public:
  // The live constraint of (grammar, vocab) in this process, created on first use: every
  // TokenMatcher of the same pair shares its cache. Kept alive by its users only.
  static std::shared_ptr<CompiledConstraint> Get(std::shared_ptr<const Grammar> grammar,
                                                 std::shared_ptr<const Vocabulary> vocab);
  // A constraint of its own (not shared through Get), with room for `cache_entries` masks.
  CompiledConstraint(std::shared_ptr<const Grammar> grammar,
                     std::shared_ptr<const Vocabulary> vocab, int32_t cache_entries);
  ~CompiledConstraint();

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }

  // Writes the mask of text tokens (non-excluded tokens whose bytes the grammar accepts from
  // `matcher`'s state; no end-token rules) into mask[0, vocab.mask_words()).
  void TextMask(const Matcher& matcher, uint32_t* mask);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t entries = 0;
  };
  Stats stats() const;

 private:
  struct Cache;
  std::shared_ptr<const LocalWalk> GetStateWalk(int32_t state);
  // Writes the text mask of `config` (from the cache, or computed and cached) and returns a
  // bound on the stacks a step of its walk holds or visits in a closure, which a union of
  // masks computed apart sums to know whether it is exact.
  int64_t ConfigMask(const internal::RawConfig& config, uint32_t* mask);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<Cache> cache_;
};

class TokenMatcher {
 public:
  // Shares the mask cache of (grammar, vocab) through CompiledConstraint::Get.
  TokenMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
               std::vector<int32_t> end_tokens);
  TokenMatcher(std::shared_ptr<CompiledConstraint> constraint, std::vector<int32_t> end_tokens);

  bool Accept(int32_t token);
  // Writes the whole mask: mask.size() must be at least vocab.mask_words() (a smaller span is
  // left untouched); words past mask_words() are cleared.
  void FillMask(std::span<uint32_t> mask) const;
  bool Finished() const { return finished_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  // The byte-level state (for the output side: does the text so far satisfy the grammar).
  const Matcher& matcher() const { return matcher_; }

 private:
  bool IsEnd(int32_t token) const;
  // No text token is allowed (the end tokens then are, whatever the grammar says).
  bool NothingAllowed() const;

  std::shared_ptr<CompiledConstraint> shared_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<int32_t> end_tokens_;
  Matcher matcher_;
  bool finished_ = false;
};

}  // namespace pagoda::grammar
