// SentencePiece-style BPE tokenizer with scores and byte fallback (llama.cpp's "spm"/"llama").
//
// Contract:
//  * A Tokenizer is immutable after Create() and safe to share between threads for reading.
//  * Create() guarantees: pieces, scores and types have one entry per id; bos/eos ids are in
//    range (unk may be -1 for "none"); all 256 byte tokens "<0x00>".."<0xFF>" exist with type
//    kByte, so every input byte has an encoding and Encode() never produces unk.
//  * Encode() matches llama.cpp on llama-family vocabularies: optional space prefix, ' ' -> "▁",
//    split into UTF-8 characters (ill-formed bytes become one-byte symbols), merge the adjacent
//    pair whose concatenation is a vocabulary piece with the highest score (ties: leftmost),
//    then map each symbol to its id or, if it is not a piece, to byte tokens. O(n log n).
//  * Only pieces of type kNormal, kUserDefined and kUndefined take part in merging; control,
//    unknown, unused and byte pieces are never produced from text (so "<s>" in a prompt is text).
//    When a piece appears twice, the lower id wins.
//  * Decode(Encode(text, b)) == text for every text when add_space_prefix is set (the prefix
//    space is dropped again), except that a literal "▁" in the text decodes as ' ' (as in
//    SentencePiece). This needs "▁" itself to be a mergeable piece, as in every SentencePiece
//    vocabulary; without it a space falls back to the byte tokens of "▁" and decodes as those
//    three bytes (as in llama.cpp). Decode returns raw bytes, which may be ill-formed UTF-8 when
//    the ids split a character; text sent to clients goes through StreamingDetokenizer or
//    SanitizeUtf8.
//  * Ids outside [0, vocab_size()) produce no text and are not control tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace pagoda::scheduler::text {

// GGUF tokenizer.ggml.token_type values (the same numbering as SentencePiece's piece types).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The vocabulary as stored in a GGUF file (tokenizer.ggml.*). Pieces use "▁" (U+2581) for space.
struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;  // -1: the vocabulary has no unknown token
  bool add_bos = true;
  bool add_space_prefix = true;
};

class Tokenizer {
 public:
  // Validates `vocab` and builds the lookup tables. Errors name the offending id or piece.
  static absl::StatusOr<Tokenizer> Create(Vocab vocab);

  // Token ids for `text` (any bytes), with BOS in front when `add_bos`. Empty text gives just
  // BOS (or nothing).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;

  // The raw vocabulary piece (e.g. "▁Once", "<0x0A>", "<s>"); empty for an out-of-range id.
  std::string_view Piece(int32_t id) const;

  // Bytes this token contributes to text: a byte token gives its byte, "▁" becomes ' ', and
  // control, unknown and unused tokens give "".
  std::string TokenBytes(int32_t id) const;

  // Decodes a whole sequence: concatenated TokenBytes, minus the one leading space that
  // add_space_prefix introduced (the ids are taken to start a text, after an optional BOS).
  std::string Decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.pieces.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_space_prefix() const { return vocab_.add_space_prefix; }
  bool IsControl(int32_t id) const;
  TokenType Type(int32_t id) const;

 private:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

  absl::Status BuildTables();
  // Appends the ids of the normalized (already "▁"-escaped) text to `out`.
  void EncodeNormalized(std::string_view normalized, std::vector<int32_t>& out) const;
  // Id of a piece that text may produce, or -1.
  int32_t FindPiece(std::string_view piece) const;

  Vocab vocab_;
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;  // mergeable pieces only
  int32_t byte_to_id_[256] = {};                           // byte fallback
  std::vector<std::string> token_text_;                    // TokenBytes, precomputed
};

}  // namespace pagoda::scheduler::text
