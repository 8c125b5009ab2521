#include "worker/runner/link_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/link_token.h"
#include "common/log.h"
#include "pagoda/worker/v1/worker_link.grpc.pb.h"

namespace pagoda::worker {
namespace {

namespace wv1 = pagoda::worker::v1;

bool IsRefusal(grpc::StatusCode code) {
  return code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::UNAUTHENTICATED ||
         code == grpc::StatusCode::PERMISSION_DENIED;
}

// What the three threads of an attached link share: plans read and not yet executed, results
// not yet written, and how far each thread got.
struct LinkQueues {
  absl::Mutex mu;
  std::deque<wv1::IterationPlan> plans ABSL_GUARDED_BY(mu);
  std::deque<wv1::WorkerMessage> results ABSL_GUARDED_BY(mu);
  bool reads_ended ABSL_GUARDED_BY(mu) = false;    // no plan will be added
  bool executor_done ABSL_GUARDED_BY(mu) = false;  // no result will be added
  bool write_failed ABSL_GUARDED_BY(mu) = false;   // the stream is broken: stop
};

}  // namespace

// Plans are read on the calling thread, executed in order on an executor thread, and their
// results written in order by a writer thread, which also sends the heartbeats. So the read of
// the next plan (with overlap it is usually on its way already) and the write of the last
// result take no time from the forward passes; on a machine whose cores the compute threads
// fill, a blocking write per step cost about 8% of a batch-1 decode step. The reads end when
// the scheduler ends the stream, and a failed write cancels it: either way the plans not yet
// started are dropped, as their results could not be delivered.
void LinkClient::ServeAttached(
    grpc::ClientReaderWriterInterface<wv1::WorkerMessage, wv1::SchedulerMessage>& stream,
    grpc::ClientContext& context, uint32_t heartbeat_ms) {
  LinkQueues q;
  std::thread executor([&] {
    for (;;) {
      wv1::IterationPlan plan;
      {
        absl::MutexLock lock(&q.mu);
        q.mu.Await(absl::Condition(
            +[](LinkQueues* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
              return !q->plans.empty() || q->reads_ended || q->write_failed;
            },
            &q));
        if (q.write_failed || q.reads_ended) break;
        plan = std::move(q.plans.front());
        q.plans.pop_front();
      }
      wv1::WorkerMessage out;
      *out.mutable_result() = runner_->Execute(plan);
      if (!out.result().error().empty()) {
        PAGODA_LOG(kError, "worker", "plan %d failed: %s", plan.iteration(), out.result().error());
      }
      absl::MutexLock lock(&q.mu);
      q.results.push_back(std::move(out));
    }
    absl::MutexLock lock(&q.mu);
    q.executor_done = true;
  });
  std::thread writer([&] {
    const absl::Duration interval = absl::Milliseconds(heartbeat_ms);
    absl::Time next_beat = absl::Now() + interval;
    wv1::WorkerMessage beat;
    beat.mutable_heartbeat();
    for (;;) {
      std::optional<wv1::WorkerMessage> out;
      {
        absl::MutexLock lock(&q.mu);
        const auto ready = +[](LinkQueues* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
          return !q->results.empty() || q->executor_done;
        };
        if (heartbeat_ms > 0) {
          q.mu.AwaitWithDeadline(absl::Condition(ready, &q), next_beat);
        } else {
          q.mu.Await(absl::Condition(ready, &q));
        }
        if (!q.results.empty()) {
          out = std::move(q.results.front());
          q.results.pop_front();
        } else if (q.executor_done) {
          return;
        }
      }
      const wv1::WorkerMessage* message = out ? &*out : &beat;
      if (!out) next_beat = absl::Now() + interval;  // a heartbeat is due
      if (!stream.Write(*message)) {
        absl::MutexLock lock(&q.mu);
        q.write_failed = true;
        q.results.clear();
        context.TryCancel();  // ends the reads
        // Wait for the executor, so that its results have somewhere to go until it stops.
        q.mu.Await(absl::Condition(&q.executor_done));
        return;
      }
    }
  });
  wv1::SchedulerMessage msg;
  while (stream.Read(&msg)) {
    if (!msg.has_plan()) continue;
    absl::MutexLock lock(&q.mu);
    q.plans.push_back(std::move(*msg.mutable_plan()));
  }
  {
    absl::MutexLock lock(&q.mu);
    q.reads_ended = true;
  }
  executor.join();
  writer.join();
}

LinkClient::LinkClient(LinkClientOptions options, Runner* runner)
    : options_(std::move(options)), runner_(runner) {}

void LinkClient::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

absl::Status LinkClient::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    bool attached = false;
    absl::Status status = AttachOnce(&attached);
    if (!status.ok()) return status;
    if (attached) backoff = absl::Milliseconds(100);
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff)) return absl::OkStatus();
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

absl::Status LinkClient::AttachOnce(bool* attached) {
  auto channel = grpc::CreateChannel(
      options_.scheduler_address,
      options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials());
  auto stub = wv1::WorkerLink::NewStub(channel);
  grpc::ClientContext context;
  if (!options_.link_token.empty()) {
    context.AddMetadata(common::kLinkTokenMetadataKey, options_.link_token);
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::OkStatus();
    context_ = &context;
  }
  auto stream = stub->Attach(&context);
  wv1::WorkerMessage hello;
  auto* reg = hello.mutable_register_();
  reg->set_worker_name(options_.worker_name);
  reg->set_model_fingerprint(options_.model_fingerprint);
  reg->set_page_size(runner_->backend().page_size());
  reg->set_num_pages(runner_->backend().num_pages());
  reg->set_max_batch_tokens(options_.max_batch_tokens);
  reg->set_max_prefill_chunk(runner_->backend().preferred_prefill_chunk());
  reg->set_backend(options_.backend_name);
  reg->set_num_swap_pages(static_cast<uint32_t>(runner_->backend().num_swap_pages()));
  reg->set_swap_seconds_per_page(runner_->swap_seconds_per_page());
  runner_->Reset();
  wv1::SchedulerMessage msg;
  if (stream->Write(hello) && stream->Read(&msg) && msg.has_accepted()) {
    *attached = true;
    PAGODA_LOG(kInfo, "worker", "attached to %s as worker %d", options_.scheduler_address,
               msg.accepted().worker_id());
    runner_->SetVocabulary(msg.accepted().vocabulary());
    ServeAttached(*stream, context, msg.accepted().heartbeat_interval_ms());
    // The link is over (the scheduler cut it, or a write failed). Cancel our end before
    // Finish: after the process was paused (SIGSTOP), Finish was seen waiting forever for a
    // status the scheduler had already sent, and the worker never reconnected. A refusal
    // comes before Accepted, so its status is still read in full below.
    context.TryCancel();
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (stopping_) return absl::OkStatus();
  }
  if (IsRefusal(status.error_code())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the scheduler at %s refused this worker: %s", options_.scheduler_address,
                        status.error_message()));
  }
  // A link that was up, or an error other than the previous try's (a scheduler not up yet, a
  // TLS handshake that fails), is worth a warning; the same error again is routine (debug).
  const bool news = *attached || status.error_message() != last_error_;
  last_error_ = *attached ? "" : status.error_message();
  common::Logf(news ? common::LogLevel::kWarning : common::LogLevel::kDebug, "worker",
               "link to %s ended (%s: %s); retrying", options_.scheduler_address,
               absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
               status.error_message());
  return absl::OkStatus();
}

}  // namespace pagoda::worker
