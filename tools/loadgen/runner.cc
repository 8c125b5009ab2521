#include "tools/loadgen/runner.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tools/loadgen/progress.h"

namespace pagoda::loadgen {
namespace {

namespace v1 = pagoda::v1;

// How often the dispatcher wakes to redraw progress when nothing else happens.
constexpr double kIdleWakeS = 0.1;
// Silence with requests in flight for this long is worth a warning: a stuck server otherwise
// looks like a slow one until every request's deadline passes.
constexpr double kStallWarnS = 10;

class RunClock {
 public:
  RunClock() : start_(std::chrono::steady_clock::now()) {}
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// State shared by the dispatcher and the calls' reactions. Held by shared_ptr from every call,
// so it outlives the last reaction even when the dispatcher returns first.
class Tracker {
 public:
  void Started(double now_s) {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
    Active(now_s);
  }

  void AddTokens(int n, double now_s) {
    absl::MutexLock lock(&mu_);
    output_tokens_ += n;
    Active(now_s);
  }

  void Finished(RequestRecord record) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    Active(record.end_s);
    if (!record.ok) ++failed_;
    records_.push_back(std::move(record));
  }

  int InFlight() {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }

  // Waits until the number in flight differs from `seen` (a request finished) or `timeout_s`.
  void WaitForChange(int seen, double timeout_s) {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ != seen; };
    mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Seconds(std::max(0.0, timeout_s)));
  }

  ProgressState State(double now_s) {
    absl::MutexLock lock(&mu_);
    return ProgressState{static_cast<int>(records_.size()), failed_, in_flight_, output_tokens_,
                         now_s};
  }

  // Requests in flight when nothing has happened for kStallWarnS, once per silence; else 0.
  int NewStall(double now_s) {
    absl::MutexLock lock(&mu_);
    if (stall_reported_ || in_flight_ == 0 || now_s - last_activity_s_ < kStallWarnS) return 0;
    stall_reported_ = true;
    return in_flight_;
  }

  std::vector<RequestRecord> TakeRecords() {
    absl::MutexLock lock(&mu_);
    return std::move(records_);
  }

 private:
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t output_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
  double last_activity_s_ ABSL_GUARDED_BY(mu_) = 0;
  bool stall_reported_ ABSL_GUARDED_BY(mu_) = false;

  void Active(double now_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    last_activity_s_ = std::max(last_activity_s_, now_s);
    stall_reported_ = false;
  }
};

// One Generate stream. Deletes itself when the stream is done. gRPC serializes a reactor's
// reactions (one read outstanding, OnDone last), so `record_` needs no lock.
class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  // `max_tokens` > spec.output_len pads the request (static batching): the stream runs to
  // max_tokens, and only its first spec.output_len tokens count.
  GenerateCall(const RequestSpec& spec, int max_tokens, const RunOptions& options,
               const RunClock& clock, std::shared_ptr<Tracker> tracker)
      : request_(BuildRequest(spec, options.sampling)),
        clock_(clock),
        tracker_(std::move(tracker)),
        counted_(max_tokens > spec.output_len ? spec.output_len : std::numeric_limits<int>::max()) {
    if (max_tokens > spec.output_len) request_.set_max_tokens(static_cast<uint32_t>(max_tokens));
    if (options.unique_cache_salts) {
      request_.set_cache_salt(absl::StrCat("bench-", options.prompt_salt, "-", spec.index));
    }
    if (!options.tenant.empty()) request_.set_tenant(options.tenant);
    if (!options.json_schemas.empty()) {
      request_.mutable_constraint()->set_json_schema(
          options.json_schemas[static_cast<size_t>(spec.index) % options.json_schemas.size()]);
      request_.set_ignore_eos(false);
    }
    record_.index = spec.index;
    record_.prompt_tokens = static_cast<int>(spec.prompt.size());
    record_.expected_output_tokens = spec.output_len;
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(options.timeout_s * 1e6)));
  }

  void Start(v1::Generation::Stub& stub) {
    record_.start_s = clock_.Now();
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    const double now = clock_.Now();
    saw_message_ = true;
    record_.end_s = now;  // padding included: a padded request's answer ends with its wave
    const int received = response_.token_ids_size();
    const int n = std::min(received, counted_ - record_.output_tokens);
    record_.padding_tokens += received - std::max(n, 0);
    if (n > 0) {
      record_.chunks.push_back({now, n});
      record_.output_tokens += n;
      tracker_->AddTokens(n, now);
    }
    saw_finished_ = saw_finished_ || response_.has_finished();
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    if (!saw_message_) record_.end_s = clock_.Now();
    record_.ok = status.ok() && saw_finished_;
    if (!status.ok()) {
      record_.error =
          absl::StrCat(StatusCodeName(status.error_code()), ": ", status.error_message());
    } else if (!saw_finished_) {
      record_.error = "the stream ended without a finished message";
    }
    tracker_->Finished(std::move(record_));
    delete this;
  }

 private:
  static std::string StatusCodeName(grpc::StatusCode code) {
    switch (code) {
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return "RESOURCE_EXHAUSTED";
      case grpc::StatusCode::UNAVAILABLE:
        return "UNAVAILABLE";
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
      case grpc::StatusCode::CANCELLED:
        return "CANCELLED";
      default:
        return absl::StrCat("status ", static_cast<int>(code));
    }
  }

  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  const RunClock& clock_;
  std::shared_ptr<Tracker> tracker_;
  RequestRecord record_;
  const int counted_;  // tokens that count (the rest is padding); all when not padded
  bool saw_message_ = false;
  bool saw_finished_ = false;
};

void ShowProgress(Progress& progress, Tracker& tracker, double now_s, double timeout_s) {
  progress.Update(tracker.State(now_s));
  if (const int stuck = tracker.NewStall(now_s); stuck > 0) {
    std::fprintf(stderr,
                 "\npagoda-bench: nothing received for %.0f s with %d requests in flight; is the "
                 "server stuck? (each request fails after --timeout-s %.0f s)\n",
                 kStallWarnS, stuck, timeout_s);
  }
}

}  // namespace

v1::GenerateRequest BuildRequest(const RequestSpec& spec, const SamplingOptions& sampling) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(spec.prompt.begin(), spec.prompt.end());
  r.set_max_tokens(static_cast<uint32_t>(spec.output_len));
  r.set_ignore_eos(sampling.ignore_eos);
  r.set_request_id(absl::StrCat("bench-", spec.index));
  if (sampling.temperature > 0) {
    v1::SamplingParams* s = r.mutable_sampling();
    s->set_temperature(sampling.temperature);
    s->set_top_k(sampling.top_k);
    s->set_top_p(sampling.top_p);
    s->set_seed(spec.sampling_seed);
  }
  return r;
}

int LongestOutput(const Workload& workload, int first_index, int count, uint64_t salt) {
  int longest = 0;
  for (int i = first_index; i < first_index + count; ++i) {
    longest = std::max(longest, workload.Make(i, salt).output_len);
  }
  return longest;
}

RunResult RunLoad(v1::Generation::Stub& stub, const Workload& workload, const RunOptions& options) {
  // Calls read `clock` only before they report Finished, and this function returns only when
  // none is in flight, so the stack clock outlives every read.
  const RunClock clock;
  auto tracker = std::make_shared<Tracker>();
  Pacer pacer(options.pacer);
  Progress progress(options.label, options.pacer.duration_s > 0 ? 0 : options.pacer.num_requests,
                    options.pacer.duration_s, options.progress);
  const bool pad = options.pacer.shape == LoadShape::kStaticBatch && options.pacer.pad_waves;
  int next_index = options.first_index;
  int wave = 0;          // the wave of the last start (static batching)
  int wave_longest = 0;  // its longest output (pad)
  for (;;) {
    const int in_flight = tracker->InFlight();
    const PacerDecision d = pacer.Next(clock.Now(), in_flight);
    if (d.kind == PacerDecision::kDone) break;
    if (d.kind == PacerDecision::kStart) {
      if (pad && pacer.waves() != wave) {
        wave = pacer.waves();
        // A run of num_requests knows its last wave's size; a timed run's last wave may be cut
        // short, and then pads to a request it never sends.
        const int size =
            options.pacer.duration_s > 0
                ? options.pacer.concurrency
                : std::min(options.pacer.concurrency, options.pacer.num_requests - pacer.started());
        wave_longest = LongestOutput(workload, next_index, size, options.prompt_salt);
      }
      const RequestSpec spec = workload.Make(next_index++, options.prompt_salt);
      // Padding never pushes a request past the model's context.
      const int room = workload.model().context_length - static_cast<int>(spec.prompt.size());
      const int max_tokens = pad ? std::max(spec.output_len, std::min(wave_longest, room)) : 0;
      pacer.OnStarted();
      tracker->Started(clock.Now());
      (new GenerateCall(spec, max_tokens, options, clock, tracker))->Start(stub);
      continue;
    }
    // Drawn after the starts, so a closed loop shows its full complement in flight.
    ShowProgress(progress, *tracker, clock.Now(), options.timeout_s);
    double wait = kIdleWakeS;
    if (d.kind == PacerDecision::kWaitUntil) wait = std::min(wait, d.until_s - clock.Now());
    tracker->WaitForChange(in_flight, wait);
  }
  for (int in_flight = tracker->InFlight(); in_flight > 0; in_flight = tracker->InFlight()) {
    ShowProgress(progress, *tracker, clock.Now(), options.timeout_s);
    tracker->WaitForChange(in_flight, kIdleWakeS);
  }
  progress.Finish(tracker->State(clock.Now()));
  RunResult result;
  result.records = tracker->TakeRecords();
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  result.waves = pacer.waves();
  return result;
}

}  // namespace pagoda::loadgen
