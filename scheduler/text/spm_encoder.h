// SentencePiece-style BPE with scores and byte fallback (llama.cpp's "spm"/"llama" model).
//
// Contract:
//  * Immutable after Create(); safe to share between threads.
//  * Create() requires all 256 byte tokens "<0x00>".."<0xFF>" with type kByte, so every input
//    byte has an encoding and Encode() never produces the unknown token.
//  * Encode() matches llama.cpp on llama-family vocabularies: optional space prefix, ' ' -> "▁",
//    split into UTF-8 characters (ill-formed bytes become one-byte symbols), merge the adjacent
//    pair whose concatenation is a vocabulary piece with the highest score (ties: leftmost),
//    then map each symbol to its id or, if it is not a piece, to byte tokens. O(n log n).
//  * Only pieces of type kNormal, kUserDefined and kUndefined take part in merging; control,
//    unknown, unused and byte pieces are never produced from text. When a piece appears twice,
//    the lower id wins.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "scheduler/text/vocab.h"

namespace pagoda::scheduler::text {

// "▁" (U+2581), SentencePiece's space.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// True for the token types SentencePiece merging may produce.
bool IsSpmMergeable(TokenType type);

// Parses "<0xHH>" into its byte value, or returns -1.
int ParseBytePiece(std::string_view piece);

// `piece` with every "▁" turned back into ' '.
std::string UnescapeSpaces(std::string_view piece);

class SpmEncoder {
 public:
  // `vocab` has passed Tokenizer's shape checks (one score and type per piece).
  static absl::StatusOr<SpmEncoder> Create(const Vocab& vocab);

  // Appends the ids of `text` (any bytes; with the space prefix when the vocabulary asks).
  void Encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  SpmEncoder() = default;
  // Appends the ids of the normalized (already "▁"-escaped) text to `out`.
  void EncodeNormalized(std::string_view normalized, std::vector<int32_t>& out) const;
  // Id of a piece that text may produce, or -1.
  int32_t FindPiece(std::string_view piece) const;

  bool add_space_prefix_ = true;
  std::vector<float> scores_;
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;  // mergeable pieces only
  int32_t byte_to_id_[256] = {};                           // byte fallback
};

}  // namespace pagoda::scheduler::text
