// End-to-end: real scheduler and worker processes on loopback, driven over the public API.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

// (a) Greedy generations equal llama.cpp's, token for token, through every process.
TEST_F(TrainedModelTest, GoldenGreedyGenerations) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  for (const auto& c : LoadGolden(*golden_)["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    Generation g = cluster_->Generate(TextRequest(c["prompt"], c["max_tokens"]));
    ASSERT_OK(g.status) << cluster_->Logs();
    EXPECT_EQ(g.tokens, c["expected_token_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(g.text, c["expected_text"].get<std::string>());
    EXPECT_EQ(g.finished.reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(g.finished.usage().prompt_tokens(), c["prompt_token_ids"].size());
    EXPECT_EQ(g.finished.usage().completion_tokens(), c["max_tokens"].get<uint32_t>());
    EXPECT_GE(g.finished.stats().e2e_seconds(), g.finished.stats().time_to_first_token_s());
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
  // Both processes at their defaults: the CPU worker's budget, and the scheduler's own chunk
  // (the CPU worker states no preference).
  EXPECT_TRUE(cluster_->scheduler().WaitForLog(
      "plans of up to 2048 tokens, prefill chunks of up to 512", absl::Seconds(10)))
      << cluster_->Logs();
}

// (b) 16 concurrent requests of mixed lengths, batched with chunked prefill and small pages,
// return exactly what the same requests return one at a time.
TEST_F(TrainedModelTest, ConcurrentEqualsSequential) {
  StartCluster({"--max-batch-tokens", "48", "--max-prefill-chunk", "16"},
               {"--page-size", "4", "--kv-pages", "1024"});
  const auto cases = LoadGolden(*golden_)["cases"];
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    std::string prompt;
    for (int r = 0; r <= i % 4; ++r) {
      prompt += cases[(i + r) % cases.size()]["prompt"].get<std::string>() + " ";
    }
    prompt += cases[i % cases.size()]["prompt"].get<std::string>();
    requests.push_back(TextRequest(prompt, 8 + 5 * (i % 7)));
    if (i % 3 == 0) requests.back().set_ignore_eos(true);
  }
  std::vector<Generation> sequential;
  for (const auto& r : requests) sequential.push_back(cluster_->Generate(r));
  const std::vector<Generation> concurrent = cluster_->GenerateAll(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK(sequential[i].status);
    ASSERT_OK(concurrent[i].status);
    EXPECT_FALSE(sequential[i].tokens.empty());
    EXPECT_EQ(concurrent[i].tokens, sequential[i].tokens);
    EXPECT_EQ(concurrent[i].text, sequential[i].text);
    EXPECT_EQ(concurrent[i].finished.reason(), sequential[i].finished.reason());
  }
  // (c) every KV page is free again at the end of the run.
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
}

// (c) A cancelled stream frees its pages; the server keeps serving.
TEST_F(TrainedModelTest, CancelledStreamFreesItsPages) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}, {"--page-size", "8", "--kv-pages", "256"}));
  grpc::ClientContext ctx;
  v1::GenerateRequest request = TextRequest("Once upon a time", 400);
  request.set_ignore_eos(true);
  auto reader = cluster_->stub().Generate(&ctx, request);
  v1::GenerateResponse resp;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader->Read(&resp));
  v1::ServerStatus busy = cluster_->Status();
  ASSERT_EQ(busy.workers_size(), 1);
  EXPECT_LT(busy.workers(0).kv_pages_free(), busy.workers(0).kv_pages_total());
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5))) << cluster_->Status().DebugString();
  Generation after = cluster_->Generate(TextRequest("Once upon a time", 4));
  EXPECT_OK(after.status);
  EXPECT_EQ(after.tokens.size(), 4u);
}

// Bad requests get INVALID_ARGUMENT with a message naming the limit; others are unharmed.
TEST_F(TrainedModelTest, BadRequestsAreRejectedClearly) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  struct Case {
    std::string name;
    v1::GenerateRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", TextRequest("", 4), "prompt is empty"});
  cases.push_back({"too long", TextRequest("Once upon a time", 600), "context of 512"});
  v1::GenerateRequest ids = TextRequest("", 4);
  ids.mutable_token_ids()->add_ids(1);
  ids.mutable_token_ids()->add_ids(9999);
  cases.push_back({"unknown id", ids, "outside the vocabulary [0, 512)"});
  v1::GenerateRequest nan = TextRequest("Hi", 4);
  nan.mutable_sampling()->set_temperature(std::nanf(""));
  cases.push_back({"nan temperature", nan, "temperature"});
  v1::GenerateRequest top_p = TextRequest("Hi", 4);
  top_p.mutable_sampling()->set_top_p(2);
  cases.push_back({"top_p", top_p, "top_p must be in [0, 1]"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Generation g = cluster_->Generate(c.request);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(g.status.error_message().find(c.message), std::string::npos)
        << g.status.error_message();
  }
  Generation ok = cluster_->Generate(TextRequest("Once upon a time", 5));
  EXPECT_OK(ok.status);
  EXPECT_EQ(ok.tokens.size(), 5u);
}

// Token-id prompts, Tokenize and GetModelInfo agree with the golden file.
TEST_F(TrainedModelTest, TokenizeAndModelInfo) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const auto first = LoadGolden(*golden_)["cases"][0];
  v1::TokenizeRequest tr;
  tr.set_text(first["prompt"]);
  tr.set_add_bos(true);
  v1::TokenizeResponse tokens;
  grpc::ClientContext ctx;
  ASSERT_OK(cluster_->stub().Tokenize(&ctx, tr, &tokens));
  EXPECT_EQ(std::vector<int32_t>(tokens.token_ids().begin(), tokens.token_ids().end()),
            first["prompt_token_ids"].get<std::vector<int32_t>>());
  v1::ModelInfo info;
  grpc::ClientContext ctx2;
  ASSERT_OK(cluster_->stub().GetModelInfo(&ctx2, v1::GetModelInfoRequest(), &info));
  EXPECT_EQ(info.vocab_size(), 512u);
  EXPECT_EQ(info.context_length(), 512u);
  EXPECT_EQ(info.attached_workers(), 1u);
  v1::GenerateRequest by_ids;
  for (int id : first["prompt_token_ids"]) by_ids.mutable_token_ids()->add_ids(id);
  by_ids.set_max_tokens(first["max_tokens"]);
  Generation g = cluster_->Generate(by_ids);
  ASSERT_OK(g.status);
  EXPECT_EQ(g.tokens, first["expected_token_ids"].get<std::vector<int32_t>>());
}

// Both servers stop cleanly (exit 0) on SIGTERM and SIGINT.
TEST_F(TrainedModelTest, ServersStopCleanlyOnSignals) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  cluster_->worker(0).Signal(SIGINT);
  EXPECT_EQ(cluster_->worker(0).Wait(absl::Seconds(10)), 0) << cluster_->Logs();
  cluster_->scheduler().Signal(SIGTERM);
  EXPECT_EQ(cluster_->scheduler().Wait(absl::Seconds(10)), 0) << cluster_->Logs();
}

// A second scheduler on a port in use, a missing or corrupt model: clear error, exit 1.
TEST_F(TrainedModelTest, StartupErrorsExitNonZero) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string dir = MakeTempDir("startup");
  const std::string bin = BinDir();
  const std::string corrupt = dir + "/corrupt.gguf";
  std::ofstream(corrupt) << "GGUF this is not a model";
  struct Case {
    std::vector<std::string> argv;
    std::string message;
  };
  std::vector<Case> cases = {
      {{bin + "/pagoda-scheduler", "--listen", cluster_->address(), "--model", *model_},
       "port is in use"},
      {{bin + "/pagoda-scheduler", "--listen", "127.0.0.1:0", "--model", dir + "/missing.gguf"},
       "missing.gguf"},
      {{bin + "/pagoda-scheduler", "--listen", "127.0.0.1:0", "--model", corrupt}, "corrupt"},
      {{bin + "/pagoda-worker", "--scheduler", cluster_->address(), "--model", corrupt, "--backend",
        "cpu"},
       "corrupt"},
      {{bin + "/pagoda-worker", "--scheduler", cluster_->address(), "--model", *model_, "--backend",
        "tpu"},
       "supported: cpu"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].argv[0] + " " + cases[i].message);
    ChildProcess p(cases[i].argv, absl::StrCat(dir, "/p", i, ".log"));
    ASSERT_TRUE(p.Start());
    EXPECT_EQ(p.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(p.Log().find(cases[i].message), std::string::npos) << p.Log();
  }
}

// A worker whose model differs from the scheduler's is refused and exits non-zero.
TEST_F(TrainedModelTest, WorkerWithOtherModelIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string dir = MakeTempDir("refused");
  ChildProcess make({BinDir() + "/pagoda-make-model", "--output", dir + "/other.gguf", "--layers",
                     "1", "--dim", "32", "--heads", "2", "--kv-heads", "1", "--ffn-dim", "64",
                     "--vocab", "512", "--context", "128"},
                    dir + "/make.log");
  ASSERT_TRUE(make.Start());
  ASSERT_EQ(make.Wait(absl::Seconds(30)), 0) << make.Log();
  ChildProcess worker({BinDir() + "/pagoda-worker", "--scheduler", cluster_->address(), "--model",
                       dir + "/other.gguf", "--backend", "cpu"},
                      dir + "/worker.log");
  ASSERT_TRUE(worker.Start());
  EXPECT_EQ(worker.Wait(absl::Seconds(30)), 1) << worker.Log();
  EXPECT_NE(worker.Log().find("fingerprint"), std::string::npos) << worker.Log();
  EXPECT_EQ(cluster_->Status().workers_size(), 1);
}

// With a generated random model: the same seed gives the same text, another seed differs.
TEST(RandomModelTest, SeededSamplingIsReproducible) {
  const std::string dir = MakeTempDir("random");
  const std::string model = dir + "/random.gguf";
  std::string error;
  ASSERT_TRUE(
      MakeRandomModel(model,
                      {"--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                       "--ffn-dim", "128", "--vocab", "600", "--context", "256", "--seed", "3"},
                      &error))
      << error;
  ClusterOptions options;
  options.model = model;
  auto cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  auto sampled = [&](uint64_t seed) {
    v1::GenerateRequest r = TextRequest("The quick brown fox", 24);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_top_k(50);
    r.mutable_sampling()->set_top_p(0.95f);
    r.mutable_sampling()->set_seed(seed);
    r.set_ignore_eos(true);
    Generation g = cluster->Generate(r);
    EXPECT_OK(g.status);
    return g.tokens;
  };
  const std::vector<int32_t> a = sampled(7);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(sampled(7), a);
  EXPECT_NE(sampled(8), a);
}

}  // namespace
}  // namespace pagoda::testing
