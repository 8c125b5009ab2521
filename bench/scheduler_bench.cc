// Times one planning step of the scheduler core: Schedule (build the plan) and OnResult (apply
// the sampled tokens) for N running sequences decoding at 4k-token contexts.
//
// The goal (issue 3): p50 <= 50 us at 256 running sequences, under 1% of a 5 ms GPU step.
// Google Benchmark reports the mean; the p50 and p99 of the individual steps are counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {
namespace {

constexpr int32_t kPageSize = 16;
constexpr int32_t kContext = 4096;  // tokens in each sequence's prompt when timing starts

struct Fixture {
  explicit Fixture(int32_t running) : scheduler(Options(running)) {
    // Room for every sequence to grow 4k tokens past its prompt.
    const int32_t pages_per_seq = 2 * kContext / kPageSize;
    scheduler.AddWorker(1, {.num_pages = running * pages_per_seq,
                            .page_size = kPageSize,
                            .max_batch_tokens = 1 << 30});
    for (int32_t i = 0; i < running; ++i) {
      NewRequest r;
      r.id = static_cast<RequestId>(i + 1);
      r.prompt.assign(kContext, 7 + i % 100);
      r.priority = static_cast<Priority>(i % kNumPriorities);
      if (!scheduler.AddRequest(std::move(r), 0).ok()) std::abort();
    }
    // Prefill everyone (one plan: the budget is unbounded), then run one decode so that every
    // sequence is in the decode state the benchmark times.
    for (int i = 0; i < 2; ++i) Step();
  }

  static SchedulerOptions Options(int32_t running) {
    SchedulerOptions o;
    o.max_batch_tokens = 1 << 30;
    o.max_running = running;
    o.max_prefill_chunk = kContext;
    o.context_length = 4 * kContext;
    o.max_plans_in_flight = 1;
    return o;
  }

  // One iteration: plan, then the worker's answer (a token for every sampling step).
  void Step() {
    std::optional<Plan> plan = scheduler.Schedule(1, now);
    if (!plan) std::abort();
    sampled.clear();
    for (const PlanStep& s : plan->steps) {
      if (s.sample) sampled.push_back({s.seq_id, 100 + s.sample_index % 50});
    }
    if (!scheduler.OnResult(1, plan->iteration, sampled, now).ok()) std::abort();
    scheduler.TakeEvents();
    now += 0.005;
  }

  Scheduler scheduler;
  std::vector<SampledToken> sampled;
  double now = 0;
};

void BM_PlanningStep(benchmark::State& state) {
  const auto running = static_cast<int32_t>(state.range(0));
  Fixture f(running);
  std::vector<double> micros;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    f.Step();
    const auto end = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(end - start).count();
    state.SetIterationTime(seconds);
    micros.push_back(seconds * 1e6);
  }
  std::sort(micros.begin(), micros.end());
  const auto at = [&](double q) { return micros[static_cast<size_t>(q * (micros.size() - 1))]; };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
  // Against a 5 ms GPU decode step: the share of it planning would cost if not overlapped.
  state.counters["p50_of_5ms_step"] = at(0.50) / 5000.0;
  state.counters["running"] = running;
}

// 1,000 iterations decode 1,000 tokens per sequence: contexts stay between 4k and 5k tokens.
BENCHMARK(BM_PlanningStep)
    ->Arg(256)
    ->Arg(1024)
    ->Iterations(1000)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagoda::scheduler

BENCHMARK_MAIN();
