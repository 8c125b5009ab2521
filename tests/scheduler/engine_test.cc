// Engine under concurrency, without a network: plans reach each worker in the order the core
// built them, even when request handlers and the link thread build them at the same time
// (overlap allows two plans in flight, and a reordered pair makes the worker fail the plan).
#include "scheduler/engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "scheduler/engine/request_stream.h"

namespace pagoda::scheduler {
namespace {

// Records plan order and hands plans to the scripted worker thread.
class OrderCheckingChannel : public WorkerChannel {
 public:
  void SendPlan(const Plan& plan) override {
    // Writes take varying time, as encoding and a gRPC write do: a later plan may overtake an
    // earlier one unless the engine orders the writes.
    absl::SleepFor(absl::Microseconds(plan.iteration % 3 == 0 ? 200 : 0));
    absl::MutexLock lock(&mu_);
    if (plan.iteration <= last_iteration_) ++out_of_order_;
    last_iteration_ = plan.iteration;
    queue_.push_back(plan);
  }
  // The next plan, or nullopt after `timeout`.
  std::optional<Plan> Next(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return std::nullopt;
    Plan plan = std::move(queue_.front());
    queue_.pop_front();
    return plan;
  }
  int out_of_order() {
    absl::MutexLock lock(&mu_);
    return out_of_order_;
  }

 private:
  absl::Mutex mu_;
  std::deque<Plan> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t last_iteration_ ABSL_GUARDED_BY(mu_) = 0;
  int out_of_order_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(EngineTest, PlansReachTheWorkerInOrderUnderConcurrentSubmits) {
  SchedulerOptions options;
  options.context_length = 256;
  options.max_plans_in_flight = 2;
  Engine engine(options, [] { return 0.0; });
  auto channel = std::make_shared<OrderCheckingChannel>();
  const WorkerId worker = engine.NextWorkerId();
  engine.AttachWorker(worker, "w0", {.num_pages = 4096, .page_size = 4, .max_batch_tokens = 4096},
                      channel);
  std::atomic<bool> done{false};
  // The worker answers every plan, in the order received, sampling token 7 where asked.
  std::thread responder([&] {
    while (!done.load()) {
      std::optional<Plan> plan = channel->Next(absl::Milliseconds(10));
      if (!plan) continue;
      std::vector<SampledToken> sampled;
      for (const PlanStep& s : plan->steps) {
        if (s.sample) sampled.push_back({s.seq_id, 7});
      }
      engine.OnWorkerResult(worker, plan->iteration, sampled, "");
    }
  });
  constexpr int kThreads = 4;
  constexpr int kRequestsPerThread = 100;
  std::atomic<int> finished_ok{0};
  // A reordered pair stalls the sequences involved: give up early rather than wait for each.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&] {
      for (int i = 0; i < kRequestsPerThread && absl::Now() < give_up; ++i) {
        NewRequest r;
        r.id = engine.NextRequestId();
        r.prompt = {1, 2, 3};
        r.max_tokens = 2;
        auto stream = std::make_shared<RequestStream>();
        ASSERT_TRUE(engine.Submit(r, stream).ok());
        while (absl::Now() < give_up) {
          RequestStream::Update u = stream->Wait(absl::Milliseconds(10));
          if (u.finished) {
            if (u.finished->reason == FinishReason::kLength) ++finished_ok;
            break;
          }
        }
      }
    });
  }
  for (auto& t : submitters) t.join();
  done.store(true);
  responder.join();
  EXPECT_EQ(channel->out_of_order(), 0);
  EXPECT_EQ(finished_ok.load(), kThreads * kRequestsPerThread);
}

}  // namespace
}  // namespace pagoda::scheduler
