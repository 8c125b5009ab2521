#include "common/model_config.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::common {
namespace {

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
constexpr char kArchitectures[] = "\"llama\", \"qwen2\", \"qwen3\"";

// Reads a required positive integer key.
absl::StatusOr<int> RequiredInt(const GgufFile& file, const std::string& key) {
  if (!file.HasKey(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata lacks required key '", key, "'"));
  }
  auto v = file.GetInt(key);
  if (!v) {
    return absl::InvalidArgumentError(absl::StrCat("model metadata '", key,
                                                   "' must be an integer, found ",
                                                   GgufValueTypeName(*file.GetType(key))));
  }
  if (*v <= 0 || *v > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata '", key, "' = ", *v, " must be in [1, ", kMaxSize, "]"));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<int> OptionalInt(const GgufFile& file, const std::string& key, int fallback) {
  if (!file.HasKey(key)) return fallback;
  return RequiredInt(file, key);
}

absl::StatusOr<float> OptionalFloat(const GgufFile& file, const std::string& key, float fallback) {
  if (!file.HasKey(key)) return fallback;
  auto v = file.GetFloat(key);
  // Checked after narrowing: an f64 of 1e300 is finite but becomes inf as a float, and 1e-300
  // becomes 0.
  const float f = v ? static_cast<float>(*v) : 0.0f;
  if (!v || !std::isfinite(f) || f <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata '", key, "' must be a positive finite float"));
  }
  return f;
}

absl::StatusOr<int> ReadVocabSize(const GgufFile& file, int dim) {
  if (const GgufTensor* t = file.FindTensor("token_embd.weight"); t != nullptr) {
    if (t->dims.size() != 2 || t->dims[0] != dim || t->dims[1] > kMaxSize) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor token_embd.weight must have dims [%d, vocab], found %d dims starting %d", dim,
          t->dims.size(), t->dims[0]));
    }
    return static_cast<int>(t->dims[1]);
  }
  if (auto n = file.GetArrayLength("tokenizer.ggml.tokens"); n && *n > 0 && *n <= kMaxSize) {
    return static_cast<int>(*n);
  }
  return absl::InvalidArgumentError(
      "cannot determine the vocabulary size: no token_embd.weight tensor and no "
      "tokenizer.ggml.tokens array");
}

// Llama 3.1's RoPE frequency scaling, from <arch>.rope.scaling.* (type "llama3"); absent or
// type "none" leaves rope_scaling_factor 0.
absl::Status ReadRopeScaling(const GgufFile& file, const std::string& k, ModelConfig& c) {
  const std::string type_key = k + "rope.scaling.type";
  if (!file.HasKey(type_key)) return absl::OkStatus();
  const std::optional<std::string> type = file.GetString(type_key);
  if (type == "none") return absl::OkStatus();
  if (type != "llama3") {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata '", type_key,
                     "' must be \"llama3\" or \"none\" (other RoPE scalings "
                     "are not supported)"));
  }
  ASSIGN_OR_RETURN(c.rope_scaling_factor, OptionalFloat(file, k + "rope.scaling.factor", 8.0f));
  ASSIGN_OR_RETURN(c.rope_low_freq_factor,
                   OptionalFloat(file, k + "rope.scaling.low_freq_factor", 1.0f));
  ASSIGN_OR_RETURN(c.rope_high_freq_factor,
                   OptionalFloat(file, k + "rope.scaling.high_freq_factor", 4.0f));
  ASSIGN_OR_RETURN(c.rope_original_context,
                   OptionalInt(file, k + "rope.scaling.original_context_length", 8192));
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model metadata '", k, "rope.scaling.high_freq_factor' must exceed low_freq_factor"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file) {
  ModelConfig c;
  auto arch = file.GetString("general.architecture");
  if (!arch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model metadata lacks the string general.architecture (supported: ", kArchitectures, ")"));
  }
  if (*arch != "llama" && *arch != "qwen2" && *arch != "qwen3") {
    return absl::InvalidArgumentError(
        absl::StrCat("model architecture is \"", *arch, "\"; supported: ", kArchitectures));
  }
  c.architecture = *arch;
  const std::string k = *arch + ".";  // every hyperparameter key is prefixed by the architecture
  c.name = file.GetString("general.name").value_or("");
  ASSIGN_OR_RETURN(c.context_length, RequiredInt(file, k + "context_length"));
  ASSIGN_OR_RETURN(c.dim, RequiredInt(file, k + "embedding_length"));
  ASSIGN_OR_RETURN(c.n_layers, RequiredInt(file, k + "block_count"));
  ASSIGN_OR_RETURN(c.ffn_dim, RequiredInt(file, k + "feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_heads, RequiredInt(file, k + "attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads, OptionalInt(file, k + "attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.rope_base, OptionalFloat(file, k + "rope.freq_base", 10000.0f));
  ASSIGN_OR_RETURN(c.rms_eps, OptionalFloat(file, k + "attention.layer_norm_rms_epsilon", 1e-5f));
  RETURN_IF_ERROR(ReadRopeScaling(file, k, c));
  const bool explicit_head_dim = file.HasKey(k + "attention.key_length");
  if (explicit_head_dim) {
    ASSIGN_OR_RETURN(c.head_dim, RequiredInt(file, k + "attention.key_length"));
    ASSIGN_OR_RETURN(int v_dim, OptionalInt(file, k + "attention.value_length", c.head_dim));
    if (v_dim != c.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(k, "attention.value_length ", v_dim,
                                                     " differs from key_length ", c.head_dim,
                                                     "; only equal lengths are supported"));
    }
  } else {
    if (c.dim % c.n_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding_length ", c.dim, " is not divisible by head_count ", c.n_heads));
    }
    c.head_dim = c.dim / c.n_heads;
  }
  if (file.HasKey(k + "rope.dimension_count")) {
    ASSIGN_OR_RETURN(int rope_dims, RequiredInt(file, k + "rope.dimension_count"));
    if (rope_dims != c.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(k, "rope.dimension_count ", rope_dims, " differs from head_dim ", c.head_dim,
                       "; partial rotary embeddings are not supported"));
    }
  }
  ASSIGN_OR_RETURN(c.vocab_size, ReadVocabSize(file, c.dim));
  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  const std::pair<const char*, int> sizes[] = {
      {"n_layers", c.n_layers},     {"dim", c.dim},
      {"n_heads", c.n_heads},       {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},     {"ffn_dim", c.ffn_dim},
      {"vocab_size", c.vocab_size}, {"context_length", c.context_length}};
  for (const auto& [what, v] : sizes) {
    if (v <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("model ", what, " = ", v, " must be positive"));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_count ", c.n_heads, " is not divisible by head_count_kv ", c.n_kv_heads));
  }
  if (int64_t{c.n_heads} * c.head_dim > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_count ", c.n_heads, " x head_dim ", c.head_dim, " exceeds ", kMaxSize));
  }
  if (c.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", c.head_dim, " exceeds the supported maximum ", kMaxHeadDim));
  }
  if (!(c.rms_eps > 0) || !(c.rope_base > 0)) {
    return absl::InvalidArgumentError("rms_eps and rope_base must be positive");
  }
  return absl::OkStatus();
}

std::string DescribeModelConfig(const ModelConfig& c) {
  return absl::StrFormat(
      "%s '%s': %d layers, dim %d, heads %d/%d (head_dim %d), ffn %d, vocab %d, context %d, "
      "rms_eps %g, rope_base %g",
      c.architecture, c.name, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim,
      c.vocab_size, c.context_length, c.rms_eps, c.rope_base);
}

}  // namespace pagoda::common
