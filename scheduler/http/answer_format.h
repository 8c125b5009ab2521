// AnswerFormat: how an OpenAiCall writes its answer. The call owns everything else (validation,
// submission, the engine's tokens, one write at a time, ending early); the format turns each
// completion's news into its API's bytes: chat and completions choices (ChoicesFormat), or the
// Responses API's typed events and response object (ResponsesFormat).
//
// Streams: the format returns server-sent events; the call frames them as HTTP chunks and ends
// the chunked body. Whole answers: Closing returns the whole HTTP response.
// Threads: every method runs on the call's strand, one at a time.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "scheduler/core/types.h"
#include "scheduler/service/output_processor.h"

namespace pagoda::scheduler::http {

class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  // The request was accepted as engine request `id` with `n` completions: sets the answer's id;
  // returns a stream's first events (empty for whole answers).
  virtual std::string Begin(RequestId id, int n) = 0;
  // Formats completion `index`'s news: appends a stream's events to `out`, or keeps what a
  // whole answer needs.
  virtual void Consume(int index, const CompletionDelta& delta, std::string* out) = 0;
  // After the last completion ended (`output` holds the ends): a stream's closing events, or
  // the whole HTTP response (an error response when output.failure() is not OK).
  virtual std::string Closing(const OutputProcessor& output) = 0;
  // A stream ended early by `status` after its first events went out: its closing events.
  virtual std::string StreamFailure(const absl::Status& status) = 0;
  // The answer's id ("chatcmpl-...", "resp_..."), once Begin set it; for the log line.
  virtual const std::string& id() const = 0;
};

}  // namespace pagoda::scheduler::http
