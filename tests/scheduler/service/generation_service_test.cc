// Request validation of the public API, without a network: every rejection names the limit.
#include "scheduler/service/generation_service.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = testing::TestModelFile("stories260K-f32.gguf");
    if (!path) GTEST_SKIP() << "stories260K-f32.gguf not found: set PAGODA_TEST_MODELS";
    auto model = LoadServedModel(*path);
    ASSERT_OK(model);
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
  ASSERT_OK(out);
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

// GenerateRequest.tenant: empty is the default tenant; otherwise the name rule, naming the field.
TEST_F(ValidateTest, TenantDefaultsAndIsChecked) {
  absl::StatusOr<NewRequest> out = service_->Validate(Text("Hi"));
  ASSERT_OK(out);
  EXPECT_EQ(out->tenant, "default");
  v1::GenerateRequest r = Text("Hi");
  r.set_tenant("org:team-a.prod_1");
  out = service_->Validate(r);
  ASSERT_OK(out);
  EXPECT_EQ(out->tenant, "org:team-a.prod_1");
  r.set_tenant("team a");
  Check(r, "tenant must be 1 to 64 bytes of [A-Za-z0-9._:-]; got byte 0x20 at offset 4");
  r.set_tenant(std::string(65, 't'));
  Check(r, "tenant must be 1 to 64 bytes of [A-Za-z0-9._:-]; got 65 bytes");
}

TEST_F(ValidateTest, SamplingSurfaceIsCheckedAndResolved) {
  auto with = [](auto set) {
    v1::GenerateRequest r = Text("Once upon a time");
    set(r);
    return r;
  };
  Check(with([](auto& r) { r.mutable_sampling()->set_min_p(1.5f); }), "min_p must be in [0, 1]");
  Check(with([](auto& r) { r.mutable_sampling()->set_presence_penalty(-2.5f); }),
        "presence_penalty must be in [-2, 2], got -2.5");
  Check(with([](auto& r) { r.mutable_sampling()->set_frequency_penalty(NAN); }),
        "frequency_penalty must be in [-2, 2]");
  Check(with([](auto& r) { r.mutable_sampling()->set_repetition_penalty(-1); }),
        "repetition_penalty must be 0 (off) or in (0, 10]");
  Check(with([](auto& r) { (*r.mutable_sampling()->mutable_logit_bias())[512] = 1; }),
        "logit_bias token id 512 is outside the vocabulary [0, 512)");
  Check(with([](auto& r) { (*r.mutable_sampling()->mutable_logit_bias())[5] = 101; }),
        "logit_bias for token 5 must be in [-100, 100], got 101");
  Check(with([](auto& r) {
          for (int i = 0; i < 301; ++i) (*r.mutable_sampling()->mutable_logit_bias())[i] = 1;
        }),
        "logit_bias has 301 entries; the limit is 300");
  Check(with([](auto& r) { r.set_top_logprobs(3); }), "top_logprobs needs logprobs = true");
  Check(with([](auto& r) {
          r.set_logprobs(true);
          r.set_top_logprobs(21);
        }),
        "top_logprobs must be in [0, 20], got 21");
  v1::GenerateRequest r = Text("Once upon a time");
  auto* sp = r.mutable_sampling();
  sp->set_min_p(0.1f);
  sp->set_presence_penalty(2);
  sp->set_frequency_penalty(-2);
  (*sp->mutable_logit_bias())[9] = -100;
  (*sp->mutable_logit_bias())[3] = 100;
  r.set_logprobs(true);
  r.set_top_logprobs(20);
  absl::StatusOr<NewRequest> out = service_->Validate(r);
  ASSERT_OK(out);
  EXPECT_EQ(out->sampling.repetition_penalty, 1.0f) << "0 means off";
  EXPECT_EQ(out->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 100.0f}, {9, -100.0f}}));
  EXPECT_TRUE(out->sampling.logprobs);
  EXPECT_EQ(out->sampling.top_logprobs, 20);
  EXPECT_EQ(out->sampling.min_p, 0.1f);
}

}  // namespace
}  // namespace pagoda::scheduler
