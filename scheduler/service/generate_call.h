// GenerateCall: one pagoda.v1.Generation/Generate stream, as a gRPC callback reactor and the
// sink in the Engine of each of its request's n completions (n = 1 unless the request asks for
// more; completion i is the core's request id + i).
//
// Life: Start() validates and submits on the thread gRPC created the call on, with one small
// RequestSink per completion (CompletionSink) that forwards to the call; the engine then delivers
// tokens (OnToken, under its lock: they are only buffered, per completion) and asks for a Flush(),
// which starts a write when none is in flight. One write at a time for the whole call: a
// message carries one completion's tokens (GenerateResponse.index says which), and tokens that
// arrive while a write is in flight wait in their completion's buffer and go out together in
// its next message. Completions with news take turns (round robin), so one fast completion
// never starves the others. A slow reader gets fewer, larger messages, never slows the engine
// or other streams, and a buffer never holds more than its completion's own tokens (bounded by
// max_tokens and the context). Each completion's end goes out in its own message (its finished
// with its usage); the last one goes out with the call's status in one StartWriteAndFinish:
// OK, or the first failure among the completions' ends.
//
// Ending early: OnCancel (the client cancelled or went away, or the deadline passed), a failed
// write, or Abort (a drain out of time) tell the engine to finish all n completions, which
// frees their pages within the iteration, and end the call with CANCELLED, DEADLINE_EXCEEDED
// or UNAVAILABLE as soon as no write is in flight. A stop string that matches in a
// completion's text ends that completion in the engine; its tokens after the match are never
// sent.
//
// Threads: the engine's calls come from whichever thread did engine work; reactions from
// gRPC's threads. mu_ guards the buffers and the call's state; the thread that set writing_
// owns the message and every completion's detokenizer and stop matcher until it clears it, and
// never holds mu_ while calling into gRPC or the engine (gRPC may run reactions inline). The
// object is held by a shared_ptr of its own until OnDone, by the engine (through the
// CompletionSinks) until it delivers the last end, and by the service's list of calls (for Abort)
// until OnDone.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/text/detokenizer.h"
#include "scheduler/text/stop_matcher.h"

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
  // One completion's stream.
  struct Completion {
    Completion(const text::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
        : detok(tokenizer), stops(std::move(stop_strings)) {}
    // Guarded by the call's mu_.
    std::vector<int32_t> pending;                // tokens not yet in a message
    std::vector<TokenLogprob> pending_logprobs;  // theirs, when the request asked for logprobs
    std::optional<Event> final;                  // the engine's end, not yet taken by a writer
    // Owned by the writer (see the header comment).
    text::StreamingDetokenizer detok;
    text::StopMatcher stops;
    std::string matched_stop;  // set once a stop string matched; later tokens are dropped
    int32_t sent_tokens = 0;
  };

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
  // The next completion with news, round robin; -1 when none.
  int NextWithNews() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // As the writer: builds a message of completion `index` from `tokens` (and its end) and starts
  // writing it; `last`: the call's last end. False when there was nothing to send (tokens after
  // a stop match).
  bool Write(int index, const std::vector<int32_t>& tokens,
             const std::vector<TokenLogprob>& logprobs, std::optional<Event> final, bool last);
  // As the writer: records a completion's end for the call's status and log line.
  void RecordEnd(int index, const Event& final);
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
  // Created before the request is submitted, never resized after.
  std::vector<std::unique_ptr<Completion>> completions_;

  // Owned by the writer (see the header comment).
  pagoda::v1::GenerateResponse response_;
  std::vector<int32_t> taken_;                // the tokens being written
  std::vector<TokenLogprob> taken_logprobs_;  // and their logprobs (empty when not asked)
  std::vector<std::optional<Event>> ends_;    // each completion's end, once written
  grpc::Status end_status_;                   // the first failure among the ends, else OK
  GenerateOutcome outcome_;                   // completed by whoever ends the call; read in OnDone

  absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_) = 0;            // where NextWithNews starts looking
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;         // ends delivered by the engine
  int taken_ends_ ABSL_GUARDED_BY(mu_) = 0;      // ends a writer has taken
  bool writing_ ABSL_GUARDED_BY(mu_) = false;    // a writer is building or writing
  bool submitted_ ABSL_GUARDED_BY(mu_) = false;  // the engine knows the request
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;        // completion 0's; completion i is id_ + i
  std::optional<grpc::Status> ending_ ABSL_GUARDED_BY(mu_);  // an early end, when one came
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // Finish or StartWriteAndFinish was called
};

}  // namespace pagoda::scheduler
