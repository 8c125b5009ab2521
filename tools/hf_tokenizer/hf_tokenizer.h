// Imports a Hugging Face tokenizer (tokenizer.json, plus tokenizer_config.json for the special
// tokens, flags and chat template) into GGUF tokenizer metadata, the form llama.cpp's converter
// writes, so that pagoda-make-model can write a random-weight model with a real tokenizer.
//
// Contract:
//  * Only byte-level BPE tokenizers are imported: model "BPE" without byte fallback, dropout or
//    subword affixes, behind a ByteLevel pre-tokenizer whose split regex is one Pagoda implements
//    (gpt2, llama-bpe, qwen2: see scheduler/text/pre_tokenizer.h), and with the normalizer and
//    ignore_merges setting that pre-tokenizer implies. Anything else is an InvalidArgument
//    error naming what is not supported, never a silently different tokenizer.
//  * Ids: the model's vocab (type normal) and the added tokens (type control when "special",
//    user-defined otherwise); ids no entry names become "[PAD<id>]" of type unused. At most
//    2^22 ids.
//  * Special ids come from tokenizer_config.json (bos_token, eos_token, pad_token); EOT is the
//    first of <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|> that exists and is
//    not EOS; EOM is <|eom_id|>. add_bos follows add_bos_token, by default whether a BOS exists;
//    add_eos follows add_eos_token (default false).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "modelgen/gguf_writer.h"

namespace pagoda::tools {

// GGUF tokenizer.* metadata of an imported tokenizer.
struct HfTokenizer {
  std::string pre;  // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right"
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;
};

// `tokenizer_config_json` may be empty (no config: no special ids, no template).
absl::StatusOr<HfTokenizer> ImportHfTokenizer(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json);

// Reads the files (`config_path` may be empty) and imports them.
absl::StatusOr<HfTokenizer> ImportHfTokenizerFiles(const std::string& tokenizer_json_path,
                                                   const std::string& config_path);

// Writes tokenizer.ggml.* (model "gpt2") and tokenizer.chat_template into `w`.
void AddHfTokenizerMetadata(const HfTokenizer& tokenizer, modelgen::GgufWriter& w);

}  // namespace pagoda::tools
