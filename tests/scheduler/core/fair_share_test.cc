// Fair share between tenants in the scheduler: what is charged, who is admitted, who is
// preempted, and the service two backlogged tenants get.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>

#include "scheduler/core/scheduler.h"
#include "tests/scheduler/core/scheduler_fixture.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

using testing::Answer;
using testing::Options;
using testing::Request;
using testing::Worker;

NewRequest TenantRequest(RequestId id, const std::string& tenant, int32_t prompt,
                         int32_t max_tokens) {
  NewRequest r = Request(id, prompt, max_tokens);
  r.tenant = tenant;
  return r;
}

const TenantStats* Find(const std::vector<TenantStats>& all, const std::string& name) {
  for (const TenantStats& t : all) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// One worker, one plan in flight; returns when `until` says so or the work is done. Records the
// step at which each request got its first token.
struct Driver {
  explicit Driver(Scheduler& scheduler) : s(scheduler) {}
  Scheduler& s;
  double now = 0;
  std::map<RequestId, double> first_token;
  std::map<RequestId, int32_t> generated;

  void Step() {
    auto plan = s.Schedule(1, now);
    if (plan) {
      ASSERT_OK(s.OnResult(1, plan->iteration, Answer(*plan), now, {0.01, 0}));
    }
    now += 1;
    for (const Event& e : s.TakeEvents()) {
      if (e.kind != Event::Kind::kToken) continue;
      if (!first_token.count(e.id)) first_token[e.id] = now;
      ++generated[e.id];
    }
    ASSERT_OK(s.CheckInvariants());
  }
};

TEST(FairShareTest, ChargesUncachedPromptAndOutputTokensOverTheWeight) {
  SchedulerOptions o = Options();
  o.tenant_weights = {{"gold", 2.0}};
  Scheduler s(o);
  s.AddWorker(1, Worker(64));
  ASSERT_OK(s.AddRequest(TenantRequest(1, "gold", 10, 5), 0));
  Driver d(s);
  while (s.HasWork()) d.Step();
  const std::vector<TenantStats> stats = s.tenant_stats();
  const TenantStats* gold = Find(stats, "gold");
  ASSERT_NE(gold, nullptr);
  EXPECT_EQ(gold->served_tokens, 10 + 5);
  EXPECT_DOUBLE_EQ(gold->virtual_counter, (kPromptTokenCost * 10 + kOutputTokenCost * 5) / 2);
  EXPECT_DOUBLE_EQ(gold->weight, 2);
  EXPECT_EQ(gold->queued, 0);
  EXPECT_EQ(gold->running, 0);
}

// A light tenant's request arrives behind a heavy tenant's flood with every running slot
// taken: it is admitted next and takes a slot from the heavy tenant at once.
TEST(FairShareTest, ALightTenantOvertakesAFloodAndGetsASlot) {
  for (Fairness fairness : {Fairness::kVtc, Fairness::kNone}) {
    SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/32);
    o.max_running = 4;
    o.fairness = fairness;
    Scheduler s(o);
    s.AddWorker(1, Worker(256));
    for (RequestId id = 1; id <= 12; ++id) {
      ASSERT_OK(s.AddRequest(TenantRequest(id, "heavy", 4, 30), 0));
    }
    Driver d(s);
    for (int i = 0; i < 3; ++i) d.Step();
    ASSERT_OK(s.AddRequest(TenantRequest(100, "light", 4, 3), d.now));
    const double arrival = d.now;
    while (s.HasWork() && !d.first_token.count(100)) d.Step();
    if (fairness == Fairness::kVtc) {
      EXPECT_LE(d.first_token[100] - arrival, 2) << "admitted at once, by preemption";
      EXPECT_EQ(s.fair_share_preemptions(), 1);
    } else {
      EXPECT_GT(d.first_token[100] - arrival, 20) << "arrival order: behind the flood";
      EXPECT_EQ(s.fair_share_preemptions(), 0);
    }
    while (s.HasWork()) d.Step();
    EXPECT_EQ(d.generated[100], 3);
  }
}

// Two tenants always backlogged, weighted 1:2, each with one slot's worth of requests queued:
// the service they get (tokens) follows the weights.
TEST(FairShareTest, BackloggedTenantsGetServiceInProportionToTheirWeights) {
  SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/32);
  o.max_running = 3;
  o.aging_interval = 0;  // one class: the counters alone decide
  o.tenant_weights = {{"two", 2.0}};
  Scheduler s(o);
  s.AddWorker(1, Worker(512));
  RequestId next = 1;
  std::map<RequestId, std::string> tenant_of;
  auto submit = [&](const std::string& tenant, double now) {
    tenant_of[next] = tenant;
    ASSERT_OK(s.AddRequest(TenantRequest(next++, tenant, 8, 8), now));
  };
  for (int i = 0; i < 6; ++i) {
    submit("one", 0);
    submit("two", 0);
  }
  Driver d(s);
  for (int step = 0; step < 3000; ++step) {
    d.Step();
    // Closed loop: each finished request is replaced by one of its tenant's.
    for (const TenantStats& t : s.tenant_stats()) {
      for (int32_t q = t.queued; q < 4; ++q) submit(t.name, d.now);
    }
  }
  const std::vector<TenantStats> stats = s.tenant_stats();
  const double one = Find(stats, "one")->served_tokens, two = Find(stats, "two")->served_tokens;
  EXPECT_NEAR(two / one, 2.0, 0.2) << one << " against " << two;
}

// Preemption under KV pressure takes, within the lowest class, the most-served tenant's
// sequence, even when another tenant's arrived later.
TEST(FairShareTest, VictimsComeFromTheMostServedTenant) {
  SchedulerOptions o = Options(/*budget=*/64, /*chunk=*/32);
  o.max_running = 3;
  Scheduler s(o);
  s.AddWorker(1, Worker(14));  // 56 tokens of KV; the three requests below grow to 69
  ASSERT_OK(s.AddRequest(TenantRequest(1, "rich", 4, 20), 0));
  ASSERT_OK(s.AddRequest(TenantRequest(2, "rich", 4, 20), 0));
  Driver d(s);
  for (int i = 0; i < 3; ++i) d.Step();
  // Lifted to rich's counter on arrival; rich's two sequences then earn it twice as fast.
  ASSERT_OK(s.AddRequest(TenantRequest(3, "poor", 4, 20), d.now));
  for (int i = 0; i < 60 && s.HasWork() && s.total_preemptions() == 0; ++i) d.Step();
  ASSERT_GT(s.total_preemptions(), 0);
  EXPECT_TRUE(s.state(1) == SeqState::kPreempted || s.state(2) == SeqState::kPreempted)
      << "one of rich's";
  EXPECT_NE(s.state(3), SeqState::kPreempted) << "poor's arrived last but was served least";
}

}  // namespace
}  // namespace pagoda::scheduler
