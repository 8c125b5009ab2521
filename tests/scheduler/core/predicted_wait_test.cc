// Predicted time to first token, and admission by it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "scheduler/core/scheduler.h"
#include "tests/scheduler/core/scheduler_fixture.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

using testing::Answer;
using testing::Options;
using testing::Request;
using testing::Worker;

constexpr double kStep = 0.02;  // seconds a scripted step takes, whatever it holds

// Steps one worker (plans in flight as the options allow) with a fixed step time; collects
// finished events.
struct Clock {
  explicit Clock(Scheduler& scheduler) : s(scheduler) {}
  Scheduler& s;
  double now = 0;
  std::map<RequestId, Event> finished;
  std::deque<Plan> flight;

  void Step() {
    while (auto plan = s.Schedule(1, now)) flight.push_back(std::move(*plan));
    if (flight.empty()) return;
    now += kStep;
    ASSERT_OK(s.OnResult(1, flight.front().iteration, Answer(flight.front()), now, {kStep, 0}));
    flight.pop_front();
    for (Event& e : s.TakeEvents()) {
      if (e.kind == Event::Kind::kFinished) finished[e.id] = e;
    }
  }
  void Drain() {
    for (int i = 0; i < 100000 && (s.HasWork() || !flight.empty()); ++i) Step();
  }
};

// Attaches worker 1 and runs one request, so that steps and an output length are measured.
Clock Warmed(Scheduler& s) {
  s.AddWorker(1, Worker(1024));
  Clock clock(s);
  EXPECT_OK(s.AddRequest(Request(1, 8, 20), 0));
  clock.Drain();
  return clock;
}

SchedulerOptions Busy() {
  SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/32, /*in_flight=*/2);
  o.max_running = 4;
  return o;
}

TEST(PredictedWaitTest, NoPredictionBeforeAStepIsMeasured) {
  Scheduler s(Busy());
  s.AddWorker(1, Worker(256));
  EXPECT_LT(s.PredictFirstToken(Request(1, 8, 4), 0), 0);
  SchedulerOptions o = Busy();
  o.max_predicted_wait = 1e-9;
  Scheduler strict(o);
  strict.AddWorker(1, Worker(256));
  EXPECT_OK(strict.AddRequest(Request(1, 8, 4), 0)) << "nothing measured: admitted";
}

// A burst of equal requests queues behind 4 slots: each one's predicted time to first token,
// made at its arrival, is close to what it then waits.
TEST(PredictedWaitTest, PredictionsMatchTheWaitOfAQueue) {
  Scheduler s(Busy());
  s.AddWorker(1, Worker(1024));
  Clock clock(s);
  for (RequestId id = 1; id <= 4; ++id) ASSERT_OK(s.AddRequest(Request(id, 8, 20), 0));
  clock.Drain();  // measures steps and output lengths
  for (RequestId id = 10; id < 40; ++id) {
    ASSERT_OK(s.AddRequest(Request(id, 8, 20), clock.now));
  }
  clock.Drain();
  std::vector<double> errors;
  for (RequestId id = 10; id < 40; ++id) {
    const RequestTimings& t = clock.finished.at(id).timings;
    ASSERT_GT(t.predicted_first_token, 0) << id;
    const double actual = t.first_token - t.arrival;
    errors.push_back(std::abs(t.predicted_first_token - actual) / actual);
    EXPECT_LE(std::abs(t.predicted_first_token - actual), std::max(0.25 * actual, 2 * kStep))
        << "request " << id << " predicted " << t.predicted_first_token << " s, waited " << actual
        << " s";
  }
  std::sort(errors.begin(), errors.end());
  EXPECT_LE(errors[errors.size() / 2], 0.25) << "median relative error";
}

TEST(PredictedWaitTest, RefusesWhatWouldWaitLongerWithARetryAfter) {
  SchedulerOptions o = Busy();
  o.max_predicted_wait = 0.5;
  Scheduler s(o);
  Clock clock = Warmed(s);
  // 4 slots of 20 steps of 20 ms: every 4 requests ahead add about 0.4 s.
  int admitted = 0;
  absl::Status refused;
  for (RequestId id = 10; id < 60 && refused.ok(); ++id) {
    refused = s.AddRequest(Request(id, 8, 20), clock.now);
    admitted += refused.ok();
  }
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GE(admitted, 4);
  EXPECT_LE(admitted, 16);
  EXPECT_NE(refused.message().find("exceeds the limit of 0.5 s"), std::string::npos) << refused;
  auto retry = refused.GetPayload(kRetryAfterPayload);
  ASSERT_TRUE(retry.has_value());
  EXPECT_GE(std::stoi(std::string(*retry)), 1);
  // Admitted requests start within the limit, give or take a step.
  clock.Drain();
  for (const auto& [id, e] : clock.finished) {
    if (id < 10) continue;
    EXPECT_LE(e.timings.first_token - e.timings.arrival, o.max_predicted_wait * 1.5) << id;
  }
}

TEST(PredictedWaitTest, RefusesARequestWhoseDeadlineComesFirst) {
  SchedulerOptions o = Busy();
  o.max_predicted_wait = 100;
  Scheduler s(o);
  Clock clock = Warmed(s);
  for (RequestId id = 10; id < 30; ++id) {
    ASSERT_OK(s.AddRequest(Request(id, 8, 20), clock.now));
  }
  NewRequest hurried = Request(100, 8, 4);
  hurried.deadline = clock.now + 0.1;
  const absl::Status st = s.AddRequest(hurried, clock.now);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("deadline"), std::string::npos) << st;
  EXPECT_TRUE(st.GetPayload(kRetryAfterPayload).has_value());
}

}  // namespace
}  // namespace pagoda::scheduler
