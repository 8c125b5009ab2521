// Report and plot text: tables, the --json document, gnuplot scripts, and the request a
// workload entry becomes on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tools/loadgen/plot.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/runner.h"

namespace pagoda::loadgen {
namespace {

RequestRecord Completed(int index, double start, std::vector<double> times) {
  RequestRecord r;
  r.index = index;
  r.ok = true;
  r.start_s = start;
  r.prompt_tokens = 8;
  for (double t : times) r.chunks.push_back({t, 1});
  r.output_tokens = static_cast<int>(times.size());
  r.expected_output_tokens = r.output_tokens;
  r.end_s = times.back();
  return r;
}

LevelResult Level(const std::string& role, LoadShape shape, int concurrency, const Slo& slo) {
  LevelResult level;
  level.role = role;
  level.pacer.shape = shape;
  level.pacer.concurrency = concurrency;
  level.records = {Completed(0, 0, {0.1, 0.2, 0.3}), Completed(1, 0.1, {0.3, 0.5, 0.7})};
  RequestRecord failed;
  failed.index = 2;
  failed.error = "DEADLINE_EXCEEDED: late";
  failed.end_s = 0.7;
  level.records.push_back(failed);
  level.errors = DistinctErrors(level.records, 3);
  level.metrics = ComputeRunMetrics(level.records, RunDuration(level.records), slo);
  return level;
}

TEST(ReportTest, RunTableNamesEveryNumber) {
  const Slo slo{150, 0, 0};
  const std::string table = FormatRunTable(Level("continuous", LoadShape::kClosed, 4, slo), slo);
  for (const char* needle :
       {"closed loop, 4 streams", "Successful requests:", "Failed requests:", "DEADLINE_EXCEEDED",
        "Output token throughput (tok/s):", "Goodput (req/s):", "TTFT <= 150 ms", "TTFT", "TPOT",
        "ITL", "E2E", "p50", "p90", "p99"}) {
    EXPECT_NE(table.find(needle), std::string::npos) << needle << "\n" << table;
  }
}

TEST(ReportTest, BaselineTablePrintsRatios) {
  const std::string table = FormatBaselineTable({{16, 300, 100, 150, 240}});
  EXPECT_NE(table.find("3.00x"), std::string::npos) << table;
  EXPECT_NE(table.find("2.00x"), std::string::npos) << table;
  EXPECT_NE(table.find("1.25x"), std::string::npos) << table;
  EXPECT_NE(table.find("cont/shrink"), std::string::npos) << table;
  const BaselineRow row{4, 300, 100, 0, 0};
  EXPECT_DOUBLE_EQ(row.VsSequential(), 3);
  EXPECT_DOUBLE_EQ(row.VsStatic(), 0);  // no static run: no ratio rather than infinity
  EXPECT_DOUBLE_EQ(row.VsShrinking(), 0);
}

TEST(ReportTest, JsonCarriesMetricsRequestsAndBaselines) {
  BenchReport report;
  report.server = "127.0.0.1:1";
  report.slo = {};
  report.runs.push_back(Level("continuous", LoadShape::kClosed, 2, report.slo));
  report.baselines.push_back({2, 30, 10, 15, 20});
  const nlohmann::json j = nlohmann::json::parse(RenderJson(report));
  const auto& run = j["runs"][0];
  EXPECT_EQ(run["role"], "continuous");
  EXPECT_EQ(run["load"]["shape"], "closed");
  EXPECT_EQ(run["load"]["concurrency"], 2);
  EXPECT_EQ(run["metrics"]["completed"], 2);
  EXPECT_EQ(run["metrics"]["failed"], 1);
  EXPECT_EQ(run["metrics"]["output_tokens"], 6);
  EXPECT_TRUE(run["metrics"]["goodput"].is_null());  // no SLO given
  EXPECT_LE(run["metrics"]["ttft_ms"]["p50"].get<double>(),
            run["metrics"]["ttft_ms"]["p99"].get<double>());
  ASSERT_EQ(run["requests"].size(), 3u);
  EXPECT_EQ(run["requests"][1]["output_tokens"], 3);
  EXPECT_NEAR(run["requests"][1]["ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_EQ(run["requests"][2]["ok"], false);
  EXPECT_EQ(run["requests"][2]["error"], "DEADLINE_EXCEEDED: late");
  EXPECT_DOUBLE_EQ(j["baselines"][0]["continuous_over_sequential"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(j["baselines"][0]["continuous_over_static"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(j["baselines"][0]["continuous_over_static_shrinking"].get<double>(), 1.5);
}

TEST(ReportTest, SweepTableHasALinePerRun) {
  const Slo slo{};
  const std::string table =
      FormatSweepTable({Level("continuous", LoadShape::kClosed, 1, slo),
                        Level("static-batch", LoadShape::kStaticBatch, 4, slo)},
                       slo);
  EXPECT_NE(table.find("continuous"), std::string::npos);
  EXPECT_NE(table.find("static-batch"), std::string::npos);
}

TEST(PlotTest, SweepScriptPlotsPercentilesAndBaselinesOverConcurrency) {
  const Slo slo{100, 0, 0};
  const std::vector<LevelResult> runs = {Level("continuous", LoadShape::kClosed, 1, slo),
                                         Level("continuous", LoadShape::kClosed, 4, slo)};
  const std::string data = SweepData(runs);
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 3);  // header + 2 levels
  const std::string script = SweepScript(runs, true, true, "/tmp/x", "out's.png", "t");
  for (const char* needle :
       {"set output 'out''s.png'", "logscale x 2", "\"4\" 4", "/tmp/x/sweep.dat",
        "/tmp/x/baselines.dat", "static batching", "goodput", "multiplot"}) {
    EXPECT_NE(script.find(needle), std::string::npos) << needle << "\n" << script;
  }
}

TEST(PlotTest, TimeSeriesMarksEmptyWindowsMissing) {
  TimeBucket empty;
  empty.end_s = 1;
  const std::string data = TimeSeriesData({empty});
  EXPECT_NE(data.find("NaN"), std::string::npos) << data;
}

TEST(RequestTest, GreedyRequestsCarryNoSamplingAndSampledOnesTheirSeed) {
  RequestSpec spec;
  spec.index = 3;
  spec.prompt = {1, 7, 9};
  spec.output_len = 12;
  spec.sampling_seed = 99;
  const pagoda::v1::GenerateRequest greedy = BuildRequest(spec, SamplingOptions{});
  EXPECT_EQ(greedy.token_ids().ids_size(), 3);
  EXPECT_EQ(greedy.max_tokens(), 12u);
  EXPECT_TRUE(greedy.ignore_eos());
  EXPECT_FALSE(greedy.has_sampling());
  EXPECT_EQ(greedy.request_id(), "bench-3");
  SamplingOptions sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 40;
  sampled.ignore_eos = false;
  const pagoda::v1::GenerateRequest s = BuildRequest(spec, sampled);
  EXPECT_FLOAT_EQ(s.sampling().temperature(), 0.8f);
  EXPECT_EQ(s.sampling().top_k(), 40);
  EXPECT_EQ(s.sampling().seed(), 99u);
  EXPECT_FALSE(s.ignore_eos());
}

}  // namespace
}  // namespace pagoda::loadgen
