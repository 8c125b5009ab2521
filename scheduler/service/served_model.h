// ServedModel: what the scheduler knows of the model (no weights): its shape, its tokenizer
// and the fingerprint workers must match.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/model_config.h"
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

}  // namespace pagoda::scheduler
