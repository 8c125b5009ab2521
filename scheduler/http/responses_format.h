// ResponsesFormat: the answer of POST /v1/responses (OpenAI's Responses API), from the one output
// path's events (text, reasoning, tool calls: output_processor.h).
//
// The response object: id "resp_...", object "response", created_at, status ("completed";
// "incomplete" with incomplete_details {"reason": "max_output_tokens"} when the length limit or
// the context ended it; "failed" with error {code, message}), the settings the request set
// (ResponsesRequest::echo), model, output and usage {input_tokens, input_tokens_details
// {cached_tokens}, output_tokens, output_tokens_details {reasoning_tokens}, total_tokens}.
// Output items, in the order the model wrote them: "message" (id "msg_...", role assistant,
// content [{"type": "output_text", "text", "annotations": []}]), "function_call" (id "fc_...",
// call_id, name, arguments) and "reasoning" (id "rs_...", summary [], content [{"type":
// "reasoning_text", "text"}]). A run of text is one message; each call is its own item. A call
// the parser finds malformed (its text then follows as a message) is left out of a whole answer;
// a stream already announced it, so it ends there with status "incomplete".
//
// Streams: typed server-sent events ("event: TYPE" and "data: {...}"), each with
// sequence_number 0, 1, ...: response.created, response.in_progress; per item
// response.output_item.added, then for a message response.content_part.added,
// response.output_text.delta..., response.output_text.done, response.content_part.done; for a
// call response.function_call_arguments.delta..., response.function_call_arguments.done; for
// reasoning response.reasoning_text.delta..., response.reasoning_text.done; then
// response.output_item.done. It ends with one of response.completed, response.incomplete or
// response.failed, carrying the whole response object, and no [DONE].
//
// Storing: when the response completed or is incomplete, `on_final` gets the final object before
// it is written, so a client that sends previous_response_id as soon as it has read the answer
// finds it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/http/answer_format.h"

namespace pagoda::scheduler::http {

class ResponsesFormat final : public AnswerFormat {
 public:
  struct Options {
    nlohmann::ordered_json echo;  // ResponsesRequest::echo
    std::string model;            // the served model name
    std::string id_tag;           // the front end's random tag of answer ids
    bool stream = false;
    bool keep_alive = true;
    // The final object of a completed or incomplete response; unset: not stored.
    std::function<void(const nlohmann::ordered_json& response)> on_final;
  };

  explicit ResponsesFormat(Options options);

  std::string Begin(RequestId id, int n) override;
  void Consume(int index, const CompletionDelta& delta, std::string* out) override;
  std::string Closing(const OutputProcessor& output) override;
  std::string StreamFailure(const absl::Status& status) override;
  const std::string& id() const override { return id_; }

 private:
  enum class ItemKind { kNone, kMessage, kReasoning, kCall };

  // The response object with `status` and the output so far.
  nlohmann::ordered_json Object(const std::string& status) const;
  // Appends event `type` with `fields` (and its sequence number) to `out`.
  void Emit(const std::string& type, nlohmann::ordered_json fields, std::string* out);
  // Makes `kind` the open item, closing another one first; `call` for kCall.
  void Open(ItemKind kind, const OutputEvent* call, std::string* out);
  // Closes the open item with `status` ("completed" or "incomplete").
  void Close(const std::string& status, std::string* out);
  // The open item's running text: the message's output_text, the reasoning's text, the call's
  // arguments.
  std::string& OpenText();

  Options options_;
  std::string id_;
  std::string item_suffix_;  // what item ids share: the response's tag and request id
  int64_t created_ = 0;
  int64_t sequence_ = 0;
  std::vector<nlohmann::ordered_json> items_;  // the output
  std::vector<bool> dropped_;                  // parallel to items_: a malformed call
  std::vector<int32_t> calls_;                 // parallel to items_: the parser's call index
  ItemKind open_ = ItemKind::kNone;
  int32_t open_call_ = -1;  // kCall: the parser's index of the open call
  int64_t reasoning_tokens_ = 0;
};

}  // namespace pagoda::scheduler::http
