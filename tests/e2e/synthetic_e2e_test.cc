// End-to-end with synthetic workers (pagoda-worker --backend synthetic): the scheduler's
// batching, page tables, recompute, routing, backpressure and cancellation, checked against the
// synthetic tokens' definition (SyntheticNextToken) without a model.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stream_driver.h"
#include "tests/support/status_assertions.h"
#include "worker/backend/synthetic/synthetic_backend.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kVocab = 600;

// The tokens a synthetic worker generates for `request`.
std::vector<int32_t> Expected(const v1::GenerateRequest& request) {
  std::vector<int32_t> seq(request.token_ids().ids().begin(), request.token_ids().ids().end());
  std::vector<int32_t> want;
  for (uint32_t n = 0; n < request.max_tokens(); ++n) {
    want.push_back(worker::SyntheticNextToken(seq, kVocab));
    seq.push_back(want.back());
  }
  return want;
}

v1::GenerateRequest Request(std::mt19937& rng, int prompt, uint32_t max_tokens) {
  v1::GenerateRequest r;
  for (int t = 0; t < prompt; ++t) r.mutable_token_ids()->add_ids(3 + rng() % (kVocab - 3));
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  return r;
}

class SyntheticE2eTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> worker_flags, int workers,
             std::vector<std::string> scheduler_flags = {}) {
    const std::string dir = MakeTempDir("synthetic");
    std::string error;
    ASSERT_TRUE(MakeRandomModel(
        dir + "/model.gguf",
        {"--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "1", "--ffn-dim", "64",
         "--vocab", std::to_string(kVocab), "--context", "256", "--seed", "5"},
        &error))
        << error;
    ClusterOptions options;
    options.model = dir + "/model.gguf";
    options.workers = workers;
    options.scheduler_flags = std::move(scheduler_flags);
    options.worker_flags = {"--backend", "synthetic"};
    options.worker_flags.insert(options.worker_flags.end(), worker_flags.begin(),
                                worker_flags.end());
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  // True once no request is queued or running (polled every millisecond), false after `timeout`.
  bool WaitNoRequests(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const v1::ServerStatus s = cluster_->Status();
      if (s.requests_running() == 0 && s.requests_waiting() == 0) return true;
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  std::unique_ptr<Cluster> cluster_;
};

// 96 concurrent streams on two workers whose KV arenas are small enough to preempt, with
// chunked prefill: every stream carries exactly the synthetic tokens of its prompt.
TEST_F(SyntheticE2eTest, StreamsCarryTheSyntheticTokensThroughPreemption) {
  Start({"--synthetic-step-ms", "1", "--kv-pages", "48", "--page-size", "8"}, 2,
        {"--max-batch-tokens", "96", "--max-prefill-chunk", "24", "--worker-timeout", "60"});
  EXPECT_NE(cluster_->Logs().find("synthetic backend: NO MODEL"), std::string::npos);
  std::mt19937 rng(7);
  std::vector<StreamPlan> plans(96);
  for (size_t i = 0; i < plans.size(); ++i) {
    plans[i].request = Request(rng, 1 + static_cast<int>(rng() % 60), 1 + rng() % 70);
    plans[i].request.set_request_id(absl::StrCat("synthetic-", i));
  }
  auto stubs = MakeStubs(cluster_->address(), 2);
  const std::vector<StreamResult> results = RunStreams({stubs[0].get(), stubs[1].get()}, plans);
  int preemptions = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    const StreamResult& r = results[i];
    ASSERT_OK(r.status);
    ASSERT_TRUE(r.finished.has_value());
    EXPECT_EQ(r.finished->reason(), v1::FINISH_REASON_LENGTH);
    preemptions += static_cast<int>(r.finished->stats().preemptions());
    EXPECT_EQ(r.tokens, Expected(plans[i].request));
  }
  EXPECT_GT(preemptions, 0) << "the arenas were meant to be small enough to preempt";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// A client that stops reading: its flow-control window (kept small) fills, the scheduler's
// write stays in flight, and the tokens generated meanwhile reach it coalesced into few
// messages once it reads again, all of them, in order. A stream beside it runs to its end
// while the slow one is not reading.
TEST_F(SyntheticE2eTest, SlowReaderGetsCoalescedMessagesAndSlowsNoOne) {
  Start({"--synthetic-step-ms", "1"}, 1);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 256);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetString("pagoda.test.channel", "slow");  // its own connection
  auto slow_stub = v1::Generation::NewStub(
      grpc::CreateCustomChannel(cluster_->address(), grpc::InsecureChannelCredentials(), args));
  std::mt19937 rng(3);
  const v1::GenerateRequest slow_request = Request(rng, 8, 200);
  const v1::GenerateRequest other_request = Request(rng, 8, 100);

  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = slow_stub->Generate(&ctx, slow_request);
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  std::vector<int32_t> tokens(response.token_ids().begin(), response.token_ids().end());
  int messages = 1;
  // Not reading now: the other stream must still finish, at its own pace.
  const Generation other = cluster_->Generate(other_request, absl::Seconds(30));
  ASSERT_OK(other.status);
  EXPECT_EQ(other.tokens, Expected(other_request));
  absl::SleepFor(absl::Milliseconds(300));  // the slow stream's 200 tokens are generated
  while (reader->Read(&response)) {
    ++messages;
    tokens.insert(tokens.end(), response.token_ids().begin(), response.token_ids().end());
  }
  ASSERT_OK(reader->Finish());
  EXPECT_EQ(tokens, Expected(slow_request));
  EXPECT_LT(messages, 100) << "tokens generated while the reader was stalled were not coalesced";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// A client that cancels mid-stream: the scheduler sees it through the call's cancellation
// (no polling) and removes the sequence, freeing its pages, while another stream runs on.
TEST_F(SyntheticE2eTest, CancelledStreamLeavesTheWorkerAtOnce) {
  Start({"--synthetic-step-ms", "5"}, 1);
  std::mt19937 rng(4);
  const v1::GenerateRequest request = Request(rng, 8, 240);
  grpc::ClientContext ctx;
  auto reader = cluster_->stub().Generate(&ctx, request);
  v1::GenerateResponse response;
  int tokens = 0;
  while (tokens < 5 && reader->Read(&response)) tokens += response.token_ids_size();
  ASSERT_GE(tokens, 5);
  ctx.TryCancel();
  EXPECT_TRUE(WaitNoRequests(absl::Seconds(5))) << cluster_->Status().DebugString();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

// n > 1 on synthetic workers: concurrent requests of 2 to 4 completions, prompts with partial
// last pages (so every fork copies a page on the worker), on one stream each: every completion
// (by `index`) carries exactly the prompt's synthetic tokens and ends with its own finished
// message, after which it sends nothing. Then a cancelled n = 3 stream ends all three
// completions in the scheduler at once.
TEST_F(SyntheticE2eTest, CompletionsShareOneStreamAndACancelEndsThemAll) {
  Start({"--synthetic-step-ms", "2", "--kv-pages", "96", "--page-size", "8"}, 2);
  std::mt19937 rng(11);
  constexpr int kRequests = 8;
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    requests.push_back(Request(rng, 9 + static_cast<int>(rng() % 32), 1 + rng() % 30));
    // Completions fork at the last prompt token: a partial page before it is copied.
    if ((requests.back().token_ids().ids_size() - 1) % 8 == 0) {
      requests.back().mutable_token_ids()->add_ids(7);
    }
    requests.back().set_n(2 + i % 3);
  }
  struct Got {
    grpc::Status status;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int> finished;        // finished messages per index
    std::vector<int> after_finished;  // messages per index after its finished one
  };
  std::vector<Got> got(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      const uint32_t n = requests[i].n();
      Got& g = got[i];
      g.tokens.resize(n);
      g.finished.assign(n, 0);
      g.after_finished.assign(n, 0);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      auto reader = cluster_->stub().Generate(&ctx, requests[i]);
      v1::GenerateResponse response;
      while (reader->Read(&response)) {
        const uint32_t index = response.index();
        if (index >= n) {
          ++g.after_finished[0];  // out of range: counted as a failure below
          continue;
        }
        g.after_finished[index] += g.finished[index] > 0;
        g.tokens[index].insert(g.tokens[index].end(), response.token_ids().begin(),
                               response.token_ids().end());
        if (response.has_finished()) {
          ++g.finished[index];
          EXPECT_EQ(response.finished().reason(), v1::FINISH_REASON_LENGTH);
          EXPECT_EQ(response.finished().usage().completion_tokens(), requests[i].max_tokens());
        }
      }
      g.status = reader->Finish();
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i, " n=", requests[i].n()));
    ASSERT_OK(got[i].status);
    for (uint32_t c = 0; c < requests[i].n(); ++c) {
      EXPECT_EQ(got[i].tokens[c], Expected(requests[i])) << "completion " << c;
      EXPECT_EQ(got[i].finished[c], 1) << "completion " << c;
      EXPECT_EQ(got[i].after_finished[c], 0) << "completion " << c;
    }
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();

  v1::GenerateRequest long_request = Request(rng, 13, 240);
  long_request.set_n(3);
  grpc::ClientContext ctx;
  auto reader = cluster_->stub().Generate(&ctx, long_request);
  v1::GenerateResponse response;
  std::set<uint32_t> seen;
  while (seen.size() < 3 && reader->Read(&response)) seen.insert(response.index());
  ASSERT_EQ(seen.size(), 3u) << "every completion streams before the cancel";
  ctx.TryCancel();
  EXPECT_TRUE(WaitNoRequests(absl::Seconds(5))) << cluster_->Status().DebugString();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
}

}  // namespace
}  // namespace pagoda::testing
