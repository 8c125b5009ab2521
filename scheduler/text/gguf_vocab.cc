#include "scheduler/text/gguf_vocab.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::scheduler::text {
namespace {

constexpr char kTokensKey[] = "tokenizer.ggml.tokens";

bool LooksLikeByteToken(const std::string& piece) {
  return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>';
}

// Checks the tokens array's length, and that an optional per-token array (scores, types) has
// the same length, before anything is copied out of the file.
absl::StatusOr<uint64_t> CheckArrayLengths(const common::GgufFile& file) {
  const std::optional<uint64_t> n = file.GetArrayLength(kTokensKey);
  if (!n || *n == 0) return absl::InvalidArgumentError("GGUF has no tokenizer.ggml.tokens array");
  if (*n > kMaxGgufVocabSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer.ggml.tokens has %u entries; the limit is %u", *n, kMaxGgufVocabSize));
  }
  for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    if (!file.HasKey(key)) continue;
    const std::optional<uint64_t> m = file.GetArrayLength(key);
    if (!m || *m != *n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s must be an array with one entry per token (%u tokens), found %s", key,
                          *n, m ? absl::StrFormat("%u entries", *m) : std::string("a scalar")));
    }
  }
  return *n;
}

// A special token id: absent -> `fallback`; otherwise an integer in [0, INT32_MAX], or -1 for
// "none" where `allow_none`.
absl::StatusOr<int32_t> SpecialId(const common::GgufFile& file, const char* key, int32_t fallback,
                                  bool allow_none) {
  if (!file.HasKey(key)) return fallback;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const std::optional<int64_t> v = file.GetInt(key);
  if (!v || *v > kMax || (*v < 0 && !(allow_none && *v == -1))) {
    return absl::InvalidArgumentError(absl::StrFormat("%s must be an integer in [0, %d]%s", key,
                                                      kMax, allow_none ? " or -1 for none" : ""));
  }
  return static_cast<int32_t>(*v);
}

}  // namespace

absl::StatusOr<Vocab> ReadGgufVocab(const common::GgufFile& file) {
  std::optional<std::string> model = file.GetString("tokenizer.ggml.model");
  if (!model) return absl::InvalidArgumentError("GGUF has no tokenizer (tokenizer.ggml.model)");
  if (*model != "llama") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer.ggml.model is \"%s\"; supported: \"llama\" (SentencePiece BPE)", *model));
  }
  ASSIGN_OR_RETURN(const uint64_t n, CheckArrayLengths(file));
  Vocab vocab;
  std::optional<std::vector<std::string>> tokens = file.GetStringArray(kTokensKey);
  if (!tokens) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens must be an array of strings");
  }
  vocab.pieces = std::move(*tokens);
  std::optional<std::vector<float>> scores = file.GetFloatArray("tokenizer.ggml.scores");
  if (!scores && file.HasKey("tokenizer.ggml.scores")) {
    return absl::InvalidArgumentError("tokenizer.ggml.scores must be an array of floats");
  }
  vocab.scores = scores ? std::move(*scores) : std::vector<float>(n, 0.0f);
  std::optional<std::vector<int32_t>> types = file.GetInt32Array("tokenizer.ggml.token_type");
  if (!types && file.HasKey("tokenizer.ggml.token_type")) {
    return absl::InvalidArgumentError("tokenizer.ggml.token_type must be an array of int32");
  }
  vocab.types.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < n; ++i) {
    if (types) {
      vocab.types[i] = static_cast<TokenType>((*types)[i]);
    } else if (LooksLikeByteToken(vocab.pieces[i])) {
      vocab.types[i] = TokenType::kByte;
    }
  }
  ASSIGN_OR_RETURN(vocab.bos_id, SpecialId(file, "tokenizer.ggml.bos_token_id", 1, false));
  ASSIGN_OR_RETURN(vocab.eos_id, SpecialId(file, "tokenizer.ggml.eos_token_id", 2, false));
  ASSIGN_OR_RETURN(vocab.unk_id, SpecialId(file, "tokenizer.ggml.unknown_token_id", 0, true));
  vocab.add_bos = file.GetBool("tokenizer.ggml.add_bos_token").value_or(true);
  vocab.add_space_prefix = file.GetBool("tokenizer.ggml.add_space_prefix").value_or(true);
  return vocab;
}

absl::StatusOr<Tokenizer> LoadGgufTokenizer(const common::GgufFile& file) {
  ASSIGN_OR_RETURN(Vocab vocab, ReadGgufVocab(file));
  return Tokenizer::Create(std::move(vocab));
}

}  // namespace pagoda::scheduler::text
