// TrainedModelTest: e2e fixture serving the trained test model (stories260K) and its golden
// cases; skips with a message when ../shared/models (or $PAGODA_TEST_MODELS) lacks them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/cluster.h"
#include "tests/support/test_models.h"

namespace pagoda::testing {

inline pagoda::v1::GenerateRequest TextRequest(const std::string& prompt, uint32_t max_tokens) {
  pagoda::v1::GenerateRequest r;
  r.set_text(prompt);
  r.set_max_tokens(max_tokens);
  return r;
}

inline nlohmann::json LoadGolden(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class TrainedModelTest : public ::testing::Test {
 protected:
  void StartCluster(std::vector<std::string> scheduler_flags = {},
                    std::vector<std::string> worker_flags = {}, int workers = 1) {
    ClusterOptions options;
    options.model = *model_;
    options.scheduler_flags = std::move(scheduler_flags);
    options.worker_flags = std::move(worker_flags);
    options.workers = workers;
    std::string error;
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  void SetUp() override {
    model_ = TestModelFile("stories260K-f32.gguf");
    golden_ = TestModelFile("golden.json");
    if (!model_ || !golden_) {
      GTEST_SKIP() << "stories260K-f32.gguf / golden.json not found: set PAGODA_TEST_MODELS "
                      "(default ../shared/models from the project root)";
    }
  }

  std::optional<std::string> model_;
  std::optional<std::string> golden_;
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace pagoda::testing
