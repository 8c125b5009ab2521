#include "common/gguf_vocab.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::common {
namespace {

bool LooksLikeByteToken(const std::string& piece) {
  return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>';
}

}  // namespace

absl::StatusOr<Vocab> ReadGgufVocab(const GgufFile& file) {
  std::optional<std::string> model = file.GetString("tokenizer.ggml.model");
  if (!model) return absl::InvalidArgumentError("GGUF has no tokenizer (tokenizer.ggml.model)");
  if (*model != "llama") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer.ggml.model is \"%s\"; supported: \"llama\" (SentencePiece BPE)", *model));
  }
  Vocab vocab;
  std::optional<std::vector<std::string>> tokens = file.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) {
    return absl::InvalidArgumentError("GGUF has no tokenizer.ggml.tokens array");
  }
  vocab.pieces = std::move(*tokens);
  std::optional<std::vector<float>> scores = file.GetFloatArray("tokenizer.ggml.scores");
  vocab.scores = scores ? std::move(*scores) : std::vector<float>(vocab.pieces.size(), 0.0f);
  std::optional<std::vector<int32_t>> types = file.GetInt32Array("tokenizer.ggml.token_type");
  vocab.types.resize(vocab.pieces.size(), TokenType::kNormal);
  for (size_t i = 0; i < vocab.pieces.size(); ++i) {
    if (types && i < types->size()) {
      vocab.types[i] = static_cast<TokenType>((*types)[i]);
    } else if (LooksLikeByteToken(vocab.pieces[i])) {
      vocab.types[i] = TokenType::kByte;
    }
  }
  auto id_or = [&](const char* key, int32_t fallback) {
    std::optional<uint64_t> v = file.GetUint(key);
    return v ? static_cast<int32_t>(*v) : fallback;
  };
  vocab.bos_id = id_or("tokenizer.ggml.bos_token_id", 1);
  vocab.eos_id = id_or("tokenizer.ggml.eos_token_id", 2);
  vocab.unk_id = id_or("tokenizer.ggml.unknown_token_id", 0);
  vocab.add_bos = file.GetBool("tokenizer.ggml.add_bos_token").value_or(true);
  vocab.add_space_prefix = file.GetBool("tokenizer.ggml.add_space_prefix").value_or(true);
  return vocab;
}

absl::StatusOr<Tokenizer> LoadGgufTokenizer(const GgufFile& file) {
  ASSIGN_OR_RETURN(Vocab vocab, ReadGgufVocab(file));
  return Tokenizer::Create(std::move(vocab));
}

}  // namespace pagoda::common
