#include "tests/support/test_models.h"

#include <cstdlib>
#include <filesystem>

namespace pagoda::testing {

std::optional<std::string> TestModelsDir() {
  const char* env = std::getenv("PAGODA_TEST_MODELS");
  std::filesystem::path dir =
      env != nullptr && *env != '\0'
          ? std::filesystem::path(env)
          : std::filesystem::path(PAGODA_SOURCE_DIR) / ".." / "shared" / "models";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  return std::filesystem::weakly_canonical(dir, ec).string();
}

std::optional<std::string> TestModelFile(const std::string& name) {
  auto dir = TestModelsDir();
  if (!dir) return std::nullopt;
  std::filesystem::path p = std::filesystem::path(*dir) / name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  return p.string();
}

std::string BinDir() {
  // $PAGODA_BIN_DIR: binaries moved off their build tree (bench/gpu.sh --prebuilt).
  const char* env = std::getenv("PAGODA_BIN_DIR");
  if (env != nullptr && *env != '\0') return env;
  return std::string(PAGODA_BINARY_DIR) + "/bin";
}

}  // namespace pagoda::testing
