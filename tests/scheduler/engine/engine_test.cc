// Engine under concurrency, without a network: plans reach each worker in the order the core
// built them, even when request handlers and the link thread build them at the same time
// (overlap allows two plans in flight, and a reordered pair makes the worker fail the plan);
// a worker's next plan leaves before the result's tokens are flushed to their sinks; a sink
// may call into the engine from Flush (a stop string does).
#include "scheduler/engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "scheduler/engine/request_stream.h"
#include "tests/support/status_assertions.h"

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
        ASSERT_OK(engine.Submit(r, stream));
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

// Numbers the events of a test in the order they happen, across channel and sinks.
class Sequencer {
 public:
  int Next() { return next_.fetch_add(1); }

 private:
  std::atomic<int> next_{0};
};

class RecordingChannel : public WorkerChannel {
 public:
  explicit RecordingChannel(Sequencer* seq) : seq_(seq) {}
  void SendPlan(const Plan& plan) override {
    absl::MutexLock lock(&mu_);
    plans_.push_back(plan);
    sent_at_.push_back(seq_->Next());
  }
  Plan plan(size_t i) {
    absl::MutexLock lock(&mu_);
    return plans_.at(i);
  }
  int sent_at(size_t i) {
    absl::MutexLock lock(&mu_);
    return sent_at_.at(i);
  }
  size_t size() {
    absl::MutexLock lock(&mu_);
    return plans_.size();
  }

 private:
  Sequencer* seq_;
  absl::Mutex mu_;
  std::vector<Plan> plans_ ABSL_GUARDED_BY(mu_);
  std::vector<int> sent_at_ ABSL_GUARDED_BY(mu_);
};

// A sink that records when it was flushed, and can end its request from Flush once it holds
// `stop_after` tokens, as the service does on a stop string.
class RecordingSink : public RequestSink {
 public:
  RecordingSink(Sequencer* seq, Engine* engine, RequestId id, size_t stop_after)
      : seq_(seq), engine_(engine), id_(id), stop_after_(stop_after) {}
  bool OnToken(int32_t token, const TokenLogprob* /*logprob*/) override {
    absl::MutexLock lock(&mu_);
    tokens_.push_back(token);
    return true;
  }
  bool OnFinished(Event event) override {
    absl::MutexLock lock(&mu_);
    finished_ = std::move(event);
    return true;
  }
  void Flush() override {
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      flushed_at_.push_back(seq_->Next());
      stop = stop_after_ > 0 && tokens_.size() >= stop_after_ && !stopped_;
      stopped_ = stopped_ || stop;
    }
    if (stop) engine_->Finish(id_, FinishReason::kStopString, "");  // not under mu_
  }
  std::vector<int> flushed_at() {
    absl::MutexLock lock(&mu_);
    return flushed_at_;
  }
  std::optional<Event> finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

 private:
  Sequencer* seq_;
  Engine* engine_;
  const RequestId id_;
  const size_t stop_after_;
  absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::optional<Event> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<int> flushed_at_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Answers plan `i` of `channel` with token 7 for every sampling step.
void Answer(Engine& engine, WorkerId worker, RecordingChannel& channel, size_t i) {
  const Plan plan = channel.plan(i);
  std::vector<SampledToken> sampled;
  for (const PlanStep& s : plan.steps) {
    if (s.sample) sampled.push_back({s.seq_id, 7});
  }
  engine.OnWorkerResult(worker, plan.iteration, sampled, "");
}

// Attaches a worker of 64 pages of 4 tokens on `channel`; returns its id.
WorkerId AttachSmallWorker(Engine& engine, std::shared_ptr<WorkerChannel> channel) {
  const WorkerId worker = engine.NextWorkerId();
  engine.AttachWorker(worker, "w0", {.num_pages = 64, .page_size = 4, .max_batch_tokens = 64},
                      std::move(channel));
  return worker;
}

TEST(EngineTest, NextPlanLeavesBeforeTheTokensAreFlushed) {
  SchedulerOptions options;
  options.context_length = 64;
  options.max_plans_in_flight = 1;
  Engine engine(options, [] { return 0.0; });
  Sequencer seq;
  auto channel = std::make_shared<RecordingChannel>(&seq);
  const WorkerId worker = AttachSmallWorker(engine, channel);
  NewRequest r;
  r.id = engine.NextRequestId();
  r.prompt = {1, 2, 3};
  r.max_tokens = 4;
  auto sink = std::make_shared<RecordingSink>(&seq, &engine, r.id, 0);
  ASSERT_OK(engine.Submit(r, sink));
  ASSERT_EQ(channel->size(), 1u);  // the prefill
  Answer(engine, worker, *channel, 0);
  ASSERT_EQ(channel->size(), 2u);  // the first decode
  ASSERT_EQ(sink->flushed_at().size(), 1u);
  EXPECT_LT(channel->sent_at(1), sink->flushed_at()[0]);
}

TEST(EngineTest, SinkMayEndItsRequestFromFlush) {
  SchedulerOptions options;
  options.context_length = 64;
  options.max_plans_in_flight = 2;
  Engine engine(options, [] { return 0.0; });
  Sequencer seq;
  auto channel = std::make_shared<RecordingChannel>(&seq);
  const WorkerId worker = AttachSmallWorker(engine, channel);
  NewRequest r;
  r.id = engine.NextRequestId();
  r.prompt = {1, 2, 3};
  r.max_tokens = 20;
  auto sink = std::make_shared<RecordingSink>(&seq, &engine, r.id, 2);
  ASSERT_OK(engine.Submit(r, sink));
  for (size_t i = 0; i < channel->size() && !sink->finished(); ++i) {
    Answer(engine, worker, *channel, i);
  }
  ASSERT_TRUE(sink->finished().has_value());
  EXPECT_EQ(sink->finished()->reason, FinishReason::kStopString);
  EXPECT_EQ(engine.Status().running, 0u);
}

// n > 1: completion i's tokens and end go to sink i; a sink ending its completion (a stop
// string) leaves the others running; a sink count other than n is refused before anything runs.
TEST(EngineTest, CompletionsGoToTheirOwnSinks) {
  SchedulerOptions options;
  options.context_length = 64;
  Engine engine(options, [] { return 0.0; });
  Sequencer seq;
  auto channel = std::make_shared<RecordingChannel>(&seq);
  const WorkerId worker = AttachSmallWorker(engine, channel);
  NewRequest r;
  r.n = 3;
  r.id = engine.NextRequestIds(r.n);
  EXPECT_EQ(engine.NextRequestId(), r.id + 3) << "n ids are reserved";
  r.prompt = {1, 2, 3, 4, 5, 6};
  r.max_tokens = 5;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>(&seq, &engine, r.id + i, i == 1 ? 2 : 0));
  }
  EXPECT_EQ(engine.SubmitCompletions(r, {sinks[0], sinks[1]}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Status().waiting + engine.Status().running, 0u);
  ASSERT_OK(engine.SubmitCompletions(r, {sinks[0], sinks[1], sinks[2]}));
  for (size_t i = 0; i < channel->size() && i < 100; ++i) Answer(engine, worker, *channel, i);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(sinks[i]->finished().has_value());
    EXPECT_EQ(sinks[i]->finished()->id, r.id + i);
    EXPECT_EQ(sinks[i]->finished()->reason,
              i == 1 ? FinishReason::kStopString : FinishReason::kLength);
    EXPECT_EQ(sinks[i]->finished()->completion_tokens, i == 1 ? 2 : 5);
  }
  EXPECT_EQ(engine.Status().running, 0u);
}

}  // namespace
}  // namespace pagoda::scheduler
