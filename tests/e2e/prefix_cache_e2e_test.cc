// End-to-end: the prefix cache never changes what is generated. The same greedy workload (many
// requests sharing a system prompt, plus multi-turn conversations that resend their history)
// runs on two 3-worker clusters with small KV pools: one with --enable-prefix-caching=false,
// one with the cache on and a worker killed mid-run; a few requests ask for n = 2 completions.
// Outputs must match token for token.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kSharedRequests = 32;
constexpr int kConversations = 6;
constexpr int kTurns = 4;
constexpr int kForked = 4;  // requests with n = 2

std::vector<int32_t> RandomIds(std::mt19937& rng, int n) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = 3 + static_cast<int32_t>(rng() % 400);
  return ids;
}

v1::GenerateRequest IdsRequest(const std::vector<int32_t>& ids, uint32_t max_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : ids) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  return r;
}

// One Generate call with n completions, split by GenerateResponse.index.
struct Completions {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> text;
  std::vector<int> finished;  // messages with `finished`, per completion
  std::vector<v1::Finished> last;
  grpc::Status status;
};

Completions GenerateN(Cluster& cluster, const v1::GenerateRequest& request, int n) {
  Completions out;
  out.tokens.resize(n);
  out.text.resize(n);
  out.finished.assign(n, 0);
  out.last.resize(n);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = cluster.stub().Generate(&ctx, request);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    const uint32_t i = resp.index();
    EXPECT_LT(i, static_cast<uint32_t>(n));
    if (i >= static_cast<uint32_t>(n)) continue;
    EXPECT_EQ(out.finished[i], 0) << "completion " << i << " streamed after its end";
    out.tokens[i].insert(out.tokens[i].end(), resp.token_ids().begin(), resp.token_ids().end());
    out.text[i] += resp.text();
    if (resp.has_finished()) {
      ++out.finished[i];
      out.last[i] = resp.finished();
    }
  }
  out.status = reader->Finish();
  return out;
}

struct Outputs {
  std::vector<std::vector<int32_t>> tokens;  // shared-prefix requests, then every turn
  int64_t cached_tokens = 0;
  int64_t preemptions = 0;
};

// The workload: shared-prefix requests and conversations, all at once. A conversation's turn
// is its history + the model's last answer + new user tokens. `during` runs once some requests
// are running.
Outputs RunWorkload(Cluster& cluster, const std::function<void()>& during) {
  std::mt19937 rng(99);
  std::vector<int32_t> system = {1};
  for (int32_t id : RandomIds(rng, 95)) system.push_back(id);
  std::vector<v1::GenerateRequest> shared;
  for (int i = 0; i < kSharedRequests; ++i) {
    std::vector<int32_t> prompt = system;
    for (int32_t id : RandomIds(rng, 8 + 4 * (i % 8))) prompt.push_back(id);
    shared.push_back(IdsRequest(prompt, 48));
  }
  std::vector<std::vector<std::vector<int32_t>>> user(kConversations);
  for (auto& turns : user) {
    for (int t = 0; t < kTurns; ++t) turns.push_back(RandomIds(rng, 12));
  }
  const int total = kSharedRequests + kConversations * kTurns;
  std::vector<Generation> results(total);
  std::vector<Completions> forked(kForked);
  std::vector<std::thread> threads;
  for (int i = 0; i < kForked; ++i) {
    std::vector<int32_t> prompt = system;
    for (int32_t id : RandomIds(rng, 8)) prompt.push_back(id);
    v1::GenerateRequest r = IdsRequest(prompt, 24);
    r.set_n(2);
    threads.emplace_back([&, i, r] { forked[i] = GenerateN(cluster, r, 2); });
  }
  for (int i = 0; i < kSharedRequests; ++i) {
    threads.emplace_back([&, i] { results[i] = cluster.Generate(shared[i]); });
  }
  for (int c = 0; c < kConversations; ++c) {
    threads.emplace_back([&, c] {
      std::vector<int32_t> history = {1};
      for (int t = 0; t < kTurns; ++t) {
        history.insert(history.end(), user[c][t].begin(), user[c][t].end());
        Generation& g = results[kSharedRequests + c * kTurns + t];
        g = cluster.Generate(IdsRequest(history, 24));
        if (!g.status.ok()) return;
        history.insert(history.end(), g.tokens.begin(), g.tokens.end());
      }
    });
  }
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (cluster.Status().requests_running() < 6 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  during();
  for (auto& t : threads) t.join();
  Outputs out;
  for (int i = 0; i < total; ++i) {
    EXPECT_OK(results[i].status) << "request " << i;
    EXPECT_LT(results[i].finished.usage().cached_tokens(),
              results[i].finished.usage().prompt_tokens());
    out.tokens.push_back(results[i].tokens);
    out.cached_tokens += results[i].finished.usage().cached_tokens();
  }
  for (const Completions& c : forked) {
    EXPECT_OK(c.status);
    EXPECT_EQ(c.tokens[0], c.tokens[1]) << "greedy completions of one prompt";
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(c.finished[i], 1);
      out.tokens.push_back(c.tokens[i]);
    }
  }
  out.preemptions = static_cast<int64_t>(cluster.Status().preemptions_total());
  return out;
}

TEST_F(TrainedModelTest, PrefixCacheKeepsGreedyOutputsExact) {
  // 40 pages of 8 tokens per worker: a few requests' worth, so pages are evicted and
  // sequences preempted.
  const std::vector<std::string> worker_flags = {"--page-size", "8",         "--kv-pages",
                                                 "40",          "--threads", "1"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(
      {"--enable-prefix-caching=false", "--max-batch-tokens", "128"}, worker_flags, 3));
  const Outputs off = RunWorkload(*cluster_, [] {});
  EXPECT_EQ(off.cached_tokens, 0);
  EXPECT_EQ(cluster_->Status().prefix_cache_hit_tokens(), 0u);
  cluster_.reset();

  ASSERT_NO_FATAL_FAILURE(StartCluster({"--max-batch-tokens", "128"}, worker_flags, 3));
  uint32_t running_at_kill = 0;
  const Outputs on = RunWorkload(*cluster_, [&] {
    running_at_kill = cluster_->Status().requests_running();
    cluster_->worker(1).Signal(SIGKILL);
  });
  EXPECT_GT(running_at_kill, 0u) << "the worker must die mid-run";
  ASSERT_EQ(on.tokens.size(), off.tokens.size());
  for (size_t i = 0; i < on.tokens.size(); ++i) {
    EXPECT_EQ(on.tokens[i], off.tokens[i]) << "request " << i;
  }
  const v1::ServerStatus status = cluster_->Status();
  EXPECT_GT(on.cached_tokens, 0);
  EXPECT_GT(status.prefix_cache_hit_tokens(), 0u);
  EXPECT_GE(status.prefix_cache_queried_tokens(), status.prefix_cache_hit_tokens());
  EXPECT_GT(on.preemptions + off.preemptions, 0) << "the small pools must force preemptions";
  EXPECT_EQ(status.workers_size(), 2);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << status.DebugString();
  int cached_pages = 0;
  const v1::ServerStatus idle = cluster_->Status();
  for (const auto& w : idle.workers()) cached_pages += w.kv_pages_cached();
  EXPECT_GT(cached_pages, 0) << "finished requests leave their pages cached";
}

// n > 1: greedy completions all equal the n = 1 answer; seeded ones equal n = 1 requests with
// seeds seed + i; each completion ends with its own finished message; limits are named.
TEST_F(TrainedModelTest, CompletionsShareThePromptAndMatchSingleRequests) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}, {"--page-size", "4", "--threads", "1"}));
  v1::GenerateRequest greedy = TextRequest("Once upon a time, there was a little", 24);
  greedy.set_ignore_eos(true);
  const Generation single = cluster_->Generate(greedy);
  ASSERT_OK(single.status);
  greedy.set_n(3);
  Completions three = GenerateN(*cluster_, greedy, 3);
  ASSERT_OK(three.status);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three.tokens[i], single.tokens) << "completion " << i;
    EXPECT_EQ(three.text[i], single.text);
    EXPECT_EQ(three.finished[i], 1);
    EXPECT_EQ(three.last[i].reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(three.last[i].usage().completion_tokens(), 24u);
  }

  v1::GenerateRequest sampled = TextRequest("The little dog", 20);
  sampled.set_ignore_eos(true);
  sampled.mutable_sampling()->set_temperature(1.0f);
  sampled.mutable_sampling()->set_seed(1234);
  sampled.set_n(4);
  Completions four = GenerateN(*cluster_, sampled, 4);
  ASSERT_OK(four.status);
  bool differ = false;
  for (int i = 0; i < 4; ++i) {
    v1::GenerateRequest one = sampled;
    one.set_n(1);
    one.mutable_sampling()->set_seed(1234 + i);
    const Generation alone = cluster_->Generate(one);
    ASSERT_OK(alone.status);
    EXPECT_EQ(four.tokens[i], alone.tokens) << "completion " << i << " uses seed + " << i;
    differ |= four.tokens[i] != four.tokens[0];
  }
  EXPECT_TRUE(differ) << "different seeds, different samples";

  greedy.set_n(17);
  const Generation too_many = cluster_->Generate(greedy);
  EXPECT_EQ(too_many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_many.status.error_message().find("n must be in [1, 16]"), std::string::npos)
      << too_many.status.error_message();
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10)));
}

}  // namespace
}  // namespace pagoda::testing
