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

// Requires tokenizer.ggml.model == "llama" (SentencePiece-style BPE with scores) and the tokens
// array (1..kMaxGgufVocabSize pieces). Scores default to 0 and token types to normal (with
// <0xXX> pieces as bytes) when their array is absent; when present it must have one entry per
// token. Special token ids must be integers in [0, 2^31) (the unknown token's may be -1: none).
absl::StatusOr<Vocab> ReadGgufVocab(const common::GgufFile& file);

// ReadGgufVocab + Tokenizer::Create.
absl::StatusOr<Tokenizer> LoadGgufTokenizer(const common::GgufFile& file);

}  // namespace pagoda::scheduler::text
