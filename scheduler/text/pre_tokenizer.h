// Byte-level BPE pre-tokenization: Unicode normalization and the regex split that cuts text into
// the words BPE merges within (Hugging Face's `Split` pre-tokenizer, behaviour "Isolated").
//
// Contract:
//  * A PreTokenizer is immutable after Create() and safe to share between threads: every Split()
//    call has its own PCRE2 match data.
//  * Split() returns pieces that cover the text exactly, in order, none empty: each regex match
//    is a piece, and so is every run of bytes between two matches (which is how Hugging Face
//    treats text the pattern does not match; with well-formed UTF-8 and these patterns there is
//    none). Ill-formed UTF-8 never matches (PCRE2_MATCH_INVALID_UTF), so it lands in the runs
//    between matches and still reaches the byte-level BPE intact.
//  * The patterns are the ones in the models' tokenizer.json, compiled with PCRE2's UTF and UCP
//    options, so \p{L}, \p{N} and \s follow Unicode properties and (?i:...) folds case.
//  * Normalize() applies the model's normalizer (NFC for qwen2, nothing otherwise); text that is
//    not well-formed UTF-8 is returned unchanged.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::scheduler::text {

// The pre-tokenizers of tokenizer.ggml.pre that Pagoda implements.
enum class PreTokenizerKind {
  kGpt2,    // "gpt2", "gpt-2", "default" or absent: GPT-2's pattern
  kLlama3,  // "llama-bpe", "llama3", "llama-v3": Llama 3.x (digits in runs of at most 3)
  kQwen2,   // "qwen2": Qwen 2.5 and 3 (single digits, NFC normalization)
};

// Maps a tokenizer.ggml.pre value to its kind; an unknown name is an InvalidArgument error that
// names it and the supported ones.
absl::StatusOr<PreTokenizerKind> ParsePreTokenizerName(std::string_view name);

// The canonical tokenizer.ggml.pre name of a kind ("gpt2", "llama-bpe", "qwen2").
std::string_view PreTokenizerName(PreTokenizerKind kind);

// The split regex of a kind, exactly as the model's tokenizer.json writes it.
std::string_view PreTokenizerPattern(PreTokenizerKind kind);

class PreTokenizer {
 public:
  static absl::StatusOr<PreTokenizer> Create(PreTokenizerKind kind);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  PreTokenizerKind kind() const { return kind_; }

  // The normalized text (NFC for qwen2); `text` itself when nothing changes.
  std::string Normalize(std::string_view text) const;

  // Appends the pieces of `text` to `out` (views into `text`).
  void Split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Regex;  // the compiled PCRE2 pattern
  PreTokenizer(PreTokenizerKind kind, std::unique_ptr<Regex> regex);

  PreTokenizerKind kind_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace pagoda::scheduler::text
