// End-to-end: the sampling surface (logit_bias, penalties, min_p, logprobs) through real
// scheduler and worker processes on the trained model: honoured, self-consistent, and equal
// whether a request runs alone, batched with others, preempted and recomputed, or as one of n.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

// Every token's logprobs are coherent: one entry per token, for that token, <= 0, the top list
// descending and `top` long, the token's own logprob among them when it ranks there, and the
// listed probabilities summing to at most 1.
void CheckLogprobs(const Generation& g, int top, bool greedy) {
  ASSERT_EQ(g.logprobs.size(), g.tokens.size());
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("token ", i));
    const v1::TokenLogprob& lp = g.logprobs[i];
    EXPECT_EQ(lp.token_id(), g.tokens[i]);
    EXPECT_LE(lp.logprob(), 1e-6f);
    ASSERT_EQ(lp.top_size(), top);
    double mass = 0;
    for (int k = 0; k < top; ++k) {
      mass += std::exp(lp.top(k).logprob());
      if (k > 0) {
        EXPECT_LE(lp.top(k).logprob(), lp.top(k - 1).logprob());
      }
      if (lp.top(k).token_id() == lp.token_id()) {
        EXPECT_FLOAT_EQ(lp.top(k).logprob(), lp.logprob());
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-4);
    if (top > 0) {
      EXPECT_LE(lp.logprob(), lp.top(0).logprob() + 1e-6f);
    }
    if (greedy && top > 0) {
      EXPECT_EQ(lp.top(0).token_id(), lp.token_id());
    }
  }
}

TEST_F(TrainedModelTest, GreedyLogitBiasForcesATokenAndLogprobsAgree) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const auto golden = LoadGolden(*golden_)["cases"][0];
  v1::GenerateRequest plain = TextRequest(golden["prompt"], 12);
  plain.set_logprobs(true);
  plain.set_top_logprobs(20);
  const Generation base = cluster_->Generate(plain);
  ASSERT_OK(base.status);
  // Logprobs change nothing about the tokens: the golden greedy text.
  const auto expected = golden["expected_token_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(base.tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 12));
  ASSERT_NO_FATAL_FAILURE(CheckLogprobs(base, 20, /*greedy=*/true));
  // 20 of 512 tokens of a trained model carry most of the mass.
  for (const auto& lp : base.logprobs) {
    double mass = 0;
    for (const auto& t : lp.top()) mass += std::exp(t.logprob());
    EXPECT_GT(mass, 0.5);
  }

  constexpr int32_t kForced = 300;
  v1::GenerateRequest forced = plain;
  (*forced.mutable_sampling()->mutable_logit_bias())[kForced] = 100;
  forced.set_ignore_eos(true);
  const Generation g = cluster_->Generate(forced);
  ASSERT_OK(g.status);
  EXPECT_EQ(g.tokens, std::vector<int32_t>(12, kForced));
  ASSERT_NO_FATAL_FAILURE(CheckLogprobs(g, 20, /*greedy=*/true));
  for (const auto& lp : g.logprobs) EXPECT_GT(lp.logprob(), -1e-3f) << "bias 100: p ~ 1";

  // A ban (-100) of the first greedy token changes the first token, and only logprobs of sent
  // tokens come back when a stop string cuts the text.
  v1::GenerateRequest banned = plain;
  (*banned.mutable_sampling()->mutable_logit_bias())[base.tokens[0]] = -100;
  const Generation b = cluster_->Generate(banned);
  ASSERT_OK(b.status);
  EXPECT_NE(b.tokens[0], base.tokens[0]);
  ASSERT_NO_FATAL_FAILURE(CheckLogprobs(b, 20, true));
  const std::string text = golden["expected_text"];
  v1::GenerateRequest stopped = plain;
  stopped.set_max_tokens(golden["max_tokens"]);
  stopped.add_stop("Lily.");
  const Generation s = cluster_->Generate(stopped);
  ASSERT_OK(s.status);
  EXPECT_EQ(s.finished.reason(), v1::FINISH_REASON_STOP_STRING);
  ASSERT_NO_FATAL_FAILURE(CheckLogprobs(s, 20, true));
  EXPECT_EQ(s.logprobs.size(), s.finished.usage().completion_tokens());
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Requests with every knob: greedy and seeded sampling, penalties, bias, min_p, logprobs.
std::vector<v1::GenerateRequest> KnobRequests(const nlohmann::json& cases, int count) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < count; ++i) {
    v1::GenerateRequest r =
        TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), 20 + 4 * (i % 6));
    r.set_ignore_eos(true);
    auto* sp = r.mutable_sampling();
    sp->set_repetition_penalty(i % 3 == 0 ? 1.0f : 1.3f);
    sp->set_frequency_penalty(0.25f * (i % 4));
    sp->set_presence_penalty(i % 2 ? 0.5f : -0.5f);
    if (i % 4 == 1) (*sp->mutable_logit_bias())[100 + i] = 3.0f;
    if (i % 2 == 1) {
      sp->set_temperature(0.9f);
      sp->set_top_k(i % 3 == 0 ? 0 : 40);
      sp->set_top_p(0.95f);
      sp->set_min_p(0.02f);
      sp->set_seed(1000 + i);
    }
    if (i % 3 != 2) {
      r.set_logprobs(true);
      r.set_top_logprobs(i % 5);
    }
    requests.push_back(r);
  }
  return requests;
}

void ExpectSame(const Generation& a, const Generation& b) {
  ASSERT_OK(a.status);
  ASSERT_OK(b.status);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(a.logprobs[i].SerializeAsString(), b.logprobs[i].SerializeAsString()) << i;
  }
}

// Batched with chunked prefill and small pages, each request returns exactly what it returns
// alone (the CPU backend is batch invariant, penalties are per sequence); and the penalties
// are honoured: the outputs differ from the same requests without them.
TEST_F(TrainedModelTest, PenalizedRequestsConcurrentEqualsSequential) {
  StartCluster({"--max-batch-tokens", "48", "--max-prefill-chunk", "16"},
               {"--page-size", "4", "--kv-pages", "1024"});
  const auto cases = LoadGolden(*golden_)["cases"];
  const std::vector<v1::GenerateRequest> requests = KnobRequests(cases, 12);
  std::vector<Generation> sequential;
  for (const auto& r : requests) sequential.push_back(cluster_->Generate(r));
  const std::vector<Generation> concurrent = cluster_->GenerateAll(requests);
  int changed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_NO_FATAL_FAILURE(ExpectSame(sequential[i], concurrent[i]));
    if (requests[i].logprobs()) {
      ASSERT_NO_FATAL_FAILURE(CheckLogprobs(sequential[i],
                                            static_cast<int>(requests[i].top_logprobs()),
                                            requests[i].sampling().temperature() == 0));
    }
    v1::GenerateRequest off = requests[i];
    off.mutable_sampling()->set_repetition_penalty(0);
    off.mutable_sampling()->set_frequency_penalty(0);
    off.mutable_sampling()->set_presence_penalty(0);
    changed += cluster_->Generate(off).tokens != sequential[i].tokens;
  }
  EXPECT_GE(changed, 6) << "penalties must change what is generated";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
}

// Under KV pressure, penalized requests are preempted and recomputed (the worker rebuilds their
// token history from the plan) and still return what they return alone.
TEST_F(TrainedModelTest, PreemptionKeepsPenalizedOutputsExact) {
  StartCluster({"--max-batch-tokens", "64", "--max-prefill-chunk", "16"},
               {"--page-size", "4", "--kv-pages", "20"});
  const auto cases = LoadGolden(*golden_)["cases"];
  const std::vector<v1::GenerateRequest> requests = KnobRequests(cases, 10);
  std::vector<Generation> alone;
  for (const auto& r : requests) alone.push_back(cluster_->Generate(r));
  const std::vector<Generation> together = cluster_->GenerateAll(requests);
  uint32_t preemptions = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_NO_FATAL_FAILURE(ExpectSame(alone[i], together[i]));
    preemptions += together[i].finished.stats().preemptions();
  }
  EXPECT_GE(preemptions, 3u) << "the pool was meant to force preemptions";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
}

// n = 3 with penalties: each completion has its own generated tokens; completion i equals the
// same request with n = 1 and seed + i.
TEST_F(TrainedModelTest, CompletionsEachPenalizeTheirOwnTokens) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}, {"--page-size", "4", "--kv-pages", "256"}));
  v1::GenerateRequest r = TextRequest("Once upon a time, there was a little", 24);
  r.set_ignore_eos(true);
  r.set_n(3);
  r.set_logprobs(true);
  r.set_top_logprobs(2);
  auto* sp = r.mutable_sampling();
  sp->set_temperature(1.0f);
  sp->set_seed(42);
  sp->set_frequency_penalty(1.0f);
  sp->set_repetition_penalty(1.2f);
  std::vector<std::vector<int32_t>> tokens(3);
  std::vector<std::vector<std::string>> logprobs(3);
  {
    grpc::ClientContext ctx;
    auto reader = cluster_->stub().Generate(&ctx, r);
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      ASSERT_LT(resp.index(), 3u);
      ASSERT_EQ(resp.logprobs_size(), resp.token_ids_size());
      for (int k = 0; k < resp.token_ids_size(); ++k) {
        tokens[resp.index()].push_back(resp.token_ids(k));
        logprobs[resp.index()].push_back(resp.logprobs(k).SerializeAsString());
      }
    }
    ASSERT_OK(reader->Finish());
  }
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(absl::StrCat("completion ", i));
    v1::GenerateRequest one = r;
    one.set_n(1);
    one.mutable_sampling()->set_seed(42 + i);
    const Generation g = cluster_->Generate(one);
    ASSERT_OK(g.status);
    EXPECT_EQ(g.tokens, tokens[i]);
    ASSERT_EQ(g.logprobs.size(), logprobs[i].size());
    for (size_t k = 0; k < g.logprobs.size(); ++k) {
      EXPECT_EQ(g.logprobs[k].SerializeAsString(), logprobs[i][k]) << k;
    }
  }
  EXPECT_NE(tokens[0], tokens[1]);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

}  // namespace
}  // namespace pagoda::testing
