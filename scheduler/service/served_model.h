// ServedModel: what the scheduler knows of the model (no weights): its shape, its tokenizer
// and the fingerprint workers must match.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "pagoda/v1/generation.pb.h"
#include "pagoda/worker/v1/worker_link.pb.h"
#include "scheduler/text/tokenizer.h"

namespace pagoda::scheduler {

struct ServedModel {
  std::string path;
  std::string fingerprint;
  common::ModelConfig config;
  text::Tokenizer tokenizer;
};

// Reads the GGUF metadata of `path`; errors name the file and what was wrong.
absl::StatusOr<ServedModel> LoadServedModel(const std::string& path);

// Fills ModelInfo's tokenizer fields: BOS, EOS, EOT, EOM, the end-of-generation ids, the special
// tokens, the tokenizer kind and the chat template.
void FillTokenizerInfo(const text::Tokenizer& tokenizer, v1::ModelInfo* info);

// The vocabulary workers mask constrained samples with: every token's TokenBytes and the
// special (control and user-defined) ids.
pagoda::worker::v1::Vocabulary WorkerVocabulary(const text::Tokenizer& tokenizer);

}  // namespace pagoda::scheduler
