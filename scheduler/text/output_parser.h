// OutputParser: splits a model's streamed output into content, reasoning and tool calls.
//
// Text goes in as the detokenizer (and stop matcher) release it, in pieces cut anywhere, a
// marker such as "<tool_call>" or "</think>" included. Events come out as soon as they are
// certain:
//   kContent            a piece of message.content
//   kReasoning          a piece of message.reasoning_content
//   kToolCallStart      call `index` (0, 1, ... in output order) has begun: its id and name
//   kToolCallArguments  a piece of call `index`'s arguments text
//   kToolCallInvalid    call `index`, already started, turned out malformed (see below)
// Consecutive pieces of one kind from one Push() come out as one event.
//
// Contract:
//  * Order: reasoning (when enabled) is split off first: "<think>" opening the output (after
//    whitespace), or Options::starts_in_reasoning, begins it; "</think>" ends it. Everything in
//    it is reasoning, tool-call markup included (never parsed as a call). Whitespace after
//    "<think>" and after "</think>" is dropped. Only then are tool calls parsed, in the format
//    of tool_call_format.h; with no format, or no tools given, everything else is content.
//  * Held back: only text that could still be the start of a marker (shorter than the longest
//    marker), whitespace that a marker may follow, and a call's text until its name is known.
//    Whitespace runs: before a call marker (or at the start of the output) they are not content
//    but part of the call's text (so they come back if the call fails); after a call they are
//    dropped; anywhere else, or at the end of content, they are content. Held text is never
//    lost: Finish() releases or resolves it.
//  * Arguments stream as the raw text of the arguments value as the model wrote it, from its
//    "{" to its matching "}" (no whitespace around it), in pieces, as soon as the call's name is
//    known. When the arguments come before the name in the object they are held and sent in
//    one piece after the start event. A string-valued arguments field ("arguments": "{...}",
//    JSON encoded twice) is held, decoded, and sent in one piece. For every call in the final
//    list, the concatenation of its kToolCallArguments pieces equals ToolCall::arguments, which
//    is valid JSON (an object; "{}" when the call had no arguments field).
//  * Malformed calls. Before its start event (no name yet: the marker is not followed by a JSON
//    object, e.g. Llama's <|python_tag|>brave_search.call(...); the object is broken or ends
//    without a "name" string; for Llama's bare JSON at the start, its first key is not one a
//    call has, or it has no "parameters"/"arguments" key, so {"name": "Ada", "age": 3} stays
//    content), the call's text, marker included, goes back to content and parsing resumes
//    after it. After its start event, if the arguments are not valid JSON or the output ends
//    before they are complete, a kToolCallInvalid event is sent (after the arguments read so
//    far), the call's whole text goes to content, and it is not in the final list; later calls
//    keep their own indexes. Once the arguments are complete the call stands, even if the rest
//    of its object is broken or the output ends: hermes then skips to "</tool_call>", the other
//    formats treat what follows as content.
//  * Pieces are slices of the input cut at input boundaries or just before/after ASCII markup,
//    so well-formed UTF-8 pieces in give well-formed pieces out.
//  * The concatenations of the events (per kind, per call) do not depend on how the input was
//    cut into pieces; ids depend only on Options::id_seed, the format and the index.
// Use: after the stop matcher (a stop string ends the text before the parser sees it), with
// the format's special markers rendered as text (tool_call_format.h). Not thread-safe; one
// parser per generated sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/text/tool_call_format.h"

namespace pagoda::scheduler::text {

struct OutputEvent {
  enum class Kind { kContent, kReasoning, kToolCallStart, kToolCallArguments, kToolCallInvalid };
  Kind kind = Kind::kContent;
  std::string text;    // kContent, kReasoning, kToolCallArguments: the piece
  int32_t index = -1;  // the tool-call events: the call's index
  std::string id;      // kToolCallStart
  std::string name;    // kToolCallStart
};

struct ToolCall {
  int32_t index = 0;  // as in the events
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

// A tool-call id: "call_" and 24 letters and digits, or for mistral 9 letters and digits (its
// template rejects other ids when the call comes back in the history). A hash of the three
// arguments.
std::string MakeToolCallId(ToolCallFormat format, uint64_t seed, int32_t index);

class OutputParser {
 public:
  struct Options {
    bool reasoning = false;            // split <think>...</think> off
    bool starts_in_reasoning = false;  // the prompt opened the block (PromptOpensReasoning)
    ToolCallFormat format = ToolCallFormat::kNone;
    bool tools_given = false;  // no tools (or tool_choice none): no tool-call parsing
    uint64_t id_seed = 0;      // per request, so that ids differ between requests
    // At most this many calls (0: no limit), the first the output starts: the events and the
    // Final entries of later calls are dropped, and so is their markup (it is not content).
    int32_t max_tool_calls = 0;
  };

  struct Final {
    std::vector<OutputEvent> events;  // the last events: what was held back
    // The whole output: what the events said, in one piece each.
    std::string content;
    std::string reasoning;
    std::vector<ToolCall> tool_calls;  // the complete calls, in output order
  };

  explicit OutputParser(const Options& options);
  ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  // Feeds the next piece of output text; returns the events it made certain.
  std::vector<OutputEvent> Push(std::string_view text);
  // End of output: resolves everything held. Call once; Push() afterwards is a bug.
  Final Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int32_t max_tool_calls_;
};

}  // namespace pagoda::scheduler::text
