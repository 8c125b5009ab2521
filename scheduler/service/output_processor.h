// OutputProcessor: the one output path of a generation request's n completions, shared by every
// API (GenerateCall for gRPC, http::OpenAiCall for HTTP). It buffers what the engine delivers,
// turns each completion's tokens into text and events, applies the stop strings, and keeps the
// end bookkeeping; an API decides when to write and formats what it gets: per completion, a
// CompletionDelta (the tokens sent, their logprobs, the events their text became, the end).
//
// Per completion: tokens → StreamingDetokenizer → StopMatcher → TextPostProcessor (when one is
// set: the reasoning and tool-call parser, text::OutputParser, for requests that ask for it) →
// events. The detokenizer renders no control token; the tokens in Options::rendered_tokens
// (a tool-call format's special markers, [TOOL_CALLS] or <|python_tag|>) are rendered as their
// text, so that the parser sees them. The stop strings match before the parser: a stop string
// ends the text the parser gets, and EOS (never rendered) simply ends it. A stop string that
// matches ends its completion: the processor calls Options::on_stop_match (the API finishes the
// completion in the engine with kStopString), drops the tokens after the matching one with their
// logprobs, and when the end arrives sets its reason to kStopString and its completion_tokens to
// the tokens sent: the match wins even when the engine ended the completion for another reason
// meanwhile.
//
// Threads: two sides, as in the APIs' calls.
//  * The engine side (AddToken, AddEnd, HasNews, NextWithNews, ends_arrived) and Take run under
//    the owner's mutex (given at construction, asserted): the lock that also guards the owner's
//    write state, so that one critical section sees both what is buffered and whether a flush
//    is owed. They only move buffers: quick, never blocking, calling nothing outside.
//  * The writer side (Take, Process and the end bookkeeping) runs on one thread at a time, the
//    owner's writer (gRPC: the thread that set writing_; HTTP: the connection's strand). It owns
//    the detokenizers, stop matchers and post-processors, and runs Process without the lock
//    (on_stop_match calls into the engine).
// Created before the request is submitted, with its n completions; never resized.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/core/types.h"
#include "scheduler/text/detokenizer.h"
#include "scheduler/text/output_parser.h"
#include "scheduler/text/stop_matcher.h"
#include "scheduler/text/tokenizer.h"

namespace pagoda::scheduler {

class Engine;

// One piece of a completion's output, in the order the text produced it; the parser's events
// (text::OutputEvent) as the APIs see them. The APIs switch over `kind` without a default, so a
// new kind fails to compile until each API formats it.
struct OutputEvent {
  enum class Kind {
    kText,               // answer text (message.content)
    kReasoning,          // reasoning text (message.reasoning_content)
    kToolCallStart,      // tool call `index` began: `id` and `name` are set
    kToolCallArguments,  // a piece of call `index`'s arguments (JSON text)
    kToolCallInvalid,    // call `index`, started, turned out malformed: it is not a call; its
                         // text follows as kText
  };
  Kind kind = Kind::kText;
  std::string text;    // kText, kReasoning, kToolCallArguments
  int32_t index = -1;  // the tool-call kinds: the call's index (0, 1, ... in output order)
  std::string id;      // kToolCallStart
  std::string name;    // kToolCallStart
};

// Appends `text` as answer text, extending the last event when it is text too (one text event
// per delta, however many tokens it came from). Empty text adds nothing.
void AppendText(std::string_view text, std::vector<OutputEvent>* events);

// Between one completion's stop-matched text and its events: the reasoning and tool-call parser
// implements this. Writer-owned, one per completion; it may hold text back across calls.
class TextPostProcessor {
 public:
  virtual ~TextPostProcessor() = default;
  // Text released by the stop matcher (well-formed UTF-8, possibly empty); appends the events
  // it now yields.
  virtual void Push(std::string_view text, std::vector<OutputEvent>* events) = 0;
  // The completion ended (no more text): appends whatever it held back.
  virtual void Finish(std::vector<OutputEvent>* events) = 0;
};

// A completion's end, as the APIs report it.
struct CompletionEnd {
  Event event;               // the engine's end, with the stop-string override applied
  std::string matched_stop;  // the stop string that ended it; empty when none
};

// What Process hands the API for one completion: its news since the last Process.
struct CompletionDelta {
  std::vector<int32_t> tokens;         // the tokens sent: none after a stop match
  std::vector<TokenLogprob> logprobs;  // theirs, parallel to tokens; empty when not asked for
  std::vector<OutputEvent> events;     // what their text became, in order
  std::optional<CompletionEnd> end;    // set when the completion ended
};

class OutputProcessor {
 public:
  struct Options {
    int n = 1;                       // completions
    std::vector<std::string> stops;  // stop strings, valid UTF-8
    // The writer, without the lock, when a stop string matched in completion `index`: the API
    // finishes that completion in the engine (kStopString). Required.
    std::function<void(int index)> on_stop_match;
    // Makes completion `index`'s post-processor; unset: the text goes out as kText events.
    std::function<std::unique_ptr<TextPostProcessor>(int index)> post_processor;
    // Control tokens rendered as this text instead of nothing (see the header's comment).
    std::vector<std::pair<int32_t, std::string>> rendered_tokens;
  };

  // `tokenizer` and `mu` (the owner's mutex) must outlive the processor.
  OutputProcessor(const text::Tokenizer& tokenizer, Options options, absl::Mutex* mu);
  OutputProcessor(const OutputProcessor&) = delete;
  OutputProcessor& operator=(const OutputProcessor&) = delete;

  int n() const { return static_cast<int>(completions_.size()); }

  // The engine side, under the owner's mutex.
  // Buffers a token of completion `index` and its logprob (null when not asked for).
  void AddToken(int index, int32_t token, const TokenLogprob* logprob);
  // Buffers completion `index`'s end and counts it.
  void AddEnd(int index, Event event);
  // Completion `index` has buffered tokens or an end not yet taken.
  bool HasNews(int index) const;
  // The next completion with news, round robin (a fast completion never starves the others);
  // -1 when none.
  int NextWithNews();
  // Ends the engine has delivered.
  int ends_arrived() const;

  // The writer, under the owner's mutex: moves completion `index`'s buffered tokens, logprobs
  // and end to the writer's side, for Process (buffers trade places: no allocation).
  void Take(int index);

  // The writer, without the lock: turns what Take moved over for completion `index` into `out`
  // (replacing its contents); false when nothing was taken since the last Process.
  bool Process(int index, CompletionDelta* out);

  // The end bookkeeping, the writer's.
  // Ends that Process has handed out.
  int ended() const { return ended_; }
  bool all_ended() const { return ended_ == n(); }
  // The first abnormal end among them (kError: INTERNAL, kCancelled: CANCELLED, kDeadline:
  // DEADLINE_EXCEEDED, with the end's message); OK when none.
  const absl::Status& failure() const { return failure_; }
  // Completion `index`'s end, once handed out.
  const CompletionEnd& end(int index) const;
  // Once all_ended: the request's end for its log line: completion 0's, with the completion
  // tokens and preemptions of all n and the latest finish.
  Event MergedEnd() const;

 private:
  struct Completion {
    explicit Completion(const text::Tokenizer& tokenizer, const std::vector<std::string>& stops)
        : detok(tokenizer), stops(stops) {}
    // The detokenizer's text for `token`, with the rendered control tokens.
    std::string Detokenize(int32_t token,
                           const std::vector<std::pair<int32_t, std::string>>& rendered);
    // Under the owner's mutex.
    std::vector<int32_t> pending;                // tokens not yet taken
    std::vector<TokenLogprob> pending_logprobs;  // theirs, when asked for
    std::optional<Event> final;                  // the engine's end, not yet taken
    // The writer's.
    bool taken = false;  // Take ran since the last Process
    std::vector<int32_t> taken_tokens;
    std::vector<TokenLogprob> taken_logprobs;
    std::optional<Event> taken_final;
    text::StreamingDetokenizer detok;
    text::StopMatcher stops;
    std::unique_ptr<TextPostProcessor> post;  // null: text goes out as it is
    std::string matched_stop;                 // set once a stop string matched
    int32_t sent_tokens = 0;
    std::optional<CompletionEnd> end;  // once handed out
  };

  // The writer: `text` of completion `c` through its post-processor into `events`.
  static void Emit(Completion& c, std::string_view text, std::vector<OutputEvent>* events);

  absl::Mutex* const mu_;
  const std::function<void(int)> on_stop_match_;
  const std::vector<std::pair<int32_t, std::string>> rendered_tokens_;
  std::vector<std::unique_ptr<Completion>> completions_;
  // Under the owner's mutex.
  int next_ = 0;  // where NextWithNews starts looking
  int arrived_ = 0;
  // The writer's.
  std::string text_;  // a delta's text before post-processing (kept for its capacity)
  int ended_ = 0;
  absl::Status failure_;
};

// The TextPostProcessor that runs text::OutputParser with `options`: its events become
// OutputEvents one for one (kContent as kText).
std::unique_ptr<TextPostProcessor> MakeParserPostProcessor(
    const text::OutputParser::Options& options);

// The control tokens of `format`'s special markers (ToolCallSyntax::special_markers) that
// `tokenizer` has as single control tokens, with their text: Options::rendered_tokens.
std::vector<std::pair<int32_t, std::string>> MarkerTokens(const text::Tokenizer& tokenizer,
                                                          text::ToolCallFormat format);

// The processor of a request submitted to `engine` as the ids id .. id + n - 1: a stop match
// finishes its completion there. With `parsing`, each completion's text goes through an
// OutputParser with those options (completion i's id_seed: parsing->id_seed + i, so that the
// completions' call ids differ), and the format's marker tokens are rendered.
std::unique_ptr<OutputProcessor> MakeOutputProcessor(
    Engine* engine, RequestId id, int n, const text::Tokenizer& tokenizer,
    std::vector<std::string> stops, absl::Mutex* mu,
    const std::optional<text::OutputParser::Options>& parsing = std::nullopt);

}  // namespace pagoda::scheduler
