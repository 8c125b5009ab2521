// Test helpers that locate data outside the repository.
//
// The trained test model lives in ../shared/models (never copied into the project); tests find
// it through $PAGODA_TEST_MODELS and skip with a clear message when it is absent.
#pragma once

#include <optional>
#include <string>

namespace pagoda::testing {

// Directory holding stories260K-f32.gguf and golden.json, or nullopt when absent.
std::optional<std::string> TestModelsDir();

// Path of a file in TestModelsDir(), or nullopt when the directory or the file is absent.
std::optional<std::string> TestModelFile(const std::string& name);

// Directory with the built binaries: $PAGODA_BIN_DIR, else build/bin.
std::string BinDir();

// Skips the current test with a message saying where the models were looked for.
#define PAGODA_SKIP_WITHOUT_TEST_MODELS(var, file)                                   \
  auto var = ::pagoda::testing::TestModelFile(file);                                 \
  if (!var) {                                                                        \
    GTEST_SKIP() << "test model " << (file) << " not found: set PAGODA_TEST_MODELS " \
                 << "(default ../shared/models from the project root)";              \
  }

}  // namespace pagoda::testing
