#include "scheduler/service/served_model.h"

#include "absl/strings/str_cat.h"
#include "common/gguf_reader.h"
#include "scheduler/text/gguf_vocab.h"

namespace pagoda::scheduler {
namespace {

absl::Status InFile(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

}  // namespace

absl::StatusOr<ServedModel> LoadServedModel(const std::string& path) {
  auto file = common::GgufFile::Open(path);
  if (!file.ok()) return InFile(path, file.status());
  auto config = common::ReadModelConfig(**file);
  if (!config.ok()) return InFile(path, config.status());
  auto tokenizer = text::LoadGgufTokenizer(**file);
  if (!tokenizer.ok()) return InFile(path, tokenizer.status());
  if (tokenizer->vocab_size() != config->vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tokenizer has ", tokenizer->vocab_size(), " tokens but the model's ",
                     "vocabulary is ", config->vocab_size));
  }
  return ServedModel{path, (*file)->Fingerprint(), *std::move(config), *std::move(tokenizer)};
}

void FillTokenizerInfo(const text::Tokenizer& tokenizer, v1::ModelInfo* info) {
  info->set_bos_token_id(tokenizer.bos_id());
  info->set_eos_token_id(tokenizer.eos_id());
  info->set_eot_token_id(tokenizer.eot_id());
  info->set_eom_token_id(tokenizer.eom_id());
  for (int32_t id : tokenizer.EndOfGenerationIds()) info->add_end_of_generation_token_ids(id);
  for (int32_t id : tokenizer.special_ids()) {
    v1::SpecialToken* special = info->add_special_tokens();
    special->set_id(id);
    special->set_piece(std::string(tokenizer.Piece(id)));
    special->set_control(tokenizer.IsControl(id));
  }
  const bool bpe = tokenizer.model() == text::TokenizerModel::kByteLevelBpe;
  info->set_tokenizer(bpe ? "gpt2" : "llama");
  if (bpe) info->set_pre_tokenizer(std::string(text::PreTokenizerName(tokenizer.pre())));
  info->set_chat_template(tokenizer.chat_template());
}

pagoda::worker::v1::Vocabulary WorkerVocabulary(const text::Tokenizer& tokenizer) {
  pagoda::worker::v1::Vocabulary out;
  out.mutable_token_bytes()->Reserve(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    out.add_token_bytes(tokenizer.TokenBytes(id));
  }
  out.mutable_special_ids()->Add(tokenizer.special_ids().begin(), tokenizer.special_ids().end());
  return out;
}

}  // namespace pagoda::scheduler
