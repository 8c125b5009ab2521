#include "scheduler/http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"
#include "scheduler/http/request_reader.h"

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

// Logprobs alternatives per token at most (OpenAI's chat limit; vLLM's default).
constexpr int kMaxTopLogprobs = 20;
// OpenAI's default for /v1/completions.
constexpr uint32_t kDefaultCompletionTokens = 16;

using Reader = RequestReader;

bool IsNoTool(const json& v) { return v == "none" || v == "auto"; }

// prompt: a string, an array of token ids, or an array holding one of those.
void ReadPrompt(Reader& r, pagoda::v1::GenerateRequest* out) {
  const json* p = r.Get("prompt");
  if (!r.ok()) return;
  if (p == nullptr) return r.Fail("prompt is required", "prompt");
  auto token_ids = [&](const json& ids) {
    auto* dst = out->mutable_token_ids()->mutable_ids();
    dst->Reserve(static_cast<int>(ids.size()));
    for (const json& id : ids) {
      const std::optional<int64_t> v =
          r.IntegerValue(id, "prompt", 0, std::numeric_limits<int32_t>::max());
      if (!v) return;
      dst->Add(static_cast<int32_t>(*v));
    }
  };
  if (p->is_string()) return out->set_text(p->get<std::string>());
  if (!p->is_array() || p->empty()) {
    return r.Fail("prompt must be a string, an array of token ids, or an array of one of those",
                  "prompt");
  }
  if ((*p)[0].is_number()) return token_ids(*p);
  if (p->size() > 1) {
    return r.Fail(absl::StrFormat("prompt holds %d prompts; this server takes one prompt per "
                                  "request (use n for several completions of one prompt)",
                                  p->size()),
                  "prompt");
  }
  const json& only = (*p)[0];
  if (only.is_string()) return out->set_text(only.get<std::string>());
  if (only.is_array() && !only.empty()) return token_ids(only);
  r.Fail("prompt must be a string, an array of token ids, or an array of one of those", "prompt");
}

// A message's content: a string, or an array of text parts (concatenated).
std::optional<std::string> MessageContent(Reader& r, const json& m, size_t i) {
  const std::string param = absl::StrFormat("messages[%d].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    r.Fail(param + " must be a string or an array of text parts", param);
    return std::nullopt;
  }
  std::string text;
  for (const json& part : *it) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      r.Fail(param + ": only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
             param);
      return std::nullopt;
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// A message's optional string field `key`; false (with the error) when it is not a string.
bool OptionalString(Reader& r, const json& m, const std::string& key, const std::string& param,
                    std::optional<std::string>* out) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return true;
  if (!it->is_string()) {
    r.Fail(absl::StrCat(param, ".", key, " must be a string"), param + "." + key);
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

void ReadMessages(Reader& r, OpenAiRequest* out) {
  const json* ms = r.Get("messages");
  if (!r.ok()) return;
  if (ms == nullptr || !ms->is_array() || ms->empty()) {
    return r.Fail("messages must be a non-empty array of {role, content} objects", "messages");
  }
  static const absl::flat_hash_set<std::string> kRoles = {"system", "developer", "user",
                                                          "assistant", "tool"};
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string param = absl::StrFormat("messages[%d]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return r.Fail(param + " must be an object with a string role", param + ".role");
    }
    ChatTurn message;
    message.role = m["role"].get<std::string>();
    if (!kRoles.contains(message.role)) {
      return r.Fail(absl::StrCat(param, ".role '", message.role,
                                 "' is not one of system, developer, user, assistant, tool"),
                    param + ".role");
    }
    std::optional<std::string> content = MessageContent(r, m, i);
    if (!content) return;
    message.content = *std::move(content);
    message.content_null = !m.contains("content") || m["content"].is_null();
    if (!OptionalString(r, m, "name", param, &message.name) ||
        !OptionalString(r, m, "tool_call_id", param, &message.tool_call_id) ||
        !OptionalString(r, m, "reasoning_content", param, &message.reasoning_content)) {
      return;
    }
    if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
      if (!it->is_array()) {
        return r.Fail(param + ".tool_calls must be an array", param + ".tool_calls");
      }
      message.tool_calls = *it;
    }
    out->messages.push_back(std::move(message));
  }
}

// tools: rendered into the prompt by the chat template; the answer's text is not parsed back
// into tool calls, so only tool_choice none and auto are accepted.
// A tool's function name; empty (after failing) when the tool is malformed.
std::string ToolName(Reader& r, const json& tool, size_t i) {
  const std::string where = absl::StrCat("tools[", i, "]");
  if (!tool.is_object() || tool.value("type", json()) != "function") {
    r.Fail(absl::StrCat(where, " must be {\"type\": \"function\", \"function\": {...}}"), "tools");
    return "";
  }
  const auto f = tool.find("function");
  if (f == tool.end() || !f->is_object()) {
    r.Fail(absl::StrCat(where, ".function must be an object"), "tools");
    return "";
  }
  const auto name = f->find("name");
  if (name == f->end() || !name->is_string() || name->get<std::string>().empty()) {
    r.Fail(absl::StrCat(where, ".function.name must be a non-empty string"), "tools");
    return "";
  }
  if (const auto p = f->find("parameters");
      p != f->end() && !p->is_null() && !p->is_object() && !p->is_boolean()) {
    r.Fail(absl::StrCat(where, ".function.parameters must be a JSON Schema object"), "tools");
    return "";
  }
  return name->get<std::string>();
}

void ReadTools(Reader& r, OpenAiRequest* out) {
  std::vector<std::string> names;
  if (const json* tools = r.Get("tools")) {
    if (!tools->is_array()) return r.Fail("tools must be an array", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      names.push_back(ToolName(r, (*tools)[i], i));
      if (!r.ok()) return;
    }
    if (!tools->empty()) out->tools = *tools;
  }
  out->tool_choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (std::optional<bool> parallel = r.Bool("parallel_tool_calls")) {
    out->parallel_tool_calls = *parallel;
  }
  const json* choice = r.Get("tool_choice");
  if (choice == nullptr || !r.ok()) return;
  constexpr std::string_view kForms =
      "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
      "\"function\": {\"name\": ...}}";
  if (choice->is_string()) {
    const std::string& v = choice->get_ref<const std::string&>();
    if (v == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (v == "auto") {
      out->tool_choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (v == "required") {
      out->tool_choice = ToolChoice::kRequired;
    } else {
      return r.Fail(std::string(kForms), "tool_choice");
    }
  } else if (choice->is_object() && choice->value("type", json()) == "function" &&
             choice->contains("function") && (*choice)["function"].is_object() &&
             (*choice)["function"].value("name", json()).is_string()) {
    out->tool_choice = ToolChoice::kFunction;
    out->tool_choice_function = (*choice)["function"]["name"].get<std::string>();
    if (!names.empty() &&
        std::find(names.begin(), names.end(), out->tool_choice_function) == names.end()) {
      return r.Fail(absl::StrCat("tool_choice names the function '", out->tool_choice_function,
                                 "', which is not among the tools"),
                    "tool_choice");
    }
  } else {
    return r.Fail(std::string(kForms), "tool_choice");
  }
  if (names.empty() && out->tool_choice != ToolChoice::kNone) {
    return r.Fail("tool_choice \"required\" or a named function needs tools", "tool_choice");
  }
}

// logit_bias: {"token id": bias, ...} (OpenAI's keys are strings holding token ids).
void ReadLogitBias(Reader& r, pagoda::v1::SamplingParams* s) {
  const json* bias = r.Get("logit_bias");
  if (bias == nullptr || !r.ok()) return;
  if (!bias->is_object()) {
    return r.Fail("logit_bias must be an object mapping token ids to biases", "logit_bias");
  }
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(it.key(), &id)) {
      return r.Fail(absl::StrCat("logit_bias key '", it.key(), "' is not a token id"),
                    "logit_bias");
    }
    if (!it->is_number()) {
      return r.Fail(absl::StrCat("logit_bias['", it.key(), "'] must be a number"), "logit_bias");
    }
    (*s->mutable_logit_bias())[id] = it->get<float>();
  }
}

void ReadSampling(Reader& r, OpenAiRequest* out) {
  pagoda::v1::GenerateRequest& g = out->generate;
  pagoda::v1::SamplingParams& s = *g.mutable_sampling();
  s.set_temperature(static_cast<float>(r.Number("temperature").value_or(1.0)));
  if (std::optional<double> v = r.Number("top_p")) s.set_top_p(static_cast<float>(*v));
  // vLLM's top_k: -1 (and 0) = off.
  if (std::optional<int64_t> v = r.Integer("top_k", -1, std::numeric_limits<int32_t>::max())) {
    s.set_top_k(*v < 0 ? 0 : static_cast<int32_t>(*v));
  }
  if (std::optional<int64_t> v = r.Integer("seed", std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max())) {
    s.set_seed(static_cast<uint64_t>(*v));
  }
  if (std::optional<double> v = r.Number("min_p")) s.set_min_p(static_cast<float>(*v));
  if (std::optional<double> v = r.Number("presence_penalty")) {
    s.set_presence_penalty(static_cast<float>(*v));
  }
  if (std::optional<double> v = r.Number("frequency_penalty")) {
    s.set_frequency_penalty(static_cast<float>(*v));
  }
  if (std::optional<double> v = r.Number("repetition_penalty")) {
    s.set_repetition_penalty(static_cast<float>(*v));
  }
  ReadLogitBias(r, &s);
}

void ReadLengthsAndStops(Reader& r, OpenAiRequest* out) {
  pagoda::v1::GenerateRequest& g = out->generate;
  constexpr int64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  std::optional<int64_t> max_tokens = r.Integer("max_tokens", 1, kMaxU32);
  if (std::optional<int64_t> v = r.Integer("max_completion_tokens", 1, kMaxU32)) max_tokens = v;
  if (max_tokens) {
    g.set_max_tokens(static_cast<uint32_t>(*max_tokens));
  } else if (out->endpoint == Endpoint::kCompletions) {
    g.set_max_tokens(kDefaultCompletionTokens);
  }
  if (std::optional<int64_t> n = r.Integer("n", 1, kMaxU32)) g.set_n(static_cast<uint32_t>(*n));
  if (const json* stop = r.Get("stop")) {
    if (stop->is_string()) {
      g.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) return r.Fail("stop must be a string or an array of strings", "stop");
        g.add_stop(s.get<std::string>());
      }
    } else {
      return r.Fail("stop must be a string or an array of strings", "stop");
    }
  }
  if (const json* ids = r.Get("stop_token_ids")) {
    if (!ids->is_array())
      return r.Fail("stop_token_ids must be an array of token ids", "stop_token_ids");
    for (const json& id : *ids) {
      std::optional<int64_t> v =
          r.IntegerValue(id, "stop_token_ids", std::numeric_limits<int32_t>::min(),
                         std::numeric_limits<int32_t>::max());
      if (!v) return;
      g.add_stop_token_ids(static_cast<int32_t>(*v));
    }
  }
  g.set_ignore_eos(r.Bool("ignore_eos").value_or(false));
  if (std::optional<std::string> salt = r.String("cache_salt")) g.set_cache_salt(*salt);
}

void ReadStreaming(Reader& r, OpenAiRequest* out) {
  out->stream = r.Bool("stream").value_or(false);
  const json* options = r.Get("stream_options");
  if (options == nullptr || !r.ok()) return;
  if (!out->stream)
    return r.Fail("stream_options is only allowed with stream: true", "stream_options");
  if (!options->is_object()) return r.Fail("stream_options must be an object", "stream_options");
  for (auto it = options->begin(); it != options->end(); ++it) {
    if (it.key() == "include_usage" && it->is_boolean()) {
      out->include_usage = it->get<bool>();
    } else if (it.key() == "continuous_usage_stats" && IsFalse(*it)) {
    } else {
      return r.Fail(absl::StrCat("stream_options.", it.key(), " is not supported"),
                    "stream_options." + it.key());
    }
  }
}

void ReadLogprobs(Reader& r, OpenAiRequest* out) {
  if (out->endpoint == Endpoint::kCompletions) {
    // Completions: logprobs is the number of alternatives.
    if (std::optional<int64_t> v = r.Integer("logprobs", 0, kMaxTopLogprobs)) {
      out->top_logprobs = static_cast<int>(*v);
    }
  } else {
    const bool wanted = r.Bool("logprobs").value_or(false);
    std::optional<int64_t> top = r.Integer("top_logprobs", 0, kMaxTopLogprobs);
    if (top && !wanted && *top > 0) {
      return r.Fail("top_logprobs needs logprobs: true", "top_logprobs");
    }
    if (wanted) out->top_logprobs = static_cast<int>(top.value_or(0));
  }
  if (out->top_logprobs >= 0) {
    out->generate.set_logprobs(true);
    out->generate.set_top_logprobs(static_cast<uint32_t>(out->top_logprobs));
  }
}

// One constraint source: its field's name and the constraint it asks for.
struct ConstraintSource {
  std::string field;
  pagoda::v1::Constraint constraint;
};

// response_format: OpenAI's text, json_object and json_schema, and this server's extension
// types regex, choice and grammar (docs/structured-outputs.md).
void ReadResponseFormat(Reader& r, std::vector<ConstraintSource>* found) {
  const json* v = r.Get("response_format");
  if (v == nullptr || !r.ok() || v->is_null()) return;
  const std::string field = "response_format";
  if (!v->is_object() || !v->contains("type") || !(*v)["type"].is_string()) {
    return r.Fail("response_format must be an object with a string field 'type'", field);
  }
  const std::string type = (*v)["type"].get<std::string>();
  // Every other key must be one the type defines.
  auto only = [&](std::initializer_list<const char*> keys) {
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (it.key() == "type") continue;
      if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }) ==
          keys.end()) {
        r.Fail(absl::StrCat("response_format of type '", type, "' has no field '", it.key(), "'"),
               field);
        return false;
      }
    }
    return true;
  };
  auto string_field = [&](const char* key) -> std::optional<std::string> {
    if (!v->contains(key) || !(*v)[key].is_string()) {
      r.Fail(absl::StrCat("response_format.", key, " must be a string"), field);
      return std::nullopt;
    }
    return (*v)[key].get<std::string>();
  };
  ConstraintSource source{field, {}};
  if (type == "text") {
    only({});
    return;
  } else if (type == "json_object") {
    if (!only({})) return;
    source.constraint.set_json_object(true);
  } else if (type == "json_schema") {
    if (!only({"json_schema"})) return;
    const json* js = v->contains("json_schema") ? &(*v)["json_schema"] : nullptr;
    if (js == nullptr || !js->is_object()) {
      return r.Fail("response_format.json_schema must be an object with the schema in 'schema'",
                    field);
    }
    for (auto it = js->begin(); it != js->end(); ++it) {
      const std::string& k = it.key();
      if (k != "name" && k != "schema" && k != "strict" && k != "description") {
        return r.Fail(absl::StrCat("response_format.json_schema has no field '", k, "'"), field);
      }
    }
    if (js->contains("name") && !(*js)["name"].is_string()) {
      return r.Fail("response_format.json_schema.name must be a string", field);
    }
    if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null()) {
      return r.Fail("response_format.json_schema.strict must be a boolean", field);
    }
    // No schema: any JSON value (OpenAI requires one; an absent schema constrains nothing more).
    const json schema = js->contains("schema") ? (*js)["schema"] : json::object();
    if (!schema.is_object() && !schema.is_boolean()) {
      return r.Fail("response_format.json_schema.schema must be a JSON Schema object", field);
    }
    source.constraint.set_json_schema(schema.dump());
  } else if (type == "regex") {
    if (!only({"regex"})) return;
    std::optional<std::string> regex = string_field("regex");
    if (!regex) return;
    source.constraint.set_regex(*regex);
  } else if (type == "grammar") {
    if (!only({"grammar"})) return;
    std::optional<std::string> grammar = string_field("grammar");
    if (!grammar) return;
    source.constraint.set_grammar(*grammar);
  } else if (type == "choice") {
    if (!only({"choice"})) return;
    const json* choice = v->contains("choice") ? &(*v)["choice"] : nullptr;
    if (choice == nullptr || !choice->is_array()) {
      return r.Fail("response_format.choice must be an array of strings", field);
    }
    for (const json& option : *choice) {
      if (!option.is_string()) {
        return r.Fail("response_format.choice must be an array of strings", field);
      }
      source.constraint.mutable_choice()->add_options(option.get<std::string>());
    }
  } else {
    return r.Fail(absl::StrCat("response_format.type '", type,
                               "' is not one of text, json_object, json_schema, regex, choice, "
                               "grammar"),
                  field);
  }
  found->push_back(std::move(source));
}

// The other spellings users of vLLM (guided_*) and llama.cpp's server (grammar, json_schema)
// send; each is one constraint.
void ReadConstraintExtensions(Reader& r, std::vector<ConstraintSource>* found) {
  auto schema = [&](const char* name) {
    const json* v = r.Get(name);
    if (v == nullptr || !r.ok() || v->is_null()) return;
    ConstraintSource source{name, {}};
    if (v->is_string()) {
      source.constraint.set_json_schema(v->get<std::string>());
    } else if (v->is_object() || v->is_boolean()) {
      source.constraint.set_json_schema(v->dump());
    } else {
      return r.Fail(absl::StrCat(name, " must be a JSON Schema (an object, or its JSON text)"),
                    name);
    }
    found->push_back(std::move(source));
  };
  auto text = [&](const char* name, void (pagoda::v1::Constraint::*set)(const std::string&)) {
    std::optional<std::string> v = r.String(name);
    if (!v) return;
    ConstraintSource source{name, {}};
    (source.constraint.*set)(*v);
    found->push_back(std::move(source));
  };
  schema("guided_json");
  schema("json_schema");
  text("guided_regex", &pagoda::v1::Constraint::set_regex);
  text("guided_grammar", &pagoda::v1::Constraint::set_grammar);
  text("grammar", &pagoda::v1::Constraint::set_grammar);
  if (const json* v = r.Get("guided_choice"); v != nullptr && r.ok() && !v->is_null()) {
    ConstraintSource source{"guided_choice", {}};
    if (!v->is_array()) return r.Fail("guided_choice must be an array of strings", "guided_choice");
    for (const json& option : *v) {
      if (!option.is_string()) {
        return r.Fail("guided_choice must be an array of strings", "guided_choice");
      }
      source.constraint.mutable_choice()->add_options(option.get<std::string>());
    }
    found->push_back(std::move(source));
  }
}

// At most one constraint per request, whichever field sets it.
void ReadConstraint(Reader& r, OpenAiRequest* out) {
  std::vector<ConstraintSource> found;
  ReadResponseFormat(r, &found);
  ReadConstraintExtensions(r, &found);
  if (!r.ok() || found.empty()) return;
  if (found.size() > 1) {
    return r.Fail(absl::StrCat("both ", found[0].field, " and ", found[1].field,
                               " constrain the answer; set one of them"),
                  found[1].field);
  }
  *out->generate.mutable_constraint() = std::move(found[0].constraint);
}

void ReadEndpointFields(Reader& r, OpenAiRequest* out) {
  if (out->endpoint == Endpoint::kCompletions) {
    ReadPrompt(r, &out->generate);
    r.Unsupported("echo", IsFalse);
    r.Unsupported("suffix", IsEmpty);
    r.Unsupported(
        "best_of", [](const json& v) { return v == 1; }, "only best_of = n = 1");
  } else {
    ReadMessages(r, out);
    out->add_generation_prompt = r.Bool("add_generation_prompt").value_or(true);
    r.Unsupported("continue_final_message", IsFalse);
    r.Unsupported("echo", IsFalse);
    ReadTools(r, out);
    r.Unsupported("functions", IsEmpty);
    r.Unsupported("function_call", IsNoTool);
    r.Unsupported("chat_template", IsEmpty, "the server's template is used");
    r.Unsupported("chat_template_kwargs", IsEmpty);
    r.Unsupported("modalities", [](const json& v) { return v == json::array({"text"}); });
    r.Unsupported("audio", IsEmpty);
    r.Unsupported("prediction", IsEmpty);
    r.Unsupported("reasoning_effort", IsEmpty);
    r.Unsupported("web_search_options", IsEmpty);
    r.Ignore({"documents"});
  }
}

}  // namespace

std::optional<ApiError> ParseOpenAiRequest(Endpoint endpoint, std::string_view body,
                                           OpenAiRequest* out) {
  if (NestingDepth(body) > kMaxJsonDepth) {
    return BadRequest(absl::StrFormat("the body nests deeper than %d levels", kMaxJsonDepth));
  }
  json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return BadRequest("the body is not valid JSON");
  if (!object.is_object()) return BadRequest("the body must be a JSON object");
  *out = OpenAiRequest{};
  out->endpoint = endpoint;
  Reader r(object);
  if (std::optional<std::string> model = r.String("model")) out->model = *model;
  ReadEndpointFields(r, out);
  ReadStreaming(r, out);
  ReadSampling(r, out);
  ReadLengthsAndStops(r, out);
  ReadLogprobs(r, out);
  ReadConstraint(r, out);
  r.Unsupported("min_tokens", IsZero);
  r.Unsupported("include_stop_str_in_output", IsFalse);
  r.Unsupported("prompt_logprobs", IsZero);
  r.Unsupported("use_beam_search", IsFalse);
  r.Unsupported("length_penalty", [](const json& v) { return v == 1; });
  r.Unsupported("priority", IsZero);
  r.Unsupported("truncate_prompt_tokens", [](const json&) { return false; });
  r.Unsupported("skip_special_tokens", [](const json& v) { return v == true; });
  r.Ignore(
      {"user", "metadata", "store", "service_tier", "spaces_between_special_tokens", "request_id"});
  r.RefuseUnknown();
  if (r.error()) return r.error();
  return std::nullopt;
}

}  // namespace pagoda::scheduler::http
