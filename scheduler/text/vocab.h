// The vocabulary as a GGUF file stores it (tokenizer.ggml.*), before any validation: the input
// of Tokenizer::Create, which checks every invariant listed there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/text/pre_tokenizer.h"

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

// tokenizer.ggml.model.
enum class TokenizerModel {
  kSentencePiece,  // "llama": BPE by piece scores with byte fallback; "▁" (U+2581) for space
  kByteLevelBpe,   // "gpt2": GPT-2 byte-level BPE by merge ranks after a regex pre-tokenizer
};

struct Vocab {
  TokenizerModel model = TokenizerModel::kSentencePiece;
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;  // byte-level BPE only
  std::vector<std::string> pieces;
  std::vector<float> scores;  // SentencePiece merge priority (byte-level BPE: unused)
  std::vector<TokenType> types;
  // Byte-level BPE merges, "left right" (pieces joined by one space), highest priority first.
  std::vector<std::string> merges;
  // Special ids; -1 means the vocabulary has none.
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t eot_id = -1;  // end of turn (e.g. Llama 3's <|eot_id|>)
  int32_t eom_id = -1;  // end of message (e.g. Llama 3.1's <|eom_id|>, tool calls)
  int32_t unk_id = 0;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece only
  std::string chat_template;     // tokenizer.chat_template (Jinja), may be empty
};

}  // namespace pagoda::scheduler::text
