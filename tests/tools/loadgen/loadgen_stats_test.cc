// Serving metrics: percentiles, TTFT/TPOT/ITL per request, throughput and goodput per run.
#include <gtest/gtest.h>

#include <vector>

#include "tools/loadgen/stats.h"

namespace pagoda::loadgen {
namespace {

// A completed request sent at `start` whose token messages arrive at `times` (one token each
// unless `tokens` says otherwise).
RequestRecord Request(double start, std::vector<double> times, std::vector<int> tokens = {}) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start;
  r.prompt_tokens = 10;
  for (size_t i = 0; i < times.size(); ++i) {
    const int n = tokens.empty() ? 1 : tokens[i];
    r.chunks.push_back({times[i], n});
    r.output_tokens += n;
  }
  r.expected_output_tokens = r.output_tokens;
  r.end_s = times.empty() ? start : times.back();
  return r;
}

TEST(PercentileTest, InterpolatesLinearlyBetweenClosestRanksLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);  // numpy.percentile([1,2,3,4], 90)
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
}

TEST(PercentileTest, SummaryOfOneToHundred) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  const Summary s = Summarize(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50.5);
  EXPECT_DOUBLE_EQ(s.p90, 90.1);
  EXPECT_DOUBLE_EQ(s.p99, 99.01);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_LE(s.p50, s.p90);
  EXPECT_LE(s.p90, s.p99);
}

TEST(PercentileTest, EmptySummaryIsZero) {
  const Summary s = Summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p99, 0);
}

TEST(RequestMetricsTest, TtftTpotItlAndE2e) {
  // Sent at 1.0; tokens at 1.5, 1.6, 1.8, 2.1.
  const RequestMetrics m = ComputeRequestMetrics(Request(1.0, {1.5, 1.6, 1.8, 2.1}));
  ASSERT_TRUE(m.ttft_s.has_value());
  EXPECT_DOUBLE_EQ(*m.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(m.e2e_s, 1.1);
  ASSERT_TRUE(m.tpot_s.has_value());
  EXPECT_NEAR(*m.tpot_s, (1.1 - 0.5) / 3, 1e-12);  // (e2e - ttft) / (tokens - 1)
  ASSERT_EQ(m.itl_s.size(), 3u);
  EXPECT_NEAR(m.itl_s[0], 0.1, 1e-12);
  EXPECT_NEAR(m.itl_s[1], 0.2, 1e-12);
  EXPECT_NEAR(m.itl_s[2], 0.3, 1e-12);
}

TEST(RequestMetricsTest, SeveralTokensInOneMessageCountForTpotButGiveOneGap) {
  // 1 token at 0.2, then 3 tokens together at 0.8: TPOT spreads 0.6 s over 3 tokens.
  const RequestMetrics m = ComputeRequestMetrics(Request(0, {0.2, 0.8}, {1, 3}));
  EXPECT_NEAR(*m.tpot_s, 0.2, 1e-12);
  ASSERT_EQ(m.itl_s.size(), 1u);
  EXPECT_NEAR(m.itl_s[0], 0.6, 1e-12);
}

TEST(RequestMetricsTest, OneTokenHasNoTpotAndNoTokenHasNoTtft) {
  const RequestMetrics one = ComputeRequestMetrics(Request(0, {0.3}));
  EXPECT_TRUE(one.ttft_s.has_value());
  EXPECT_FALSE(one.tpot_s.has_value());
  EXPECT_TRUE(one.itl_s.empty());
  RequestRecord none = Request(0, {});
  none.end_s = 0.4;
  const RequestMetrics m = ComputeRequestMetrics(none);
  EXPECT_FALSE(m.ttft_s.has_value());
  EXPECT_DOUBLE_EQ(m.e2e_s, 0.4);
}

TEST(GoodputTest, MeetsEveryGivenSloAndIgnoresTheOthers) {
  const RequestMetrics m = ComputeRequestMetrics(Request(0, {0.1, 0.15, 0.2}));  // TPOT 50 ms
  EXPECT_TRUE(MeetsSlo(m, Slo{}));
  EXPECT_TRUE(MeetsSlo(m, Slo{100, 0, 0}));
  EXPECT_TRUE(MeetsSlo(m, Slo{100, 50, 0}));  // "at most": equal meets it
  EXPECT_FALSE(MeetsSlo(m, Slo{99, 0, 0}));
  EXPECT_FALSE(MeetsSlo(m, Slo{100, 49, 0}));
  EXPECT_FALSE(MeetsSlo(m, Slo{0, 0, 199}));
  EXPECT_TRUE(MeetsSlo(m, Slo{0, 0, 200}));
}

TEST(GoodputTest, OneTokenRequestHasTpotZeroForGoodput) {
  const RequestMetrics m = ComputeRequestMetrics(Request(0, {0.05}));
  EXPECT_TRUE(MeetsSlo(m, Slo{100, 1, 0}));
}

TEST(RunMetricsTest, ThroughputAndGoodputOverTheRunDuration) {
  std::vector<RequestRecord> records = {
      Request(0, {0.1, 0.2, 0.3, 0.4}),  // TTFT 100 ms, TPOT 100 ms
      Request(0, {0.5, 0.6, 0.7, 0.8}),  // TTFT 500 ms: misses the TTFT SLO
      Request(1, {1.1, 1.5, 1.9, 2.0}),  // TPOT 300 ms: misses the TPOT SLO
      Request(1, {1.2, 1.3, 1.4, 1.5}),  // meets both
  };
  RequestRecord failed;
  failed.ok = false;
  failed.start_s = 0;
  failed.end_s = 0.5;
  failed.error = "UNAVAILABLE: draining";
  records.push_back(failed);
  const double duration = RunDuration(records);
  EXPECT_DOUBLE_EQ(duration, 2.0);
  const RunMetrics m = ComputeRunMetrics(records, duration, Slo{200, 150, 0});
  EXPECT_EQ(m.completed, 4);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.input_tokens, 40);
  EXPECT_EQ(m.output_tokens, 16);
  EXPECT_DOUBLE_EQ(m.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 8.0);
  EXPECT_DOUBLE_EQ(m.total_throughput, 28.0);
  EXPECT_TRUE(m.slo_given);
  EXPECT_EQ(m.good_requests, 2);
  EXPECT_DOUBLE_EQ(m.goodput, 1.0);
  EXPECT_EQ(m.ttft_ms.count, 4);
  EXPECT_EQ(m.tpot_ms.count, 4);
  EXPECT_EQ(m.itl_ms.count, 12);
  EXPECT_NEAR(m.ttft_ms.mean, (100 + 500 + 100 + 200) / 4.0, 1e-9);
  EXPECT_NEAR(m.e2e_ms.max, 1000, 1e-9);
}

TEST(RunMetricsTest, NoSloMeansNoGoodput) {
  const RunMetrics m = ComputeRunMetrics({Request(0, {0.1, 0.2})}, 0.2, Slo{});
  EXPECT_FALSE(m.slo_given);
  EXPECT_EQ(m.good_requests, 0);
}

TEST(TimeSeriesTest, TokensAndInFlightPerWindow) {
  // Two requests over [0, 2]: one in flight for the whole run, one during the second second.
  std::vector<RequestRecord> records = {Request(0, {0.5, 1.5, 2.0}), Request(1, {1.2, 1.4})};
  const std::vector<TimeBucket> b = BuildTimeSeries(records, 2.0, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_DOUBLE_EQ(b[0].output_throughput, 1.0);
  EXPECT_DOUBLE_EQ(b[1].output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(b[0].mean_in_flight, 1.0);
  EXPECT_NEAR(b[1].mean_in_flight, 1.4, 1e-12);
  EXPECT_EQ(b[0].ttft_ms.count, 1);
  EXPECT_NEAR(b[1].ttft_ms.p50, 200, 1e-9);
}

}  // namespace
}  // namespace pagoda::loadgen
