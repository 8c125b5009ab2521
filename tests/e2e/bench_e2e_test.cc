// End-to-end: pagoda-bench against a real scheduler and CPU worker on a small random model.
// Checks the --json document: every request completed with exactly the output length it asked
// for (ignore_eos), and the latency numbers are positive and ordered.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster.h"
#include "tests/support/test_models.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

class BenchE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("bench"));
    std::string error;
    ASSERT_TRUE(
        MakeRandomModel(*dir_ + "/model.gguf",
                        {"--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                         "--ffn-dim", "128", "--vocab", "600", "--context", "256", "--seed", "5"},
                        &error))
        << error;
    ClusterOptions options;
    options.model = *dir_ + "/model.gguf";
    cluster_ = Cluster::Start(options, &error).release();
    ASSERT_NE(cluster_, nullptr) << error;
  }

  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete dir_;
  }

  void SetUp() override {
    if (cluster_ == nullptr) GTEST_FAIL() << "the cluster did not start (see the suite's setup)";
  }

  // Runs pagoda-bench with `flags` and --json; returns the parsed document.
  json RunBench(const std::string& name, std::vector<std::string> flags) {
    const std::string json_path = absl::StrCat(*dir_, "/", name, ".json");
    std::vector<std::string> argv = {
        BinDir() + "/pagoda-bench", "--server", cluster_->address(), "--json", json_path,
        "--warmup-requests",        "1",        "--timeout-s",       "120"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ChildProcess bench(argv, absl::StrCat(*dir_, "/", name, ".log"));
    EXPECT_TRUE(bench.Start());
    const std::optional<int> rc = bench.Wait(absl::Seconds(240));
    log_ = bench.Log();
    EXPECT_EQ(rc, 0) << log_ << cluster_->Logs();
    std::ifstream in(json_path);
    if (!in) {
      ADD_FAILURE() << "no JSON written\n" << log_;
      return json::object();
    }
    return json::parse(in);
  }

  static std::string* dir_;
  static Cluster* cluster_;
  std::string log_;
};

std::string* BenchE2eTest::dir_ = nullptr;
Cluster* BenchE2eTest::cluster_ = nullptr;

void ExpectOrderedPositive(const json& summary, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_GT(summary["count"].get<int>(), 0);
  EXPECT_GT(summary["mean"].get<double>(), 0);
  EXPECT_GT(summary["p50"].get<double>(), 0);
  EXPECT_LE(summary["p50"].get<double>(), summary["p90"].get<double>());
  EXPECT_LE(summary["p90"].get<double>(), summary["p99"].get<double>());
  EXPECT_LE(summary["p99"].get<double>(), summary["max"].get<double>());
}

TEST_F(BenchE2eTest, ClosedLoopRunReportsEveryRequestAndOrderedLatencies) {
  const json doc = RunBench(
      "closed", {"--concurrency", "3", "--num-requests", "7", "--input-len", "24", "--input-dist",
                 "uniform", "--output-len", "12", "--output-dist", "uniform", "--slo-ttft-ms",
                 "60000", "--slo-tpot-ms", "60000", "--progress=false"});
  ASSERT_EQ(doc["runs"].size(), 1u) << log_;
  const json& run = doc["runs"][0];
  const json& m = run["metrics"];
  EXPECT_EQ(m["completed"], 7);
  EXPECT_EQ(m["failed"], 0);
  ASSERT_EQ(run["requests"].size(), 7u);
  int expected_total = 0;
  for (const json& r : run["requests"]) {
    SCOPED_TRACE(r.dump());
    EXPECT_TRUE(r["ok"].get<bool>());
    // ignore_eos (the default) makes every output exactly the requested length.
    EXPECT_EQ(r["output_tokens"], r["expected_output_tokens"]);
    EXPECT_GE(r["expected_output_tokens"].get<int>(), 6);
    EXPECT_LE(r["expected_output_tokens"].get<int>(), 18);
    EXPECT_GT(r["ttft_ms"].get<double>(), 0);
    EXPECT_GE(r["e2e_ms"].get<double>(), r["ttft_ms"].get<double>());
    expected_total += r["expected_output_tokens"].get<int>();
  }
  EXPECT_EQ(m["output_tokens"], expected_total);
  EXPECT_GT(m["duration_s"].get<double>(), 0);
  EXPECT_GT(m["request_throughput"].get<double>(), 0);
  EXPECT_GT(m["output_throughput"].get<double>(), 0);
  EXPECT_GT(m["total_token_throughput"].get<double>(), m["output_throughput"].get<double>());
  // Generous SLOs: every request meets them, so goodput equals request throughput.
  EXPECT_EQ(m["good_requests"], 7);
  EXPECT_DOUBLE_EQ(m["goodput"].get<double>(), m["request_throughput"].get<double>());
  for (const char* metric : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    ExpectOrderedPositive(m[metric], metric);
  }
  EXPECT_NE(log_.find("Successful requests:"), std::string::npos) << log_;
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10)));
}

TEST_F(BenchE2eTest, SweepWithBaselinesPrintsRatios) {
  const json doc = RunBench(
      "sweep", {"--sweep-concurrency", "1,2", "--baselines", "--num-requests", "4", "--input-len",
                "16", "--output-len", "8", "--output-dist", "uniform", "--progress=false"});
  // continuous at 1 and 2 (1 doubles as the sequential baseline) + static batches of 2, padded
  // and shrinking.
  ASSERT_EQ(doc["runs"].size(), 4u) << log_;
  EXPECT_EQ(doc["runs"][2]["role"], "static-batch");
  EXPECT_EQ(doc["runs"][2]["load"]["padded"], true);
  EXPECT_EQ(doc["runs"][2]["waves"], 2);
  EXPECT_EQ(doc["runs"][3]["role"], "static-shrink");
  EXPECT_EQ(doc["runs"][3]["load"]["padded"], false);
  EXPECT_EQ(doc["runs"][3]["waves"], 2);
  ASSERT_EQ(doc["baselines"].size(), 2u);
  const json& level2 = doc["baselines"][1];
  EXPECT_EQ(level2["concurrency"], 2);
  EXPECT_GT(level2["continuous_over_sequential"].get<double>(), 0);
  EXPECT_GT(level2["continuous_over_static"].get<double>(), 0);
  EXPECT_GT(level2["continuous_over_static_shrinking"].get<double>(), 0);
  int padding = 0;
  for (const json& run : doc["runs"]) {
    EXPECT_EQ(run["metrics"]["completed"], 4);
    for (const json& r : run["requests"]) {
      EXPECT_EQ(r["output_tokens"], r["expected_output_tokens"]);
    }
  }
  // Padded waves: every request of a wave streamed the wave's longest output (ignore_eos), and
  // only its own length counts.
  const json& padded = doc["runs"][2]["requests"];
  ASSERT_EQ(padded.size(), 4u);
  for (int wave = 0; wave < 2; ++wave) {
    const int longest = std::max(padded[2 * wave]["expected_output_tokens"].get<int>(),
                                 padded[2 * wave + 1]["expected_output_tokens"].get<int>());
    for (const json& r : {padded[2 * wave], padded[2 * wave + 1]}) {
      SCOPED_TRACE(r.dump());
      EXPECT_EQ(r["output_tokens"].get<int>() + r.value("padding_tokens", 0), longest);
      padding += r.value("padding_tokens", 0);
    }
  }
  // Uniform lengths of 4..12 over 4 requests: some wave is uneven (the lengths are seeded).
  EXPECT_GT(padding, 0);
  for (const json& r : doc["runs"][3]["requests"]) EXPECT_FALSE(r.contains("padding_tokens"));
  EXPECT_NE(log_.find("cont/static"), std::string::npos) << log_;
  EXPECT_NE(log_.find("cont/shrink"), std::string::npos) << log_;
}

TEST_F(BenchE2eTest, PoissonArrivalsWithSampledSharedPrefixPrompts) {
  const json doc = RunBench(
      "poisson", {"--request-rate", "20", "--num-requests", "6", "--prompts", "shared-prefix",
                  "--shared-prefix-len", "12", "--input-len", "20", "--output-len", "6",
                  "--temperature", "0.8", "--top-k", "20", "--seed", "3", "--progress=false"});
  ASSERT_EQ(doc["runs"].size(), 1u) << log_;
  EXPECT_EQ(doc["runs"][0]["load"]["shape"], "poisson");
  EXPECT_EQ(doc["runs"][0]["metrics"]["completed"], 6);
  EXPECT_EQ(doc["runs"][0]["metrics"]["output_tokens"], 36);
}

TEST_F(BenchE2eTest, PlotWritesAPng) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)";
  }
  const std::string png = *dir_ + "/run.png";
  RunBench("plot", {"--concurrency", "2", "--num-requests", "4", "--input-len", "8", "--output-len",
                    "8", "--plot", png, "--progress=false"});
  std::ifstream in(png, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG") << log_;
}

TEST_F(BenchE2eTest, UnreachableServerFailsClearly) {
  ChildProcess bench(
      {BinDir() + "/pagoda-bench", "--server", "127.0.0.1:1", "--wait-for-server-s", "0.5"},
      *dir_ + "/unreachable.log");
  ASSERT_TRUE(bench.Start());
  EXPECT_EQ(bench.Wait(absl::Seconds(30)), 1);
  EXPECT_NE(bench.Log().find("did not answer"), std::string::npos) << bench.Log();
}

}  // namespace
}  // namespace pagoda::testing
