#include "tools/hf_tokenizer/hf_tokenizer.h"

#include <array>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/pre_tokenizer.h"

namespace pagoda::tools {
namespace {

using nlohmann::json;
using scheduler::text::PreTokenizerKind;

constexpr int64_t kMaxIds = int64_t{1} << 22;
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;
constexpr int32_t kTypeUnused = 5;

absl::Status Unsupported(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", what));
}

// The ByteLevel pre-tokenizer and the regex of a Split before it, from "pre_tokenizer".
struct PreTokenizerJson {
  bool byte_level = false;
  bool byte_level_regex = false;  // ByteLevel's own GPT-2 regex (use_regex)
  std::optional<std::string> split_regex;
};

absl::StatusOr<PreTokenizerJson> ReadPreTokenizer(const json& pre) {
  PreTokenizerJson out;
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const json& step : pre.at("pretokenizers")) steps.push_back(step);
  } else if (pre.is_object()) {
    steps.push_back(pre);
  }
  for (const json& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "ByteLevel") {
      out.byte_level = true;
      out.byte_level_regex = step.value("use_regex", true);
      if (step.value("add_prefix_space", false)) return Unsupported("ByteLevel add_prefix_space");
    } else if (type == "Split" && !out.split_regex) {
      if (!step.at("pattern").contains("Regex") || step.value("behavior", "") != "Isolated" ||
          step.value("invert", false)) {
        return Unsupported("a Split pre-tokenizer other than an isolating regex");
      }
      out.split_regex = step.at("pattern").at("Regex").get<std::string>();
    } else {
      return Unsupported(absl::StrCat("pre-tokenizer step \"", type, "\""));
    }
  }
  if (!out.byte_level) return Unsupported("only byte-level BPE (a ByteLevel pre-tokenizer)");
  return out;
}

// The GGUF pre-tokenizer name for the JSON's split, checked against the normalizer and
// ignore_merges that the pre-tokenizer implies.
absl::StatusOr<PreTokenizerKind> DetectPreTokenizer(const json& root) {
  ASSIGN_OR_RETURN(PreTokenizerJson pre, ReadPreTokenizer(root.at("pre_tokenizer")));
  std::optional<PreTokenizerKind> kind;
  if (pre.split_regex && !pre.byte_level_regex) {
    for (PreTokenizerKind k :
         {PreTokenizerKind::kGpt2, PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2}) {
      if (scheduler::text::PreTokenizerPattern(k) == *pre.split_regex) kind = k;
    }
  } else if (!pre.split_regex && pre.byte_level_regex) {
    kind = PreTokenizerKind::kGpt2;
  }
  if (!kind) {
    return Unsupported(absl::StrCat("the pre-tokenizer regex ",
                                    pre.split_regex ? "\"" + *pre.split_regex + "\"" : "(none)",
                                    " is none of gpt2, llama-bpe, qwen2"));
  }
  const json& normalizer = root.at("normalizer");
  const bool nfc = normalizer.is_object() && normalizer.value("type", "") == "NFC";
  if (!normalizer.is_null() && !nfc) return Unsupported("a normalizer other than NFC");
  if (nfc != (*kind == PreTokenizerKind::kQwen2)) {
    return Unsupported("NFC normalization goes with the qwen2 pre-tokenizer only");
  }
  const bool ignore_merges = root.at("model").value("ignore_merges", false);
  if (ignore_merges != (*kind == PreTokenizerKind::kLlama3)) {
    return Unsupported("ignore_merges goes with the llama-bpe pre-tokenizer only");
  }
  return *kind;
}

absl::Status CheckModel(const json& model) {
  if (model.value("type", "") != "BPE") return Unsupported("model type is not BPE");
  if (model.value("byte_fallback", false)) return Unsupported("BPE byte_fallback");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "") {
      return Unsupported(absl::StrCat("BPE ", key));
    }
  }
  return absl::OkStatus();
}

absl::Status SetToken(HfTokenizer& t, int64_t id, const std::string& piece, int32_t type) {
  if (id < 0 || id >= kMaxIds) {
    return Unsupported(
        absl::StrCat("token \"", piece, "\" has id ", id, "; ids must be in [0, ", kMaxIds, ")"));
  }
  if (static_cast<size_t>(id) >= t.tokens.size()) {
    t.tokens.resize(id + 1);
    t.token_types.resize(id + 1, -1);
  }
  t.tokens[id] = piece;
  t.token_types[id] = type;
  return absl::OkStatus();
}

absl::Status ReadTokens(const json& root, HfTokenizer& t) {
  for (const auto& [piece, id] : root.at("model").at("vocab").items()) {
    RETURN_IF_ERROR(SetToken(t, id.get<int64_t>(), piece, kTypeNormal));
  }
  for (const json& added : root.at("added_tokens")) {
    const bool special = added.value("special", false);
    RETURN_IF_ERROR(SetToken(t, added.at("id").get<int64_t>(),
                             added.at("content").get<std::string>(),
                             special ? kTypeControl : kTypeUserDefined));
  }
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    if (t.token_types[id] >= 0) continue;
    t.tokens[id] = absl::StrCat("[PAD", id, "]");
    t.token_types[id] = kTypeUnused;
  }
  for (const json& merge : root.at("model").at("merges")) {
    if (merge.is_string()) {
      t.merges.push_back(merge.get<std::string>());
    } else {
      t.merges.push_back(
          absl::StrCat(merge.at(0).get<std::string>(), " ", merge.at(1).get<std::string>()));
    }
  }
  return absl::OkStatus();
}

// A token of tokenizer_config.json: a string, an AddedToken object, or null.
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::nullopt;
}

absl::Status ReadConfig(const json& config, HfTokenizer& t) {
  absl::flat_hash_map<std::string, int32_t> ids;
  for (size_t id = 0; id < t.tokens.size(); ++id) ids.try_emplace(t.tokens[id], id);
  auto id_of = [&](const std::optional<std::string>& piece,
                   const char* key) -> absl::StatusOr<int32_t> {
    if (!piece) return -1;
    auto it = ids.find(*piece);
    if (it == ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: ", key, " \"", *piece, "\" is not a token"));
    }
    return it->second;
  };
  ASSIGN_OR_RETURN(t.bos_id, id_of(ConfigToken(config, "bos_token"), "bos_token"));
  ASSIGN_OR_RETURN(t.eos_id, id_of(ConfigToken(config, "eos_token"), "eos_token"));
  ASSIGN_OR_RETURN(t.pad_id, id_of(ConfigToken(config, "pad_token"), "pad_token"));
  for (const char* eot :
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    auto it = ids.find(eot);
    if (it != ids.end() && it->second != t.eos_id) {
      t.eot_id = it->second;
      break;
    }
  }
  if (auto it = ids.find("<|eom_id|>"); it != ids.end()) t.eom_id = it->second;
  const json& add_bos = config.contains("add_bos_token") ? config.at("add_bos_token") : json();
  t.add_bos = add_bos.is_boolean() ? add_bos.get<bool>() : t.bos_id >= 0;
  t.add_eos = config.value("add_eos_token", false);
  if (config.contains("chat_template")) {
    const json& tmpl = config.at("chat_template");
    if (tmpl.is_string()) {
      t.chat_template = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {  // named templates: the default one
      for (const json& named : tmpl) {
        if (named.value("name", "") == "default") {
          t.chat_template = named.at("template").get<std::string>();
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

absl::StatusOr<HfTokenizer> ImportHfTokenizer(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json) {
  const json root = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Unsupported("not a JSON object");
  json config = json::object();
  if (!tokenizer_config_json.empty()) {
    config = json::parse(tokenizer_config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
    }
  }
  HfTokenizer t;
  try {
    RETURN_IF_ERROR(CheckModel(root.at("model")));
    ASSIGN_OR_RETURN(const PreTokenizerKind kind, DetectPreTokenizer(root));
    t.pre = std::string(scheduler::text::PreTokenizerName(kind));
    RETURN_IF_ERROR(ReadTokens(root, t));
    RETURN_IF_ERROR(ReadConfig(config, t));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer JSON has an unexpected shape: ", e.what()));
  }
  if (t.tokens.empty()) return Unsupported("the vocabulary is empty");
  return t;
}

absl::StatusOr<HfTokenizer> ImportHfTokenizerFiles(const std::string& tokenizer_json_path,
                                                   const std::string& config_path) {
  ASSIGN_OR_RETURN(const std::string tokenizer_json, ReadFile(tokenizer_json_path));
  std::string config_json;
  if (!config_path.empty()) {
    ASSIGN_OR_RETURN(config_json, ReadFile(config_path));
  }
  return ImportHfTokenizer(tokenizer_json, config_json);
}

void AddHfTokenizerMetadata(const HfTokenizer& t, modelgen::GgufWriter& w) {
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", t.pre);
  w.AddStringArray("tokenizer.ggml.tokens", t.tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", t.token_types);
  w.AddStringArray("tokenizer.ggml.merges", t.merges);
  const std::array<std::pair<const char*, int32_t>, 5> ids = {{
      {"tokenizer.ggml.bos_token_id", t.bos_id},
      {"tokenizer.ggml.eos_token_id", t.eos_id},
      {"tokenizer.ggml.eot_token_id", t.eot_id},
      {"tokenizer.ggml.eom_token_id", t.eom_id},
      {"tokenizer.ggml.padding_token_id", t.pad_id},
  }};
  for (const auto& [key, id] : ids) {
    if (id >= 0) w.AddUint32(key, static_cast<uint32_t>(id));
  }
  w.AddBool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (!t.chat_template.empty()) w.AddString("tokenizer.chat_template", t.chat_template);
}

}  // namespace pagoda::tools
