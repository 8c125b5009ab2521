#include "scheduler/http/responses_request.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "scheduler/http/request_reader.h"

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

// OpenAI's limits on metadata.
constexpr size_t kMaxMetadataPairs = 16;
constexpr size_t kMaxMetadataKey = 64;
constexpr size_t kMaxMetadataValue = 512;

// A content part's text; nullopt when the part is not a text part (input_text, output_text,
// text, reasoning_text or summary_text).
std::optional<std::string> PartText(const json& part) {
  if (!part.is_object()) return std::nullopt;
  auto type = part.find("type");
  auto text = part.find("text");
  if (type == part.end() || text == part.end() || !text->is_string()) return std::nullopt;
  if (*type != "input_text" && *type != "output_text" && *type != "text" &&
      *type != "reasoning_text" && *type != "summary_text") {
    return std::nullopt;
  }
  return text->get<std::string>();
}

// The text of a content field: a string, or an array of text parts (joined).
std::optional<ApiError> ContentText(const json& content, const std::string& where,
                                    std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return BadRequest(absl::StrCat(where, " must be a string or an array of content parts"), where);
  }
  out->clear();
  for (size_t i = 0; i < content.size(); ++i) {
    std::optional<std::string> text = PartText(content[i]);
    if (!text) {
      std::string type =
          content[i].is_object() && content[i].contains("type") && content[i]["type"].is_string()
              ? content[i]["type"].get<std::string>()
              : "";
      return BadRequest(
          absl::StrCat(where, "[", i, "]",
                       type.empty() ? " must be a text part {\"type\": \"input_text\", \"text\"}"
                                    : absl::StrCat(": content parts of type '", type,
                                                   "' are not supported (this server reads "
                                                   "text: input_text, output_text)")),
          where);
    }
    *out += *text;
  }
  return std::nullopt;
}

// The item's string field `key`, or a 400.
std::optional<ApiError> StringField(const json& item, const char* key, const std::string& where,
                                    std::string* out) {
  auto it = item.find(key);
  if (it == item.end() || !it->is_string()) {
    return BadRequest(absl::StrCat(where, ".", key, " must be a string"), where);
  }
  *out = it->get<std::string>();
  return std::nullopt;
}

std::string ItemType(const json& item) {
  auto type = item.find("type");
  if (type == item.end()) return item.contains("role") ? "message" : "";
  return type->is_string() ? type->get<std::string>() : "";
}

// A reasoning item's text: its content's reasoning_text parts, else its summary's.
std::string ReasoningText(const json& item) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    auto parts = item.find(key);
    if (parts == item.end() || !parts->is_array()) continue;
    for (const json& part : *parts) {
      if (std::optional<std::string> t = PartText(part)) text += *t;
    }
    if (!text.empty()) break;
  }
  return text;
}

void ReadInput(RequestReader& r, ResponsesRequest* out) {
  const json* input = r.Get("input");
  if (!r.ok()) return;
  if (input == nullptr) return r.Fail("input is required", "input");
  if (input->is_string()) {
    out->input = json::array({json{{"type", "message"}, {"role", "user"}, {"content", *input}}});
    return;
  }
  if (!input->is_array() || input->empty()) {
    return r.Fail("input must be a string or a non-empty array of input items", "input");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    if (std::optional<ApiError> e = CheckInputItem((*input)[i], absl::StrCat("input[", i, "]"))) {
      return r.Fail(e->message, "input");
    }
  }
  out->input = *input;
}

// One function tool in the flat Responses form; its chat form into `chat`. The name; empty
// after failing.
std::string ReadTool(RequestReader& r, const json& tool, size_t i, json* chat) {
  const std::string where = absl::StrCat("tools[", i, "]");
  if (!tool.is_object() || !tool.contains("type") || !tool["type"].is_string()) {
    r.Fail(absl::StrCat(where, " must be an object with a string 'type'"), "tools");
    return "";
  }
  const std::string type = tool["type"].get<std::string>();
  if (type != "function") {
    r.Fail(absl::StrCat(where, ": tools of type '", type,
                        "' (built-in tools) are not supported by this server; it runs function "
                        "tools, which your code executes"),
           "tools");
    return "";
  }
  auto name = tool.find("name");
  if (name == tool.end() || !name->is_string() || name->get<std::string>().empty()) {
    r.Fail(absl::StrCat(where, ".name must be a non-empty string"), "tools");
    return "";
  }
  json function = {{"name", *name}};
  for (auto it = tool.begin(); it != tool.end(); ++it) {
    const std::string& key = it.key();
    if (key == "type" || key == "name") continue;
    if (key == "parameters" && !it->is_null() && !it->is_object() && !it->is_boolean()) {
      r.Fail(absl::StrCat(where, ".parameters must be a JSON Schema object"), "tools");
      return "";
    }
    if (key == "description" && !it->is_null() && !it->is_string()) {
      r.Fail(absl::StrCat(where, ".description must be a string"), "tools");
      return "";
    }
    if (key != "parameters" && key != "description" && key != "strict") {
      r.Fail(absl::StrCat(where, " has no field '", key, "'"), "tools");
      return "";
    }
    if (!it->is_null()) function[key] = *it;
  }
  *chat = json{{"type", "function"}, {"function", std::move(function)}};
  return name->get<std::string>();
}

void ReadTools(RequestReader& r, ResponsesRequest* out) {
  OpenAiRequest& chat = out->chat;
  std::vector<std::string> names;
  json tools = json::array();
  json chat_tools = json::array();
  if (const json* given = r.Get("tools")) {
    if (!given->is_array()) return r.Fail("tools must be an array", "tools");
    for (size_t i = 0; i < given->size(); ++i) {
      json chat_tool;
      names.push_back(ReadTool(r, (*given)[i], i, &chat_tool));
      if (!r.ok()) return;
      tools.push_back((*given)[i]);
      chat_tools.push_back(std::move(chat_tool));
    }
  }
  out->echo["tools"] = tools;
  if (!chat_tools.empty()) chat.tools = std::move(chat_tools);
  chat.tool_choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  chat.parallel_tool_calls = r.Bool("parallel_tool_calls").value_or(true);
  out->echo["parallel_tool_calls"] = chat.parallel_tool_calls;
  const json* choice = r.Get("tool_choice");
  out->echo["tool_choice"] = choice != nullptr ? *choice : json("auto");
  if (choice == nullptr || !r.ok()) return;
  constexpr std::string_view kForms =
      "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
      "\"name\": ...}";
  if (*choice == "none") {
    chat.tool_choice = ToolChoice::kNone;
  } else if (*choice == "auto") {
  } else if (*choice == "required") {
    chat.tool_choice = ToolChoice::kRequired;
  } else if (choice->is_object() && choice->value("type", json()) == "function" &&
             choice->value("name", json()).is_string()) {
    chat.tool_choice = ToolChoice::kFunction;
    chat.tool_choice_function = (*choice)["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), chat.tool_choice_function) == names.end()) {
      return r.Fail(absl::StrCat("tool_choice names the function '", chat.tool_choice_function,
                                 "', which is not among the tools"),
                    "tool_choice");
    }
  } else if (choice->is_object() && choice->value("type", json()).is_string()) {
    return r.Fail(absl::StrCat("tool_choice of type '", (*choice)["type"].get<std::string>(),
                               "' is not supported by this server; ", std::string(kForms)),
                  "tool_choice");
  } else {
    return r.Fail(std::string(kForms), "tool_choice");
  }
  if (names.empty() && chat.tool_choice != ToolChoice::kNone) {
    return r.Fail("tool_choice \"required\" or a named function needs tools", "tool_choice");
  }
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", ...}, "verbosity"}.
void ReadText(RequestReader& r, ResponsesRequest* out) {
  const json* text = r.Get("text");
  out->echo["text"] = json{{"format", {{"type", "text"}}}};
  if (text == nullptr || !r.ok()) return;
  if (!text->is_object()) return r.Fail("text must be an object", "text");
  for (auto it = text->begin(); it != text->end(); ++it) {
    if (it.key() == "verbosity") {
      if (!it->is_null() && *it != "medium") {
        return r.Fail("text.verbosity is not supported by this server (only \"medium\")",
                      "text.verbosity");
      }
    } else if (it.key() != "format") {
      return r.Fail(absl::StrCat("text has no field '", it.key(), "'"), "text");
    }
  }
  out->echo["text"] = *text;
  auto format = text->find("format");
  if (format == text->end() || format->is_null()) return;
  const std::string field = "text.format";
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    return r.Fail("text.format must be an object with a string field 'type'", field);
  }
  const std::string type = (*format)["type"].get<std::string>();
  static const auto* kKeys = new absl::flat_hash_map<std::string, std::vector<std::string>>{
      {"text", {}},
      {"json_object", {}},
      {"json_schema", {"name", "schema", "strict", "description"}}};
  auto keys = kKeys->find(type);
  if (keys == kKeys->end()) {
    return r.Fail(
        absl::StrCat("text.format.type '", type, "' is not one of text, json_object, json_schema"),
        field);
  }
  for (auto it = format->begin(); it != format->end(); ++it) {
    if (it.key() == "type") continue;
    if (std::find(keys->second.begin(), keys->second.end(), it.key()) == keys->second.end()) {
      return r.Fail(absl::StrCat("text.format of type '", type, "' has no field '", it.key(), "'"),
                    field);
    }
  }
  if (type == "text") return;
  if (type == "json_object") {
    out->chat.generate.mutable_constraint()->set_json_object(true);
  } else {
    auto schema = format->find("schema");
    if (schema == format->end() || (!schema->is_object() && !schema->is_boolean())) {
      return r.Fail("text.format.schema must be a JSON Schema object", field);
    }
    if (format->contains("name") && !(*format)["name"].is_string()) {
      return r.Fail("text.format.name must be a string", field);
    }
    out->chat.generate.mutable_constraint()->set_json_schema(schema->dump());
  }
}

void ReadMetadata(RequestReader& r, ResponsesRequest* out) {
  const json* metadata = r.Get("metadata");
  out->echo["metadata"] = json::object();
  if (metadata == nullptr || !r.ok()) return;
  if (!metadata->is_object() || metadata->size() > kMaxMetadataPairs) {
    return r.Fail(
        absl::StrFormat("metadata must be an object of at most %d string pairs", kMaxMetadataPairs),
        "metadata");
  }
  for (auto it = metadata->begin(); it != metadata->end(); ++it) {
    if (!it->is_string() || it.key().size() > kMaxMetadataKey ||
        it->get_ref<const std::string&>().size() > kMaxMetadataValue) {
      return r.Fail(
          absl::StrFormat("metadata['%s'] must be a string of at most %d characters, "
                          "under a key of at most %d",
                          it.key().substr(0, kMaxMetadataKey), kMaxMetadataValue, kMaxMetadataKey),
          "metadata");
    }
  }
  out->echo["metadata"] = *metadata;
}

void ReadGeneration(RequestReader& r, ResponsesRequest* out) {
  pagoda::v1::GenerateRequest& g = out->chat.generate;
  const std::optional<double> temperature = r.Number("temperature");
  const std::optional<double> top_p = r.Number("top_p");
  g.mutable_sampling()->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  if (top_p) g.mutable_sampling()->set_top_p(static_cast<float>(*top_p));
  out->echo["temperature"] = temperature.value_or(1.0);
  out->echo["top_p"] = top_p.value_or(1.0);
  std::optional<int64_t> max_tokens =
      r.Integer("max_output_tokens", 1, std::numeric_limits<uint32_t>::max());
  if (max_tokens) g.set_max_tokens(static_cast<uint32_t>(*max_tokens));
  out->echo["max_output_tokens"] = max_tokens ? json(*max_tokens) : json();
  // Counts built-in tool calls on OpenAI; there are none here.
  std::optional<int64_t> max_tool_calls =
      r.Integer("max_tool_calls", 1, std::numeric_limits<int32_t>::max());
  out->echo["max_tool_calls"] = max_tool_calls ? json(*max_tool_calls) : json();
  out->chat.stream = r.Bool("stream").value_or(false);
  if (const json* options = r.Get("stream_options"); options != nullptr && r.ok()) {
    if (!out->chat.stream) {
      return r.Fail("stream_options is only allowed with stream: true", "stream_options");
    }
    if (!options->is_object()) return r.Fail("stream_options must be an object", "stream_options");
    for (auto it = options->begin(); it != options->end(); ++it) {
      // Obfuscation pads events against side channels on OpenAI; no padding here.
      if (it.key() != "include_obfuscation") {
        return r.Fail(absl::StrCat("stream_options.", it.key(), " is not supported"),
                      "stream_options");
      }
    }
  }
}

// Settings of OpenAI's own models and services that would change the result here.
void RefuseUnserved(RequestReader& r) {
  r.Unsupported("background", IsFalse, "every response is answered on its request");
  r.Unsupported("conversation", IsEmpty, "use previous_response_id");
  r.Unsupported("prompt", IsEmpty, "stored prompts");
  r.Unsupported("include", IsEmpty);
  r.Unsupported("top_logprobs", IsZero);
  r.Unsupported(
      "truncation", [](const json& v) { return v == "disabled"; },
      "a conversation longer than the context is refused, not truncated");
  r.Unsupported(
      "reasoning",
      [](const json& v) {
        if (!v.is_object()) return false;
        return std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_null(); });
      },
      "the model's chat template decides whether it reasons");
}

}  // namespace

std::optional<ApiError> CheckInputItem(const json& item, const std::string& where) {
  if (!item.is_object()) return BadRequest(absl::StrCat(where, " must be an object"), where);
  const std::string type = ItemType(item);
  std::string unused;
  if (type == "message") {
    auto role = item.find("role");
    if (role == item.end() || !role->is_string() ||
        (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")) {
      return BadRequest(
          absl::StrCat(where, ".role must be one of user, assistant, system, developer"), where);
    }
    auto content = item.find("content");
    if (content == item.end())
      return BadRequest(absl::StrCat(where, ".content is required"), where);
    return ContentText(*content, absl::StrCat(where, ".content"), &unused);
  }
  if (type == "function_call") {
    for (const char* key : {"call_id", "name", "arguments"}) {
      if (auto e = StringField(item, key, where, &unused)) return e;
    }
    return std::nullopt;
  }
  if (type == "function_call_output") {
    if (auto e = StringField(item, "call_id", where, &unused)) return e;
    auto output = item.find("output");
    if (output == item.end()) return BadRequest(absl::StrCat(where, ".output is required"), where);
    return ContentText(*output, absl::StrCat(where, ".output"), &unused);
  }
  if (type == "item_reference") return StringField(item, "id", where, &unused);
  if (type == "reasoning") return std::nullopt;
  if (type.empty()) {
    return BadRequest(absl::StrCat(where, " must have a string 'type' or a 'role'"), where);
  }
  return BadRequest(absl::StrCat(where, ": input items of type '", type,
                                 "' are not supported by this server (messages, function_call, "
                                 "function_call_output, reasoning, item_reference)"),
                    where);
}

std::optional<ApiError> ConversationTurns(const json& items,
                                          const std::optional<std::string>& instructions,
                                          const std::string& param, std::vector<ChatTurn>* out) {
  out->clear();
  if (instructions) {
    ChatTurn& system = out->emplace_back();
    system.role = "system";
    system.content = *instructions;
  }
  if (!items.is_array()) return BadRequest(absl::StrCat(param, " must be an array"), param);
  absl::flat_hash_map<std::string, std::string> call_names;  // call_id -> function name
  std::optional<std::string> reasoning;                      // for the next assistant turn
  auto assistant = [&](bool reuse) -> ChatTurn& {
    if (!reuse || out->empty() || out->back().role != "assistant") {
      // Content "" rather than null for a turn of calls alone: templates such as Qwen3's
      // search the content for "</think>", which fails on null.
      out->emplace_back().role = "assistant";
    }
    ChatTurn& turn = out->back();
    if (reasoning) turn.reasoning_content = *std::exchange(reasoning, std::nullopt);
    return turn;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    const std::string where = absl::StrCat(param, "[", i, "]");
    if (std::optional<ApiError> e = CheckInputItem(item, where)) return e;
    const std::string type = ItemType(item);
    if (type == "message") {
      const std::string role = item["role"].get<std::string>();
      ChatTurn& turn = role == "assistant" ? assistant(/*reuse=*/false) : out->emplace_back();
      turn.role = role;
      (void)ContentText(item["content"], where, &turn.content);
    } else if (type == "function_call") {
      ChatTurn& turn = assistant(/*reuse=*/true);
      if (!turn.tool_calls) turn.tool_calls = json::array();
      const std::string call_id = item["call_id"].get<std::string>();
      call_names[call_id] = item["name"].get<std::string>();
      turn.tool_calls->push_back(
          json{{"id", call_id},
               {"type", "function"},
               {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      ChatTurn& turn = out->emplace_back();
      turn.role = "tool";
      turn.tool_call_id = item["call_id"].get<std::string>();
      if (auto name = call_names.find(*turn.tool_call_id); name != call_names.end()) {
        turn.name = name->second;
      }
      (void)ContentText(item["output"], where, &turn.content);
    } else if (type == "reasoning") {
      std::string text = ReasoningText(item);
      if (!text.empty()) reasoning = reasoning.value_or("") + text;
    } else {
      return BadRequest(absl::StrCat(where, ": an item_reference was not resolved"), param);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out) {
  if (NestingDepth(body) > kMaxJsonDepth) {
    return BadRequest(absl::StrFormat("the body nests deeper than %d levels", kMaxJsonDepth));
  }
  json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return BadRequest("the body is not valid JSON");
  if (!object.is_object()) return BadRequest("the body must be a JSON object");
  *out = ResponsesRequest{};
  out->chat.endpoint = Endpoint::kChat;
  RequestReader r(object);
  if (std::optional<std::string> model = r.String("model")) out->chat.model = *model;
  ReadInput(r, out);
  out->instructions = r.String("instructions");
  out->echo["instructions"] = out->instructions ? json(*out->instructions) : json();
  out->previous_response_id = r.String("previous_response_id").value_or("");
  out->echo["previous_response_id"] =
      out->previous_response_id.empty() ? json() : json(out->previous_response_id);
  out->store = r.Bool("store").value_or(true);
  out->echo["store"] = out->store;
  ReadGeneration(r, out);
  ReadTools(r, out);
  ReadText(r, out);
  ReadMetadata(r, out);
  out->echo["reasoning"] = json{{"effort", nullptr}, {"summary", nullptr}};
  out->echo["truncation"] = "disabled";
  const std::optional<std::string> user = r.String("user");
  out->echo["user"] = user ? json(*user) : json();
  RefuseUnserved(r);
  r.Ignore({"service_tier", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"});
  r.RefuseUnknown();
  if (r.error()) return r.error();
  return std::nullopt;
}

}  // namespace pagoda::scheduler::http
