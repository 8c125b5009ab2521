#include "tests/e2e/stream_driver.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

// Counts streams still open.
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    absl::MutexLock lock(&mu_);
    --left_;
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    auto zero = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return left_ == 0; };
    mu_.Await(absl::Condition(&zero));
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
};

// One stream. Owned by RunStreams, which outlives it: TryCancel is safe at any time. gRPC runs
// one reaction of a reactor at a time, so `result_` needs no lock until OnDone.
class Call final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Call(const StreamPlan& plan, Countdown* countdown) : plan_(plan), countdown_(countdown) {}

  void Start(v1::Generation::Stub* stub) {
    start_ = absl::Now();
    result_.start = start_;
    context_.set_deadline(absl::ToChronoTime(start_ + plan_.deadline));
    stub->async()->Generate(&context_, &plan_.request, this);
    StartRead(&response_);
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }
  absl::Time start() const { return start_; }
  StreamResult TakeResult() { return std::move(result_); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (response_.token_ids_size() > 0 && !result_.ttft) result_.ttft = absl::Now() - start_;
    result_.tokens.insert(result_.tokens.end(), response_.token_ids().begin(),
                          response_.token_ids().end());
    if (response_.has_finished()) result_.finished = response_.finished();
    if (plan_.cancel_after_tokens > 0 &&
        static_cast<int>(result_.tokens.size()) >= plan_.cancel_after_tokens) {
      context_.TryCancel();
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    result_.status = status;
    result_.e2e = absl::Now() - start_;
    countdown_->Done();
  }

 private:
  const StreamPlan& plan_;
  Countdown* const countdown_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  absl::Time start_;
  StreamResult result_;
};

}  // namespace

std::vector<StreamResult> RunStreams(const std::vector<v1::Generation::Stub*>& stubs,
                                     const std::vector<StreamPlan>& plans) {
  Countdown countdown(static_cast<int>(plans.size()));
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    calls.push_back(std::make_unique<Call>(plans[i], &countdown));
    calls.back()->Start(stubs[i % stubs.size()]);
  }
  // Timed cancellations, in time order.
  std::vector<std::pair<absl::Time, Call*>> cancels;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].cancel_after) {
      cancels.emplace_back(calls[i]->start() + *plans[i].cancel_after, calls[i].get());
    }
  }
  std::sort(cancels.begin(), cancels.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [when, call] : cancels) {
    absl::SleepFor(when - absl::Now());
    call->Cancel();
  }
  countdown.Wait();
  std::vector<StreamResult> results;
  results.reserve(calls.size());
  for (auto& call : calls) results.push_back(call->TakeResult());
  return results;
}

std::vector<std::unique_ptr<v1::Generation::Stub>> MakeStubs(
    const std::string& address, int connections,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  std::vector<std::unique_ptr<v1::Generation::Stub>> stubs;
  for (int i = 0; i < connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("pagoda.test.connection", i);
    stubs.push_back(v1::Generation::NewStub(grpc::CreateCustomChannel(
        address, credentials ? credentials : grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

int PeakOpenStreams(const std::vector<StreamResult>& results) {
  // +1 at each start, -1 at each end; ends sort before starts at the same instant.
  std::vector<std::pair<absl::Time, int>> events;
  for (const StreamResult& r : results) {
    events.emplace_back(r.start, 1);
    events.emplace_back(r.start + r.e2e, -1);
  }
  std::sort(events.begin(), events.end());
  int open = 0, peak = 0;
  for (const auto& [time, delta] : events) peak = std::max(peak, open += delta);
  return peak;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

}  // namespace pagoda::testing
