// Reads the tokenizer vocabulary stored in a GGUF file's `tokenizer.ggml.*` metadata.
//
// Contract: the array lengths are checked against kMaxGgufVocabSize and against each other
// before any array is materialized, so a hostile file yields an InvalidArgument error that names
// the key and the limit, never a huge allocation or silently defaulted entries.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "scheduler/text/tokenizer.h"

namespace pagoda::scheduler::text {

// The most pieces a GGUF vocabulary may have: 16x the largest real vocabularies (~256K).
inline constexpr uint64_t kMaxGgufVocabSize = uint64_t{1} << 22;

// The most byte-level BPE merges: 16x the largest real lists (~280K).
inline constexpr uint64_t kMaxGgufMerges = uint64_t{1} << 23;

// Requires tokenizer.ggml.model "llama" (SentencePiece-style BPE with scores) or "gpt2" (byte-level
// BPE, which also needs tokenizer.ggml.merges, at most kMaxGgufMerges strings, and takes its
// pre-tokenizer from tokenizer.ggml.pre: see pre_tokenizer.h), and the tokens array
// (1..kMaxGgufVocabSize pieces). Scores default to 0 and token types to normal (with <0xXX>
// pieces as bytes for "llama") when their array is absent; when present it must have one entry
// per token. Special token ids (bos, eos, eot, eom, unknown, padding) must be integers in
// [0, 2^31) or -1 for none; absent ones default to llama's 1/2/0 and none otherwise. Flags
// add_bos_token (default: "llama" only), add_eos_token (false) and add_space_prefix must be
// bools; tokenizer.chat_template a string. What the tokenizer itself requires (ids in range,
// merges naming known pieces, UTF-8 pieces) is checked by Tokenizer::Create.
absl::StatusOr<Vocab> ReadGgufVocab(const common::GgufFile& file);

// ReadGgufVocab + Tokenizer::Create.
absl::StatusOr<Tokenizer> LoadGgufTokenizer(const common::GgufFile& file);

}  // namespace pagoda::scheduler::text
