// SchedulerMetrics on its own (names, labels, scrape-time gauges) and fed by a real Engine
// driven by a scripted worker, without a network: counts must match the traffic exactly.
#include "scheduler/metrics/metrics.h"

#include <gtest/gtest.h>

#include <deque>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "scheduler/engine/engine.h"
#include "scheduler/engine/request_stream.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

// The value of the series written exactly as `series` (name{labels}); NaN when absent.
double Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) != 0) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
  }
  return std::nan("");
}

TEST(SchedulerMetricsTest, EveryMetricHasHelpAndType) {
  SchedulerMetrics metrics;
  const std::string text = metrics.Render();
  for (const char* name :
       {"pagoda_num_requests_running", "pagoda_num_requests_waiting",
        "pagoda_num_requests_preempted", "pagoda_kv_cache_usage_ratio", "pagoda_num_workers"}) {
    EXPECT_TRUE(absl::StrContains(text, std::string("# TYPE ") + name + " gauge")) << name;
  }
  for (const char* name : {"pagoda_prompt_tokens_total", "pagoda_generation_tokens_total",
                           "pagoda_preemptions_total", "pagoda_preemptions_by_mode_total",
                           "pagoda_swapped_pages_total", "pagoda_tenant_served_tokens_total"}) {
    EXPECT_TRUE(absl::StrContains(text, std::string("# TYPE ") + name + " counter")) << name;
  }
  for (const char* name :
       {"pagoda_time_to_first_token_seconds", "pagoda_inter_token_latency_seconds",
        "pagoda_e2e_request_latency_seconds", "pagoda_request_queue_time_seconds",
        "pagoda_iteration_tokens", "pagoda_iteration_planning_seconds",
        "pagoda_scheduler_turnaround_seconds", "pagoda_ttft_prediction_ratio"}) {
    EXPECT_TRUE(absl::StrContains(text, std::string("# TYPE ") + name + " histogram")) << name;
    EXPECT_TRUE(absl::StrContains(text, std::string("# HELP ") + name + " ")) << name;
  }
}

TEST(SchedulerMetricsTest, TenantGaugesAreDeclared) {
  SchedulerMetrics metrics;
  const std::string text = metrics.Render();
  for (const char* name : {"pagoda_tenant_queued_requests", "pagoda_tenant_running_sequences"}) {
    EXPECT_TRUE(absl::StrContains(text, std::string("# TYPE ") + name + " gauge")) << name;
  }
}

TEST(SchedulerMetricsTest, PreemptionsByModeAndSwappedPagesFollowTheEngine) {
  SchedulerMetrics metrics;
  EngineGauges g;
  metrics.SetSnapshotSource([&] { return g; });
  std::string text = metrics.Render();
  // Every mode and direction is shown from the start.
  EXPECT_EQ(Value(text, R"(pagoda_preemptions_by_mode_total{mode="recompute"})"), 0);
  EXPECT_EQ(Value(text, R"(pagoda_preemptions_by_mode_total{mode="swap"})"), 0);
  EXPECT_EQ(Value(text, R"(pagoda_swapped_pages_total{direction="out"})"), 0);
  EXPECT_EQ(Value(text, R"(pagoda_swapped_pages_total{direction="in"})"), 0);
  g.preemptions_total = 5;
  g.preemptions_recompute = 2;
  g.preemptions_swap = 3;
  g.swapped_out_pages = 40;
  g.swapped_in_pages = 24;
  text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_preemptions_total"), 5) << "the total stays";
  EXPECT_EQ(Value(text, R"(pagoda_preemptions_by_mode_total{mode="recompute"})"), 2);
  EXPECT_EQ(Value(text, R"(pagoda_preemptions_by_mode_total{mode="swap"})"), 3);
  EXPECT_EQ(Value(text, R"(pagoda_swapped_pages_total{direction="out"})"), 40);
  EXPECT_EQ(Value(text, R"(pagoda_swapped_pages_total{direction="in"})"), 24);
  g.swapped_in_pages = 40;
  text = metrics.Render();
  EXPECT_EQ(Value(text, R"(pagoda_swapped_pages_total{direction="in"})"), 40);
}

// Named tenants always have a label; others get one first seen first, up to the bound; the rest
// are summed under "other". Served tokens follow the core's totals, even for tenants it forgets.
TEST(SchedulerMetricsTest, TenantLabelsAreBounded) {
  SchedulerMetrics metrics({.named_tenants = {"gold", "silver"}, .max_tenant_labels = 2});
  EngineGauges g;
  g.tenants = {{"gold", 10, 1, 0}, {"a", 5, 0, 1}, {"b", 3, 2, 0}, {"c", 7, 1, 1}, {"d", 1, 0, 2}};
  metrics.SetSnapshotSource([&] { return g; });
  std::string text = metrics.Render();
  auto served = [&](const std::string& t) {
    return Value(text, "pagoda_tenant_served_tokens_total{tenant=\"" + t + "\"}");
  };
  auto queued = [&](const std::string& t) {
    return Value(text, "pagoda_tenant_queued_requests{tenant=\"" + t + "\"}");
  };
  auto running = [&](const std::string& t) {
    return Value(text, "pagoda_tenant_running_sequences{tenant=\"" + t + "\"}");
  };
  EXPECT_EQ(served("gold"), 10);
  EXPECT_EQ(queued("gold"), 1);
  EXPECT_EQ(served("silver"), 0) << "named: shown before it is seen";
  EXPECT_EQ(served("default"), 0) << "always shown, never takes a place under the bound";
  EXPECT_EQ(served("a"), 5);
  EXPECT_EQ(running("a"), 1);
  EXPECT_EQ(served("b"), 3);
  EXPECT_EQ(queued("b"), 2);
  EXPECT_TRUE(std::isnan(served("c"))) << "past the bound";
  EXPECT_TRUE(std::isnan(served("d")));
  EXPECT_EQ(served("other"), 8);
  EXPECT_EQ(queued("other"), 1);
  EXPECT_EQ(running("other"), 3);

  // d is gone from the core; e is new (past the bound); a and c were served more; b is idle.
  g.tenants = {{"gold", 10, 0, 0}, {"a", 9, 0, 0}, {"b", 3, 0, 0}, {"c", 10, 0, 1}, {"e", 2, 4, 0}};
  text = metrics.Render();
  EXPECT_EQ(served("a"), 9);
  EXPECT_EQ(served("other"), 8 + 3 + 2);
  EXPECT_EQ(queued("other"), 4);
  EXPECT_EQ(running("other"), 1);
  EXPECT_EQ(queued("gold"), 0);
  EXPECT_EQ(running("a"), 0);

  // The core forgot a and kept counting afresh: the counter never goes down.
  g.tenants = {{"a", 1, 0, 0}};
  text = metrics.Render();
  EXPECT_EQ(served("a"), 10);
  EXPECT_EQ(queued("b"), 0) << "a labelled tenant the core no longer lists shows 0";
  EXPECT_EQ(served("b"), 3);
}

TEST(SchedulerMetricsTest, TtftPredictionRatioIsBucketedAroundOne) {
  SchedulerMetrics metrics;
  metrics.OnFirstTokenPredicted(1.0, 1.0);
  metrics.OnFirstTokenPredicted(0.5, 2.0);
  metrics.OnFirstTokenPredicted(3.0, 1.0);
  metrics.OnFirstTokenPredicted(1.0, 0.0);  // no prediction: not observed
  const std::string text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_ttft_prediction_ratio_count"), 3);
  EXPECT_DOUBLE_EQ(Value(text, "pagoda_ttft_prediction_ratio_sum"), 1.0 + 0.25 + 3.0);
  EXPECT_EQ(Value(text, R"(pagoda_ttft_prediction_ratio_bucket{le="0.25"})"), 1);
  EXPECT_EQ(Value(text, R"(pagoda_ttft_prediction_ratio_bucket{le="0.9"})"), 1);
  EXPECT_EQ(Value(text, R"(pagoda_ttft_prediction_ratio_bucket{le="1"})"), 2);
  EXPECT_EQ(Value(text, R"(pagoda_ttft_prediction_ratio_bucket{le="2"})"), 2);
  EXPECT_EQ(Value(text, R"(pagoda_ttft_prediction_ratio_bucket{le="4"})"), 3);
}

TEST(SchedulerMetricsTest, OutcomesAreCountedByFinishReasonAndCodeName) {
  SchedulerMetrics metrics;
  metrics.OnRequestSucceeded(FinishReason::kLength);
  metrics.OnRequestSucceeded(FinishReason::kLength);
  metrics.OnRequestSucceeded(FinishReason::kStopString);
  metrics.OnRequestFailed(absl::StatusCode::kUnavailable);
  metrics.OnRequestFailed(absl::StatusCode::kResourceExhausted);
  const std::string text = metrics.Render();
  EXPECT_EQ(Value(text, R"(pagoda_request_success_total{finish_reason="length"})"), 2);
  EXPECT_EQ(Value(text, R"(pagoda_request_success_total{finish_reason="stop_string"})"), 1);
  EXPECT_EQ(Value(text, R"(pagoda_request_failure_total{code="UNAVAILABLE"})"), 1);
  EXPECT_EQ(Value(text, R"(pagoda_request_failure_total{code="RESOURCE_EXHAUSTED"})"), 1);
}

TEST(SchedulerMetricsTest, StateGaugesAreCopiedAtScrapeTimeAndLeftWorkersDisappear) {
  SchedulerMetrics metrics;
  EngineGauges g;
  g.running = 3;
  g.waiting = 5;
  g.preempted = 2;
  g.preemptions_total = 7;
  g.prefix_cache_queries = 1000;
  g.prefix_cache_hits = 640;
  g.workers = {{"w0", 100, 25, 10}, {"w1", 300, 75, 0}};
  metrics.SetSnapshotSource([&] { return g; });
  std::string text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_num_requests_running"), 3);
  EXPECT_EQ(Value(text, "pagoda_num_requests_waiting"), 5);
  EXPECT_EQ(Value(text, "pagoda_num_requests_preempted"), 2);
  EXPECT_EQ(Value(text, "pagoda_preemptions_total"), 7);
  EXPECT_EQ(Value(text, "pagoda_num_workers"), 2);
  EXPECT_EQ(Value(text, R"(pagoda_kv_cache_pages_used{worker="w1"})"), 75);
  EXPECT_EQ(Value(text, R"(pagoda_kv_cache_pages_capacity{worker="w0"})"), 100);
  EXPECT_DOUBLE_EQ(Value(text, "pagoda_kv_cache_usage_ratio"), 100.0 / 400.0);
  EXPECT_EQ(Value(text, R"(pagoda_kv_cache_pages_cached{worker="w0"})"), 10);
  EXPECT_EQ(Value(text, "pagoda_prefix_cache_queries_total"), 1000);
  EXPECT_EQ(Value(text, "pagoda_prefix_cache_hits_total"), 640);

  // A cancellation and a worker leaving: the next scrape shows the engine's new state.
  g.running = 0;
  g.waiting = 4;
  g.preemptions_total = 9;
  g.prefix_cache_queries = 1500;
  g.workers = {{"w1", 300, 0, 4}};
  text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_num_requests_running"), 0);
  EXPECT_EQ(Value(text, "pagoda_num_requests_waiting"), 4);
  EXPECT_EQ(Value(text, "pagoda_preemptions_total"), 9);
  EXPECT_TRUE(std::isnan(Value(text, R"(pagoda_kv_cache_pages_used{worker="w0"})")));
  EXPECT_EQ(Value(text, R"(pagoda_kv_cache_pages_used{worker="w1"})"), 0);
  EXPECT_EQ(Value(text, "pagoda_kv_cache_usage_ratio"), 0);
  EXPECT_TRUE(std::isnan(Value(text, R"(pagoda_kv_cache_pages_cached{worker="w0"})")));
  EXPECT_EQ(Value(text, R"(pagoda_kv_cache_pages_cached{worker="w1"})"), 4);
  EXPECT_EQ(Value(text, "pagoda_prefix_cache_queries_total"), 1500);
}

// Captures the engine's plans; the test answers them in order.
class ScriptedChannel : public WorkerChannel {
 public:
  void SendPlan(const Plan& plan) override { plans.push_back(plan); }
  std::deque<Plan> plans;
};

TEST(SchedulerMetricsTest, EngineReportsTokensPlansAndRequests) {
  SchedulerOptions options;
  options.context_length = 256;
  options.eos_id = 2;
  SchedulerMetrics metrics;
  double now = 0;
  Engine engine(
      options, [&] { return now; }, &metrics);
  auto channel = std::make_shared<ScriptedChannel>();
  const WorkerId worker = engine.NextWorkerId();
  engine.AttachWorker(worker, "w0", {.num_pages = 64, .page_size = 4, .max_batch_tokens = 1024},
                      channel);
  constexpr int kMaxTokens = 4;
  NewRequest r;
  r.id = engine.NextRequestId();
  r.prompt = {10, 11, 12, 13, 14};
  r.max_tokens = kMaxTokens;
  ASSERT_OK(engine.Submit(r, std::make_shared<RequestStream>()));
  NewRequest cancelled = r;
  cancelled.id = engine.NextRequestId();
  auto cancelled_stream = std::make_shared<RequestStream>();
  int plans = 0;
  int planned_tokens = 0;
  while (!channel->plans.empty()) {
    const Plan plan = channel->plans.front();
    channel->plans.pop_front();
    ++plans;
    planned_tokens += plan.num_tokens;
    std::vector<SampledToken> sampled;
    for (const PlanStep& s : plan.steps) {
      if (s.sample) sampled.push_back({s.seq_id, 100});
    }
    now += 0.5;
    engine.OnWorkerResult(worker, plan.iteration, sampled, "");
  }
  // A second request, cancelled while it waits for a worker that is gone.
  engine.DetachWorker(worker);
  ASSERT_OK(engine.Submit(cancelled, cancelled_stream));
  engine.Finish(cancelled.id, FinishReason::kCancelled, "cancelled by the client");

  const std::string text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_generation_tokens_total"), kMaxTokens);
  EXPECT_EQ(Value(text, "pagoda_prompt_tokens_total"), 5) << "only requests that got a token";
  EXPECT_EQ(Value(text, "pagoda_time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(Value(text, "pagoda_inter_token_latency_seconds_count"), kMaxTokens - 1);
  EXPECT_EQ(Value(text, "pagoda_inter_token_latency_seconds_sum"), 0.5 * (kMaxTokens - 1));
  EXPECT_EQ(Value(text, "pagoda_e2e_request_latency_seconds_count"), 2) << "cancelled included";
  EXPECT_EQ(Value(text, "pagoda_request_queue_time_seconds_count"), 1) << "only if scheduled";
  EXPECT_EQ(Value(text, "pagoda_iteration_tokens_count"), plans);
  EXPECT_EQ(Value(text, "pagoda_iteration_tokens_sum"), planned_tokens);
  EXPECT_EQ(Value(text, "pagoda_iteration_planning_seconds_count"), plans);
  // A result followed by a plan for its worker: every plan but the one Submit built, at most.
  EXPECT_GE(Value(text, "pagoda_scheduler_turnaround_seconds_count"), 1);
  EXPECT_LE(Value(text, "pagoda_scheduler_turnaround_seconds_count"), plans - 1);
}

// Answers every plan the channel holds, `step` seconds each (the clock and the worker's
// StepTimes agree), sampling token 100 where asked.
void RunScripted(Engine& engine, WorkerId worker, ScriptedChannel& channel, double& now,
                 double step) {
  while (!channel.plans.empty()) {
    const Plan plan = channel.plans.front();
    channel.plans.pop_front();
    std::vector<SampledToken> sampled;
    for (const PlanStep& s : plan.steps) {
      if (s.sample) sampled.push_back({s.seq_id, 100});
    }
    now += step;
    engine.OnWorkerResult(worker, plan.iteration, sampled, "", StepTimes{.forward_seconds = step});
  }
}

// The engine's status carries the core's tenant accounts, and once the core has measured steps
// (the StepTimes the engine passes on) a request's first token is predicted at arrival and the
// ratio of actual to predicted reported.
TEST(SchedulerMetricsTest, EngineReportsTenantsAndTheTtftPredictionRatio) {
  SchedulerOptions options;
  options.context_length = 256;
  options.eos_id = 2;
  SchedulerMetrics metrics;
  double now = 0;
  Engine engine(
      options, [&] { return now; }, &metrics);
  auto channel = std::make_shared<ScriptedChannel>();
  const WorkerId worker = engine.NextWorkerId();
  engine.AttachWorker(worker, "w0", {.num_pages = 64, .page_size = 4, .max_batch_tokens = 1024},
                      channel);
  for (const char* tenant : {"team-a", "team-b"}) {
    NewRequest r;
    r.id = engine.NextRequestId();
    r.prompt = {10, 11, 12, 13, 14};
    r.prompt[0] += static_cast<int32_t>(r.id);  // no prefix-cache hit between the two
    r.max_tokens = 4;
    r.tenant = tenant;
    ASSERT_OK(engine.Submit(r, std::make_shared<RequestStream>()));
    RunScripted(engine, worker, *channel, now, 0.5);
  }
  const EngineStatus status = engine.Status();
  bool seen = false;
  for (const TenantStats& t : status.tenants) {
    if (t.name != "team-b") continue;
    seen = true;
    EXPECT_EQ(t.served_tokens, 5 + 4) << "prompt + output tokens";
    EXPECT_EQ(t.queued, 0);
    EXPECT_EQ(t.running, 0);
  }
  EXPECT_TRUE(seen) << "team-b has an account";
  EXPECT_EQ(status.preemptions_recompute + status.preemptions_swap, status.preemptions_total);
  const std::string text = metrics.Render();
  EXPECT_EQ(Value(text, "pagoda_ttft_prediction_ratio_count"), 1)
      << "the second request arrived after measured steps: predicted";
}

}  // namespace
}  // namespace pagoda::scheduler
