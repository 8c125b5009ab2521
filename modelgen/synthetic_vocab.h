// A deterministic, SentencePiece-shaped vocabulary for synthetic (random-weight) test models.
//
// Layout (ids): 0 "<unk>" (type 2 unknown), 1 "<s>" and 2 "</s>" (type 3 control), 3..258 byte
// tokens "<0x00>".."<0xFF>" (type 6), then single characters ("▁" U+2581 for space, lower-case
// letters, punctuation, upper-case letters, digits; type 1), then multi-character pieces built
// from English-ish words by seeded merges (type 1), until `vocab_size` entries. Scores decrease
// with id among normal pieces so shorter (earlier) merges win in a score-driven BPE.
// Invariants: pieces are unique; sizes of the three arrays equal vocab_size; same (size, seed)
// gives the same vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::modelgen {

inline constexpr int kMinSyntheticVocab = 300;
inline constexpr int kSyntheticUnkId = 0;
inline constexpr int kSyntheticBosId = 1;
inline constexpr int kSyntheticEosId = 2;
inline constexpr int kSyntheticFirstByteId = 3;

// GGUF tokenizer.ggml.token_type values.
inline constexpr int32_t kTokenTypeNormal = 1;
inline constexpr int32_t kTokenTypeUnknown = 2;
inline constexpr int32_t kTokenTypeControl = 3;
inline constexpr int32_t kTokenTypeByte = 6;

struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
};

// Fails (InvalidArgument) when vocab_size < kMinSyntheticVocab or > 1,000,000.
absl::StatusOr<SyntheticVocab> BuildSyntheticVocab(int vocab_size, uint64_t seed);

}  // namespace pagoda::modelgen
