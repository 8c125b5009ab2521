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

}  // namespace pagoda::scheduler
