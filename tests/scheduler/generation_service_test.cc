// Request validation of the public API, without a network: every rejection names the limit.
#include "scheduler/service/generation_service.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/test_models.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = testing::TestModelFile("stories260K-f32.gguf");
    if (!path) GTEST_SKIP() << "stories260K-f32.gguf not found: set PAGODA_TEST_MODELS";
    auto model = LoadServedModel(*path);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::make_unique<ServedModel>(*std::move(model));
    SchedulerOptions options;
    options.context_length = model_->config.context_length;
    engine_ = std::make_unique<Engine>(options, [] { return 0.0; });
    service_ = std::make_unique<GenerationService>(engine_.get(), model_.get());
  }

  void Check(const v1::GenerateRequest& r, const std::string& message) {
    absl::StatusOr<NewRequest> out = service_->Validate(r);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(message), std::string::npos) << out.status();
  }

  static v1::GenerateRequest Text(const std::string& text, uint32_t max_tokens = 4) {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_max_tokens(max_tokens);
    return r;
  }

  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerationService> service_;
};

TEST_F(ValidateTest, AcceptsAndResolvesDefaults) {
  v1::GenerateRequest r = Text("Once upon a time", 0);
  r.set_priority(v1::PRIORITY_HIGH);
  absl::StatusOr<NewRequest> out = service_->Validate(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(out->max_tokens, 0) << "0 means up to the context; the scheduler stops there";
  EXPECT_EQ(out->priority, Priority::kHigh);
  EXPECT_EQ(out->sampling.top_p, 1.0f);
}

TEST_F(ValidateTest, RejectsBadFieldsWithPreciseMessages) {
  Check(Text("bad \xff text"), "not valid UTF-8");
  Check(Text(""), "prompt is empty");
  Check(Text("Once upon a time", 508), "exceeds the model context of 512 tokens");
  v1::GenerateRequest r = Text("Hi");
  r.mutable_sampling()->set_temperature(-1);
  Check(r, "temperature must be in [0, 100]");
  r = Text("Hi");
  r.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  Check(r, "temperature");
  r = Text("Hi");
  r.mutable_sampling()->set_top_k(-3);
  Check(r, "top_k must be >= 0, got -3");
  r = Text("Hi");
  r.mutable_sampling()->set_top_p(std::nanf(""));
  Check(r, "top_p must be in [0, 1]");
  r = Text("Hi");
  r.add_stop_token_ids(512);
  Check(r, "stop token id 512 is outside the vocabulary [0, 512)");
  r = Text("Hi");
  r.set_priority(static_cast<v1::Priority>(42));
  Check(r, "unknown priority 42");
  r = Text("Hi");
  r.set_request_id(std::string(300, 'x'));
  Check(r, "request_id has 300 bytes; the limit is 256");
  r = v1::GenerateRequest();
  r.mutable_token_ids()->add_ids(-1);
  Check(r, "prompt token id -1 at index 0");
  // Too long to fit the context: refused before tokenization (text) or before the id checks.
  Check(Text(std::string(100000, 'a')),
        "the prompt text has 100000 bytes; the model context of "
        "512 tokens holds at most");
  r = v1::GenerateRequest();
  for (int i = 0; i < 512; ++i) r.mutable_token_ids()->add_ids(-1);
  Check(r, "the prompt has 512 tokens; the model context is 512 tokens");
}

}  // namespace
}  // namespace pagoda::scheduler
