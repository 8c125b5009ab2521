// OpenAiCall: one POST /v1/completions, /v1/chat/completions or /v1/responses being served: the
// sink in the Engine of each of its n completions, and the writer of its HTTP answer, whose
// bytes its AnswerFormat makes (answer_format.h: choices for chat and completions, typed events
// and a response object for the Responses API).
//
// Life: Start() (on the connection's strand) validates the request with the gRPC API's own
// GenerationService::Validate, submits it with one Sink per completion, and for a stream writes
// the event-stream head at once with the format's first events. The engine then delivers tokens
// under its lock (OnToken/OnFinished only buffer them, per completion, in the call's
// OutputProcessor) and calls Flush(), which posts one Pump() to the strand. Pump takes
// everything buffered, has the processor turn it into each completion's text and end
// (detokenized, stop strings applied: output_processor.h), and has the format write it: streams
// as events with news, whole answers once every completion has ended. One write at a time: what
// arrives meanwhile waits in the buffers and goes out together after it (a slow reader gets
// fewer, larger writes and never slows the engine).
//
// Ending early: the client disconnecting (the connection watches the socket while the answer is
// pending) or a failed write finish every completion in the engine (which frees their pages
// within the iteration) and close the connection; Abort() (a drain out of time) does the same
// and answers 503 (or, mid-stream, the format's failure events). A stop string that matches ends
// its completion in the engine; the text from the match on is never sent.
//
// Threads: the engine's calls come from any thread; everything else runs on the strand. mu_
// guards the processor's engine side and the ending; the rest (the processor's writer side and
// the format included) is the strand's. Each call ends with one log line and one metrics count,
// through GenerationService::Report like a gRPC call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/core/types.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/http/answer_format.h"
#include "scheduler/http/openai_request.h"
#include "scheduler/http/responder.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/service/output_processor.h"

namespace pagoda::scheduler::http {

class OpenAiFrontend;

class OpenAiCall final : public std::enable_shared_from_this<OpenAiCall> {
 public:
  // On the strand: serves `request` (its prompt set) on `responder`, answering errors itself,
  // in `format` (null: ChoicesFormat, the chat or completions answer).
  static void Start(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder,
                    OpenAiRequest request, bool keep_alive,
                    std::unique_ptr<AnswerFormat> format = nullptr);

  // Any thread: a drain ran out of time; ends the call with 503 and `why` unless every
  // completion has already ended.
  void Abort(const std::string& why);

  OpenAiCall(OpenAiFrontend* frontend, std::shared_ptr<Responder> responder, OpenAiRequest request,
             bool keep_alive, std::unique_ptr<AnswerFormat> format);

 private:
  friend class CompletionSink<OpenAiCall>;
  // The Sinks' calls (RequestSink's contract).
  bool OnToken(int index, int32_t token, const TokenLogprob* logprob);
  bool OnFinished(int index, Event event);
  void Flush();

  void Begin();
  // Answers `error` before anything else was written, and ends the call.
  void Refuse(const absl::Status& status);
  // Any thread: finishes every completion in the engine and ends the call with `status`.
  void Stop(absl::Status status);
  void Pump();
  // After the last completion's end: the outcome for the log line, and the format's closing.
  std::string Closing();
  void Send(std::string bytes, bool last);
  void OnWritten(bool ok, bool last);
  // Ends the call early with `status` (client gone: no answer; otherwise an error answer).
  void EndEarly(const absl::Status& status);
  // Logs, counts, unregisters and hands the connection back.
  void Done(bool reuse);

  OpenAiFrontend* const frontend_;
  const std::shared_ptr<Responder> responder_;
  OpenAiRequest request_;
  const bool keep_alive_;
  const std::unique_ptr<AnswerFormat> format_;  // the strand's
  double start_ = 0;
  RequestId id_ = 0;
  std::atomic<bool> submitted_{false};  // the engine knows the request (id_ is set)
  // The strand's.
  bool writing_ = false;
  bool done_ = false;
  CompletionDelta delta_;  // the processor's output being formatted
  GenerateOutcome outcome_;

  absl::Mutex mu_;
  // Set under mu_ before the request is submitted (null until then, and for a request refused by
  // validation), never replaced: its engine side is guarded by mu_, its writer side is the
  // strand's.
  std::unique_ptr<OutputProcessor> output_;
  bool pump_posted_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> ending_ ABSL_GUARDED_BY(mu_);
  bool over_ ABSL_GUARDED_BY(mu_) = false;  // Done ran: no more tokens wanted
};

}  // namespace pagoda::scheduler::http
