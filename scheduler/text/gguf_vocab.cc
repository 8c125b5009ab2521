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
constexpr char kMergesKey[] = "tokenizer.ggml.merges";

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
// "none" (which llama.cpp's converter writes as uint32 0xFFFFFFFF, e.g. padding_token_id).
absl::StatusOr<int32_t> SpecialId(const common::GgufFile& file, const char* key, int32_t fallback) {
  if (!file.HasKey(key)) return fallback;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> v = file.GetInt(key);
  if (v == int64_t{0xFFFFFFFF}) v = -1;
  if (!v || *v > kMax || *v < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be an integer in [0, %d] or -1 for none", key, kMax));
  }
  return static_cast<int32_t>(*v);
}

absl::StatusOr<bool> Flag(const common::GgufFile& file, const char* key, bool fallback) {
  if (!file.HasKey(key)) return fallback;
  const std::optional<bool> v = file.GetBool(key);
  if (!v) return absl::InvalidArgumentError(absl::StrFormat("%s must be a bool", key));
  return *v;
}

absl::StatusOr<TokenizerModel> ReadModel(const common::GgufFile& file) {
  std::optional<std::string> model = file.GetString("tokenizer.ggml.model");
  if (!model) return absl::InvalidArgumentError("GGUF has no tokenizer (tokenizer.ggml.model)");
  if (*model == "llama") return TokenizerModel::kSentencePiece;
  if (*model == "gpt2") return TokenizerModel::kByteLevelBpe;
  return absl::InvalidArgumentError(
      absl::StrFormat("tokenizer.ggml.model is \"%s\"; supported: \"llama\" (SentencePiece BPE), "
                      "\"gpt2\" (byte-level BPE)",
                      *model));
}

absl::StatusOr<PreTokenizerKind> ReadPreTokenizer(const common::GgufFile& file) {
  if (!file.HasKey("tokenizer.ggml.pre")) return PreTokenizerKind::kGpt2;
  std::optional<std::string> pre = file.GetString("tokenizer.ggml.pre");
  if (!pre) return absl::InvalidArgumentError("tokenizer.ggml.pre must be a string");
  return ParsePreTokenizerName(*pre);
}

absl::StatusOr<std::vector<std::string>> ReadMerges(const common::GgufFile& file) {
  const std::optional<uint64_t> n = file.GetArrayLength(kMergesKey);
  if (!n) {
    return absl::InvalidArgumentError(
        "byte-level BPE (tokenizer.ggml.model \"gpt2\") needs the tokenizer.ggml.merges array");
  }
  if (*n > kMaxGgufMerges) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer.ggml.merges has %u entries; the limit is %u", *n, kMaxGgufMerges));
  }
  std::optional<std::vector<std::string>> merges = file.GetStringArray(kMergesKey);
  if (!merges)
    return absl::InvalidArgumentError("tokenizer.ggml.merges must be an array of strings");
  return *std::move(merges);
}

// Token types from tokenizer.ggml.token_type, or guessed when it is absent: <0xHH> pieces are
// bytes in a SentencePiece vocabulary, everything else normal.
absl::StatusOr<std::vector<TokenType>> ReadTypes(const common::GgufFile& file,
                                                 const std::vector<std::string>& pieces,
                                                 TokenizerModel model) {
  std::optional<std::vector<int32_t>> types = file.GetInt32Array("tokenizer.ggml.token_type");
  if (!types && file.HasKey("tokenizer.ggml.token_type")) {
    return absl::InvalidArgumentError("tokenizer.ggml.token_type must be an array of int32");
  }
  std::vector<TokenType> out(pieces.size(), TokenType::kNormal);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (types) {
      out[i] = static_cast<TokenType>((*types)[i]);
    } else if (model == TokenizerModel::kSentencePiece && LooksLikeByteToken(pieces[i])) {
      out[i] = TokenType::kByte;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Vocab> ReadGgufVocab(const common::GgufFile& file) {
  Vocab vocab;
  ASSIGN_OR_RETURN(vocab.model, ReadModel(file));
  ASSIGN_OR_RETURN(const uint64_t n, CheckArrayLengths(file));
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
  ASSIGN_OR_RETURN(vocab.types, ReadTypes(file, vocab.pieces, vocab.model));
  const bool spm = vocab.model == TokenizerModel::kSentencePiece;
  if (!spm) {
    ASSIGN_OR_RETURN(vocab.pre, ReadPreTokenizer(file));
    ASSIGN_OR_RETURN(vocab.merges, ReadMerges(file));
  }
  // SentencePiece vocabularies put <unk>, <s>, </s> at 0, 1, 2 by convention; byte-level BPE
  // ones have no such convention, so an absent id means none.
  ASSIGN_OR_RETURN(vocab.bos_id, SpecialId(file, "tokenizer.ggml.bos_token_id", spm ? 1 : -1));
  ASSIGN_OR_RETURN(vocab.eos_id, SpecialId(file, "tokenizer.ggml.eos_token_id", spm ? 2 : -1));
  ASSIGN_OR_RETURN(vocab.unk_id, SpecialId(file, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1));
  ASSIGN_OR_RETURN(vocab.eot_id, SpecialId(file, "tokenizer.ggml.eot_token_id", -1));
  ASSIGN_OR_RETURN(vocab.eom_id, SpecialId(file, "tokenizer.ggml.eom_token_id", -1));
  ASSIGN_OR_RETURN(vocab.pad_id, SpecialId(file, "tokenizer.ggml.padding_token_id", -1));
  ASSIGN_OR_RETURN(vocab.add_bos, Flag(file, "tokenizer.ggml.add_bos_token", spm));
  ASSIGN_OR_RETURN(vocab.add_eos, Flag(file, "tokenizer.ggml.add_eos_token", false));
  ASSIGN_OR_RETURN(vocab.add_space_prefix, Flag(file, "tokenizer.ggml.add_space_prefix", spm));
  if (file.HasKey("tokenizer.chat_template")) {
    std::optional<std::string> chat_template = file.GetString("tokenizer.chat_template");
    if (!chat_template) {
      return absl::InvalidArgumentError("tokenizer.chat_template must be a string");
    }
    vocab.chat_template = std::move(*chat_template);
  }
  return vocab;
}

absl::StatusOr<Tokenizer> LoadGgufTokenizer(const common::GgufFile& file) {
  ASSIGN_OR_RETURN(Vocab vocab, ReadGgufVocab(file));
  return Tokenizer::Create(std::move(vocab));
}

}  // namespace pagoda::scheduler::text
