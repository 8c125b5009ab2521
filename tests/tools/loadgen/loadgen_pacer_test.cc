// Pacer: closed loop, static-batch waves, Poisson and burst arrivals, request count and
// duration limits, replayed with scripted time and completions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tools/loadgen/pacer.h"

namespace pagoda::loadgen {
namespace {

using Kind = PacerDecision::Kind;

// Starts every request the pacer allows at `now`; returns how many.
int StartAll(Pacer& pacer, double now, int& in_flight) {
  int started = 0;
  while (pacer.Next(now, in_flight).kind == PacerDecision::kStart) {
    pacer.OnStarted();
    ++in_flight;
    ++started;
  }
  return started;
}

TEST(PacerTest, ClosedLoopKeepsConcurrencyInFlight) {
  Pacer pacer({LoadShape::kClosed, /*concurrency=*/3, 0, 0, /*num_requests=*/7});
  int in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 0, in_flight), 3);
  EXPECT_EQ(pacer.Next(0, in_flight).kind, Kind::kWaitForCompletion);
  --in_flight;  // one finishes: exactly one more starts
  EXPECT_EQ(StartAll(pacer, 1, in_flight), 1);
  in_flight -= 2;
  EXPECT_EQ(StartAll(pacer, 2, in_flight), 2);
  in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 3, in_flight), 1);  // 7 in all
  EXPECT_EQ(pacer.Next(3, 0).kind, Kind::kDone);
  EXPECT_EQ(pacer.started(), 7);
}

TEST(PacerTest, StaticBatchStartsTheNextWaveOnlyWhenTheWholeWaveFinished) {
  Pacer pacer({LoadShape::kStaticBatch, /*concurrency=*/4, 0, 0, /*num_requests=*/10});
  int in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 0, in_flight), 4);
  EXPECT_EQ(pacer.waves(), 1);
  // Three of four finish: a closed loop would start three more; a static batch waits.
  for (int done = 0; done < 3; ++done) {
    --in_flight;
    EXPECT_EQ(pacer.Next(1, in_flight).kind, Kind::kWaitForCompletion);
  }
  --in_flight;  // the slowest finishes
  EXPECT_EQ(StartAll(pacer, 2, in_flight), 4);
  EXPECT_EQ(pacer.waves(), 2);
  in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 3, in_flight), 2);  // the last wave holds the remaining 2
  EXPECT_EQ(pacer.waves(), 3);
  EXPECT_EQ(pacer.Next(3, in_flight).kind, Kind::kDone);
  EXPECT_EQ(pacer.started(), 10);
}

TEST(PacerTest, StaticBatchOfOneIsSequential) {
  Pacer pacer({LoadShape::kStaticBatch, 1, 0, 0, 3});
  int in_flight = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(StartAll(pacer, i, in_flight), 1);
    // After the third start the count is reached: nothing more, even with one in flight.
    EXPECT_EQ(pacer.Next(i, in_flight).kind, i < 2 ? Kind::kWaitForCompletion : Kind::kDone);
    in_flight = 0;
  }
  EXPECT_EQ(pacer.waves(), 3);
}

// Arrival times of `n` Poisson requests when the server is infinitely fast.
std::vector<double> PoissonArrivals(double rate, uint64_t seed, int n) {
  Pacer pacer({LoadShape::kPoisson, 0, 0, rate, n, 0, seed});
  std::vector<double> times;
  double now = 0;
  for (;;) {
    const PacerDecision d = pacer.Next(now, 0);
    if (d.kind == Kind::kDone) break;
    if (d.kind == Kind::kWaitUntil) {
      EXPECT_GT(d.until_s, now);
      now = d.until_s;
      continue;
    }
    EXPECT_EQ(d.kind, Kind::kStart);
    times.push_back(now);
    pacer.OnStarted();
  }
  return times;
}

TEST(PacerTest, PoissonInterArrivalMeanIsOneOverRate) {
  const std::vector<double> t = PoissonArrivals(/*rate=*/8, /*seed=*/1, 20000);
  ASSERT_EQ(t.size(), 20000u);
  EXPECT_EQ(t.front(), 0);
  const double mean_gap = t.back() / (t.size() - 1);
  EXPECT_NEAR(mean_gap, 1.0 / 8, 0.03 / 8);
  // Exponential gaps: the standard deviation equals the mean.
  double sq = 0;
  for (size_t i = 1; i < t.size(); ++i)
    sq += (t[i] - t[i - 1] - mean_gap) * (t[i] - t[i - 1] - mean_gap);
  EXPECT_NEAR(std::sqrt(sq / (t.size() - 2)), 1.0 / 8, 0.05 / 8);
}

TEST(PacerTest, PoissonArrivalsAreDeterministicBySeed) {
  EXPECT_EQ(PoissonArrivals(5, 3, 100), PoissonArrivals(5, 3, 100));
  EXPECT_NE(PoissonArrivals(5, 3, 100), PoissonArrivals(5, 4, 100));
}

TEST(PacerTest, OpenLoopCapWaitsForASlotAndKeepsTheSchedule) {
  PacerOptions o{LoadShape::kPoisson, 0, /*max_in_flight=*/1, /*rate=*/1000, 3};
  Pacer pacer(o);
  int in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 0, in_flight), 1);
  // Long after the second arrival time: capped, so it waits for a completion...
  EXPECT_EQ(pacer.Next(10, in_flight).kind, Kind::kWaitForCompletion);
  // ...then starts late, and the third (also due) follows as soon as a slot frees again.
  in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 10, in_flight), 1);
  in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 10, in_flight), 1);
  EXPECT_EQ(pacer.Next(10, 0).kind, Kind::kDone);
}

TEST(PacerTest, BurstSendsEverythingAtOnce) {
  Pacer pacer({LoadShape::kBurst, 0, 0, 0, 50});
  int in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 0, in_flight), 50);
  EXPECT_EQ(pacer.Next(0, in_flight).kind, Kind::kDone);
}

TEST(PacerTest, DurationStopsStartsAndIgnoresTheCount) {
  PacerOptions o{LoadShape::kClosed, 2, 0, 0, /*num_requests=*/1, /*duration_s=*/5};
  Pacer pacer(o);
  int in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 0, in_flight), 2);  // more than num_requests
  in_flight = 0;
  EXPECT_EQ(StartAll(pacer, 4.9, in_flight), 2);
  in_flight = 0;
  EXPECT_EQ(pacer.Next(5.0, in_flight).kind, Kind::kDone);
  // Poisson: an arrival scheduled past the duration never happens.
  Pacer poisson({LoadShape::kPoisson, 0, 0, /*rate=*/0.001, 100, /*duration_s=*/1, 1});
  in_flight = 0;
  EXPECT_EQ(StartAll(poisson, 0, in_flight), 1);
  EXPECT_EQ(poisson.Next(0.5, in_flight).kind, Kind::kDone);
}

}  // namespace
}  // namespace pagoda::loadgen
