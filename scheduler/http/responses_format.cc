#include "scheduler/http/responses_format.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "scheduler/http/api_error.h"
#include "scheduler/http/http_message.h"
#include "scheduler/http/openai_response.h"

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

std::string DumpOrdered(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The status a response ends with.
std::string EndStatus(FinishReason reason) {
  return reason == FinishReason::kLength || reason == FinishReason::kContext ? "incomplete"
                                                                             : "completed";
}

}  // namespace

ResponsesFormat::ResponsesFormat(Options options) : options_(std::move(options)) {}

std::string ResponsesFormat::Begin(RequestId id, int /*n*/) {
  item_suffix_ = absl::StrFormat("%s%08x", options_.id_tag, id);
  id_ = absl::StrCat("resp_", item_suffix_);
  created_ = absl::ToUnixSeconds(absl::Now());
  if (!options_.stream) return "";
  std::string out;
  Emit("response.created", json{{"response", Object("in_progress")}}, &out);
  Emit("response.in_progress", json{{"response", Object("in_progress")}}, &out);
  return out;
}

json ResponsesFormat::Object(const std::string& status) const {
  json out = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr}};
  out.update(options_.echo);
  out["model"] = options_.model;
  json output = json::array();
  for (size_t i = 0; i < items_.size(); ++i) {
    if (!dropped_[i]) output.push_back(items_[i]);
  }
  out["output"] = std::move(output);
  out["service_tier"] = "default";
  out["top_logprobs"] = 0;
  out["usage"] = nullptr;
  return out;
}

void ResponsesFormat::Emit(const std::string& type, json fields, std::string* out) {
  json event = {{"type", type}, {"sequence_number", sequence_++}};
  event.update(fields);
  absl::StrAppend(out, "event: ", type, "\ndata: ", DumpOrdered(event), "\n\n");
}

std::string& ResponsesFormat::OpenText() {
  json& item = items_.back();
  switch (open_) {
    case ItemKind::kMessage:
    case ItemKind::kReasoning:
      return item["content"][0]["text"].get_ref<std::string&>();
    default:
      return item["arguments"].get_ref<std::string&>();
  }
}

void ResponsesFormat::Open(ItemKind kind, const OutputEvent* call, std::string* out) {
  if (open_ == kind && kind != ItemKind::kCall) return;
  Close("completed", out);
  const size_t index = items_.size();
  const std::string suffix = absl::StrCat(item_suffix_, "_", index);
  json item;
  json part;
  switch (kind) {
    case ItemKind::kMessage:
      part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
      item = {{"id", absl::StrCat("msg_", suffix)},
              {"type", "message"},
              {"status", "in_progress"},
              {"role", "assistant"},
              {"content", json::array()}};
      break;
    case ItemKind::kReasoning:
      part = {{"type", "reasoning_text"}, {"text", ""}};
      item = {{"id", absl::StrCat("rs_", suffix)},
              {"type", "reasoning"},
              {"summary", json::array()},
              {"content", json::array()}};
      break;
    case ItemKind::kCall:
      item = {{"id", absl::StrCat("fc_", suffix)},
              {"type", "function_call"},
              {"status", "in_progress"},
              {"call_id", call->id},
              {"name", call->name},
              {"arguments", ""}};
      open_call_ = call->index;
      break;
    case ItemKind::kNone:
      return;
  }
  open_ = kind;
  if (options_.stream) {
    Emit("response.output_item.added", json{{"output_index", index}, {"item", item}}, out);
    if (kind == ItemKind::kMessage) {
      Emit("response.content_part.added",
           json{{"item_id", item["id"]},
                {"output_index", index},
                {"content_index", 0},
                {"part", part}},
           out);
    }
  }
  if (!part.is_null()) item["content"].push_back(std::move(part));
  items_.push_back(std::move(item));
  dropped_.push_back(false);
  calls_.push_back(kind == ItemKind::kCall ? call->index : -1);
}

void ResponsesFormat::Close(const std::string& status, std::string* out) {
  if (open_ == ItemKind::kNone) return;
  const ItemKind kind = std::exchange(open_, ItemKind::kNone);
  const size_t index = items_.size() - 1;
  json& item = items_.back();
  if (item.contains("status")) item["status"] = status;
  if (!options_.stream) return;
  const json& id = item["id"];
  if (kind == ItemKind::kMessage) {
    const json& part = item["content"][0];
    Emit("response.output_text.done",
         json{{"item_id", id},
              {"output_index", index},
              {"content_index", 0},
              {"text", part["text"]},
              {"logprobs", json::array()}},
         out);
    Emit("response.content_part.done",
         json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}}, out);
  } else if (kind == ItemKind::kReasoning) {
    Emit("response.reasoning_text.done",
         json{{"item_id", id},
              {"output_index", index},
              {"content_index", 0},
              {"text", item["content"][0]["text"]}},
         out);
  } else {
    Emit("response.function_call_arguments.done",
         json{{"item_id", id},
              {"output_index", index},
              {"name", item["name"]},
              {"arguments", item["arguments"]}},
         out);
  }
  Emit("response.output_item.done", json{{"output_index", index}, {"item", item}}, out);
}

void ResponsesFormat::Consume(int /*index*/, const CompletionDelta& delta, std::string* out) {
  bool reasoning_only = !delta.events.empty();
  for (const OutputEvent& e : delta.events) {
    if (e.kind != OutputEvent::Kind::kReasoning) reasoning_only = false;
    // The delta event of the open item's kind, after its text grew by e.text.
    auto grow = [&](ItemKind kind, const char* event, bool content_index) {
      if (kind != ItemKind::kCall) Open(kind, nullptr, out);  // a call is opened by its start
      OpenText() += e.text;
      if (!options_.stream || e.text.empty()) return;
      json fields = {{"item_id", items_.back()["id"]}, {"output_index", items_.size() - 1}};
      if (content_index) fields["content_index"] = 0;
      fields["delta"] = e.text;
      if (kind == ItemKind::kMessage) fields["logprobs"] = json::array();
      Emit(event, std::move(fields), out);
    };
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        grow(ItemKind::kMessage, "response.output_text.delta", true);
        break;
      case OutputEvent::Kind::kReasoning:
        grow(ItemKind::kReasoning, "response.reasoning_text.delta", true);
        break;
      case OutputEvent::Kind::kToolCallStart:
        Open(ItemKind::kCall, &e, out);
        break;
      case OutputEvent::Kind::kToolCallArguments:
        if (open_ != ItemKind::kCall || open_call_ != e.index) break;  // (never: parser order)
        grow(ItemKind::kCall, "response.function_call_arguments.delta", false);
        break;
      case OutputEvent::Kind::kToolCallInvalid:
        if (options_.stream) {
          if (open_ == ItemKind::kCall && open_call_ == e.index) Close("incomplete", out);
          break;
        }
        for (size_t i = 0; i < items_.size(); ++i) {
          if (calls_[i] == e.index) dropped_[i] = true;
        }
        if (open_ == ItemKind::kCall && open_call_ == e.index) open_ = ItemKind::kNone;
        break;
    }
  }
  if (reasoning_only) reasoning_tokens_ += static_cast<int64_t>(delta.tokens.size());
  if (delta.end) Close(EndStatus(delta.end->event.reason), out);
}

std::string ResponsesFormat::Closing(const OutputProcessor& output) {
  const absl::Status& failure = output.failure();
  std::string out;
  if (!failure.ok()) {
    if (!options_.stream) return ErrorResponse(FromStatus(failure), options_.keep_alive);
    return StreamFailure(failure);
  }
  const Event end = output.MergedEnd();
  const std::string status = EndStatus(end.reason);
  json response = Object(status);
  if (status == "incomplete") response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response["usage"] = {{"input_tokens", end.prompt_tokens},
                       {"input_tokens_details", {{"cached_tokens", end.cached_tokens}}},
                       {"output_tokens", end.completion_tokens},
                       {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                       {"total_tokens", int64_t{end.prompt_tokens} + end.completion_tokens}};
  if (options_.on_final) options_.on_final(response);
  if (!options_.stream) {
    return HttpResponse(200, "application/json", DumpOrdered(response), options_.keep_alive);
  }
  Emit(status == "completed" ? "response.completed" : "response.incomplete",
       json{{"response", std::move(response)}}, &out);
  return out;
}

std::string ResponsesFormat::StreamFailure(const absl::Status& status) {
  std::string out;
  Close("incomplete", &out);
  json response = Object("failed");
  const ApiError error = FromStatus(status);
  response["error"] = {{"code", error.code.empty() ? error.type : error.code},
                       {"message", error.message}};
  Emit("response.failed", json{{"response", std::move(response)}}, &out);
  return out;
}

}  // namespace pagoda::scheduler::http
