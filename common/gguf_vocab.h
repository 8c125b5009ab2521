// Reads the tokenizer vocabulary stored in a GGUF file's `tokenizer.ggml.*` metadata.
#pragma once

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "common/tokenizer.h"

namespace pagoda::common {

// Requires tokenizer.ggml.model == "llama" (SentencePiece-style BPE with scores) and the
// tokens/scores arrays; token types default to normal (with <0xXX> pieces as bytes).
absl::StatusOr<Vocab> ReadGgufVocab(const GgufFile& file);

// ReadGgufVocab + Tokenizer::Create.
absl::StatusOr<Tokenizer> LoadGgufTokenizer(const GgufFile& file);

}  // namespace pagoda::common
