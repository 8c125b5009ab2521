// GPT-2 byte-level BPE (llama.cpp's "gpt2" model; Hugging Face's BPE model behind a ByteLevel
// pre-tokenizer and decoder): Llama 3.x, Qwen 2.5 and 3, and most models since 2024.
//
// Contract:
//  * Immutable after Create(); safe to share between threads.
//  * Pieces are byte-level strings: each byte of text stands for one character of GPT-2's
//    bytes-to-unicode table ("Ġ" U+0120 for ' ', "Ċ" U+010A for '\n', printable ASCII itself).
//  * Create() requires: one piece of type normal for each of the 256 byte characters; every
//    merge "left right" names two normal pieces whose concatenation is a normal piece; every
//    normal piece is made of byte characters only. Errors name the offending merge or id.
//  * Encode(text) = normalize (NFC for qwen2), split with the pre-tokenizer's regex, then within
//    each piece start from one symbol per byte and repeatedly merge the adjacent pair with the
//    lowest merge rank (ties: leftmost), as Hugging Face's BPE does. With `ignore_merges`
//    (Llama 3), a piece that is itself in the vocabulary is taken whole. Any bytes (also
//    ill-formed UTF-8) encode, and decoding the ids' PieceBytes gives the text back (NFC'd).
//  * Only normal pieces are produced; control and user-defined tokens come from the special-token
//    matcher in Tokenizer, never from here.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "scheduler/text/pre_tokenizer.h"
#include "scheduler/text/vocab.h"

namespace pagoda::scheduler::text {

// The bytes a byte-level piece stands for, or nullopt when one of its characters is not in the
// byte alphabet (or the piece is not UTF-8).
std::optional<std::string> ByteLevelDecode(std::string_view piece);

// The byte-level piece for raw bytes (each byte becomes its character).
std::string ByteLevelEncode(std::string_view bytes);

class BpeEncoder {
 public:
  // `vocab` has passed Tokenizer's shape checks (one type per piece).
  static absl::StatusOr<BpeEncoder> Create(const Vocab& vocab);

  // Appends the ids of `text` (any bytes) to `out`.
  void Encode(std::string_view text, std::vector<int32_t>& out) const;

  int32_t num_merges() const { return static_cast<int32_t>(merges_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // the id of the merged piece
  };
  explicit BpeEncoder(PreTokenizer pre) : pre_(std::move(pre)) {}
  absl::Status BuildPieces(const Vocab& vocab);
  absl::Status BuildMerges(const Vocab& vocab);
  // Appends the ids of one pre-tokenized word.
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  PreTokenizer pre_;
  bool ignore_merges_ = false;
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;  // normal pieces, lowest id wins
  absl::flat_hash_map<uint64_t, Merge> merges_;            // (left id << 32 | right id)
  std::array<int32_t, 256> byte_id_{};                     // the piece of each single byte
};

}  // namespace pagoda::scheduler::text
