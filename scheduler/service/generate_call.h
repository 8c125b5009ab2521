// GenerateCall: one pagoda.v1.Generation/Generate stream, as a gRPC callback reactor and the
// request's RequestSink in the Engine.
//
// Life: Start() validates and submits on the thread gRPC created the call on; the engine then
// delivers tokens (OnToken, under its lock: they are only buffered) and asks for a Flush(),
// which starts a write when none is in flight. One write at a time: tokens that arrive while a
// write is in flight wait in the buffer and go out together in the next message (a message
// carries several token ids), so a slow reader gets fewer, larger messages, never slows the
// engine or other streams, and the buffer never holds more than the request's own tokens
// (bounded by max_tokens and the context). The final event goes out with the status in one
// StartWriteAndFinish.
//
// Ending early: OnCancel (the client cancelled or went away, or the deadline passed), a failed
// write, or Abort (a drain out of time) tell the engine to finish the request, which frees its
// pages within the iteration, and end the call with CANCELLED, DEADLINE_EXCEEDED or UNAVAILABLE
// as soon as no write is in flight. A stop string that matches in the text ends the request in
// the engine; tokens after the match are never sent.
//
// Threads: the engine's calls come from whichever thread did engine work; reactions from
// gRPC's threads. mu_ guards the buffer and the call's state; the thread that set writing_ owns
// the message, the detokenizer and the stop matcher until it clears it, and never holds mu_
// while calling into gRPC or the engine (gRPC may run reactions inline). The object is held by
// a shared_ptr of its own until OnDone, by the engine until it delivers the end, and by the
// service's list of calls (for Abort) until OnDone.
//
// A later n > 1 (several completions per request) would fan out here: one reactor per stream,
// one sink per completion, messages tagged with their index.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "scheduler/text/detokenizer.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/text/stop_matcher.h"

namespace pagoda::scheduler {

class GenerateCall final : public grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>,
                           public RequestSink {
 public:
  // Creates the call and starts serving `request`; `decoded` is the decoding's verdict on it.
  // Returns the reactor for gRPC (it may already have finished).
  static GenerateCall* Start(GenerationService* service, grpc::CallbackServerContext* context,
                             const pagoda::v1::GenerateRequest& request,
                             const absl::Status& decoded);

  // RequestSink.
  bool OnToken(int32_t token) override;
  bool OnFinished(Event event) override;
  void Flush() override;

  // A drain ran out of time: ends the call with UNAVAILABLE and `why`, unless its end has
  // already arrived from the engine (that end is sent as it is).
  void Abort(const std::string& why);

  // Reactions.
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  GenerateCall(GenerationService* service, grpc::CallbackServerContext* context,
               const pagoda::v1::GenerateRequest& request);

 private:
  void Begin(const pagoda::v1::GenerateRequest& request, const absl::Status& decoded);
  // Ends the call with `status` and no further message: the engine finishes the request with
  // `reason` (when it was submitted); Finish once no write is in flight. First end wins.
  void Stop(grpc::Status status, FinishReason reason);
  // Finishes at once (before anything was submitted or written).
  void Refuse(grpc::Status status);
  // As the writer: builds a message from `tokens` (and the final event) and starts writing it;
  // false when there was nothing to send (tokens after a stop match).
  bool Write(const std::vector<int32_t>& tokens, std::optional<Event> final);
  // As the writer, for the final message: marks the call done and writes with the status (or
  // finishes with the early end that came meanwhile).
  void WriteFinal(Event final);

  GenerationService* const service_;
  grpc::CallbackServerContext* const context_;
  const std::string client_id_;
  const double start_;  // engine clock, for the log line of calls that never got an end event
  std::shared_ptr<GenerateCall> self_;

  // Owned by the writer (see the header comment).
  pagoda::v1::GenerateResponse response_;
  std::vector<int32_t> taken_;  // the tokens being written
  text::StreamingDetokenizer detok_;
  text::StopMatcher stops_;
  std::string matched_stop_;  // set once a stop string matched; later tokens are dropped
  GenerateOutcome outcome_;   // completed by whoever ends the call; read in OnDone

  absl::Mutex mu_;
  std::vector<int32_t> pending_ ABSL_GUARDED_BY(mu_);  // tokens not yet in a message
  std::optional<Event> final_ ABSL_GUARDED_BY(mu_);    // the engine's end, not yet taken
  bool final_taken_ ABSL_GUARDED_BY(mu_) = false;      // a writer has the end in hand
  bool writing_ ABSL_GUARDED_BY(mu_) = false;          // a writer is building or writing
  bool submitted_ ABSL_GUARDED_BY(mu_) = false;        // the engine knows the request
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<grpc::Status> ending_ ABSL_GUARDED_BY(mu_);  // an early end, when one came
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // Finish or StartWriteAndFinish was called
};

}  // namespace pagoda::scheduler
