#include "common/model_config.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::common {
namespace {

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

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

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file) {
  ModelConfig c;
  auto arch = file.GetString("general.architecture");
  if (!arch) {
    return absl::InvalidArgumentError(
        "model metadata lacks the string general.architecture (supported: \"llama\")");
  }
  if (*arch != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat("model architecture is \"", *arch, "\"; only \"llama\" is supported"));
  }
  c.architecture = *arch;
  c.name = file.GetString("general.name").value_or("");
  ASSIGN_OR_RETURN(c.context_length, RequiredInt(file, "llama.context_length"));
  ASSIGN_OR_RETURN(c.dim, RequiredInt(file, "llama.embedding_length"));
  ASSIGN_OR_RETURN(c.n_layers, RequiredInt(file, "llama.block_count"));
  ASSIGN_OR_RETURN(c.ffn_dim, RequiredInt(file, "llama.feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_heads, RequiredInt(file, "llama.attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads, OptionalInt(file, "llama.attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.rope_base, OptionalFloat(file, "llama.rope.freq_base", 10000.0f));
  ASSIGN_OR_RETURN(c.rms_eps, OptionalFloat(file, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
  const bool explicit_head_dim = file.HasKey("llama.attention.key_length");
  if (explicit_head_dim) {
    ASSIGN_OR_RETURN(c.head_dim, RequiredInt(file, "llama.attention.key_length"));
    ASSIGN_OR_RETURN(int v_dim, OptionalInt(file, "llama.attention.value_length", c.head_dim));
    if (v_dim != c.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat("llama.attention.value_length ", v_dim,
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
  if (file.HasKey("llama.rope.dimension_count")) {
    ASSIGN_OR_RETURN(int rope_dims, RequiredInt(file, "llama.rope.dimension_count"));
    if (rope_dims != c.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama.rope.dimension_count ", rope_dims, " differs from head_dim ",
                       c.head_dim, "; partial rotary embeddings are not supported"));
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
