// GenerateCall: one pagoda.v1.Generation/Generate stream, as a gRPC callback reactor and the
// sink in the Engine of each of its request's n completions (n = 1 unless the request asks for
// more; completion i is the core's request id + i).
//
// Life: Start() validates and submits on the thread gRPC created the call on, with one small
// RequestSink per completion (CompletionSink) that forwards to the call; the engine then delivers
// tokens (OnToken, under its lock: the call's OutputProcessor only buffers them, per completion)
// and asks for a Flush(), which starts a write when none is in flight. The processor turns a
// completion's tokens into its text and end (output_processor.h); this call formats them. One write
// at a time for the whole call: a message carries one completion's tokens (GenerateResponse.index
// says which), and tokens that arrive while a write is in flight wait in their completion's buffer
// and go out together in its next message. Completions with news take turns (round robin), so one
// fast completion never starves the others. A slow reader gets fewer, larger messages, never slows
// the engine or other streams, and a buffer never holds more than its completion's own tokens
// (bounded by max_tokens and the context). Each completion's end goes out in its own message (its
// finished with its usage); the last one goes out with the call's status in one
// StartWriteAndFinish: OK, or the first failure among the completions' ends.
//
// Ending early: OnCancel (the client cancelled or went away, or the deadline passed), a failed
// write, or Abort (a drain out of time) tell the engine to finish all n completions, which
// frees their pages within the iteration, and end the call with CANCELLED, DEADLINE_EXCEEDED
// or UNAVAILABLE as soon as no write is in flight. A stop string that matches in a
// completion's text ends that completion in the engine; its tokens after the match are never
// sent.
//
// Threads: the engine's calls come from whichever thread did engine work; reactions from
// gRPC's threads. mu_ guards the call's state and the processor's engine side; the thread that
// set writing_ is the processor's writer and owns the message until it clears it, and never
// holds mu_ while calling into gRPC or the engine (gRPC may run reactions inline). The
// object is held by a shared_ptr of its own until OnDone, by the engine (through the
// CompletionSinks) until it delivers the last end, and by the service's list of calls (for Abort)
// until OnDone.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/service/output_processor.h"

namespace pagoda::scheduler {

class GenerateCall final : public grpc::ServerWriteReactor<pagoda::v1::GenerateResponse> {
 public:
  // Creates the call and starts serving `request`; `decoded` is the decoding's verdict on it.
  // Returns the reactor for gRPC (it may already have finished).
  static GenerateCall* Start(GenerationService* service, grpc::CallbackServerContext* context,
                             const pagoda::v1::GenerateRequest& request,
                             const absl::Status& decoded);

  // A drain ran out of time: ends the call with UNAVAILABLE and `why`, unless every
  // completion's end has already arrived from the engine (those ends are sent as they are).
  void Abort(const std::string& why);

  // Reactions.
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  GenerateCall(GenerationService* service, grpc::CallbackServerContext* context,
               const pagoda::v1::GenerateRequest& request);

 private:
  friend class CompletionSink<GenerateCall>;

  // The Sinks' calls (RequestSink's contract), for completion `index`.
  bool OnToken(int index, int32_t token, const TokenLogprob* logprob);
  bool OnFinished(int index, Event event);
  void Flush();

  void Begin(const pagoda::v1::GenerateRequest& request, const absl::Status& decoded);
  // Ends the call with `status` and no further message: the engine finishes every completion
  // with `reason` (when the request was submitted); Finish once no write is in flight. First
  // end wins.
  void Stop(grpc::Status status, FinishReason reason);
  // Finishes at once (before anything was submitted or written).
  void Refuse(grpc::Status status);
  // As the writer: builds a message of what the processor took of completion `index` (and its
  // end) and starts writing it. False when there was nothing to send (tokens after a stop match).
  bool Write(int index);
  // As the writer, for the last message: marks the call done and writes with the status (or
  // finishes with the early end that came meanwhile).
  void WriteFinal();
  // StartWrite(&response_) and Finish, after handing this call's state to the thread that will
  // run the reaction (common/race_annotations.h).
  void StartWriting();
  void FinishCall(grpc::Status status);

  GenerationService* const service_;
  grpc::CallbackServerContext* const context_;
  const std::string client_id_;
  const double start_;  // engine clock, for the log line of calls that never got an end event
  std::shared_ptr<GenerateCall> self_;

  // Owned by the writer (see the header comment).
  pagoda::v1::GenerateResponse response_;
  CompletionDelta delta_;    // the processor's output for the message being built
  GenerateOutcome outcome_;  // completed by whoever ends the call; read in OnDone

  absl::Mutex mu_;
  // Set under mu_ before the request is submitted (null until then, and for a refused call),
  // never replaced: its engine side is guarded by mu_, its writer side is the writer's.
  std::unique_ptr<OutputProcessor> output_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;    // a writer is building or writing
  bool submitted_ ABSL_GUARDED_BY(mu_) = false;  // the engine knows the request
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;        // completion 0's; completion i is id_ + i
  std::optional<grpc::Status> ending_ ABSL_GUARDED_BY(mu_);  // an early end, when one came
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // Finish or StartWriteAndFinish was called
};

}  // namespace pagoda::scheduler
