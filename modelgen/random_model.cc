#include "modelgen/random_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "modelgen/quantize.h"
#include "modelgen/synthetic_vocab.h"

namespace pagoda::modelgen {

using common::GgmlType;
using common::GgmlTypeName;
using common::GgmlTypeSizeOf;
using common::kMaxHeadDim;

namespace {

constexpr int kMaxDimension = 1 << 16;

// Counter-free normal generator: splitmix64 stream + Box-Muller.
class NormalStream {
 public:
  NormalStream(uint64_t seed, const std::string& name) : state_(seed) {
    for (unsigned char c : name) state_ = (state_ ^ c) * 0x100000001b3ull;
  }
  float Next() {
    const double u1 = (static_cast<double>(Bits() >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(Bits() >> 11) * 0x1p-53;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t Bits() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

// dims innermost first: [n_in, n_out] for matrices, [n] for vectors.
absl::Status AddRandom(GgufWriter& w, const RandomModelOptions& o, const std::string& name,
                       std::vector<int64_t> dims, float mean, float stddev, GgmlType type) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  NormalStream rng(o.seed, name);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = mean + stddev * rng.Next();
  return w.AddFloatTensor(name, dims, type, values);
}

void AddMetadata(GgufWriter& w, const RandomModelOptions& o) {
  const std::string k = o.architecture + ".";  // llama.*, qwen2.*, qwen3.*
  w.AddString("general.architecture", o.architecture);
  w.AddString("general.name", o.name);
  w.AddUint32(k + "context_length", static_cast<uint32_t>(o.context_length));
  w.AddUint32(k + "embedding_length", static_cast<uint32_t>(o.dim));
  w.AddUint32(k + "block_count", static_cast<uint32_t>(o.n_layers));
  w.AddUint32(k + "feed_forward_length", static_cast<uint32_t>(o.ffn_dim));
  w.AddUint32(k + "attention.head_count", static_cast<uint32_t>(o.n_heads));
  w.AddUint32(k + "attention.head_count_kv", static_cast<uint32_t>(o.n_kv_heads));
  w.AddUint32(k + "rope.dimension_count", static_cast<uint32_t>(o.dim / o.n_heads));
  w.AddFloat32(k + "rope.freq_base", o.rope_base);
  w.AddFloat32(k + "attention.layer_norm_rms_epsilon", o.rms_eps);
  if (o.rope_scaling_factor > 0) {  // Llama 3.1's, with a short original context to matter
    w.AddString(k + "rope.scaling.type", "llama3");
    w.AddFloat32(k + "rope.scaling.factor", o.rope_scaling_factor);
    w.AddFloat32(k + "rope.scaling.low_freq_factor", 1.0f);
    w.AddFloat32(k + "rope.scaling.high_freq_factor", 4.0f);
    w.AddUint32(k + "rope.scaling.original_context_length", 64);
  }
}

// qwen2's Q/K/V biases and qwen3's per-head Q/K norm weights of layer prefix `p`.
absl::Status AddArchitectureTensors(GgufWriter& w, const RandomModelOptions& o,
                                    const std::string& p) {
  const int64_t head_dim = o.dim / o.n_heads, kv_dim = head_dim * o.n_kv_heads;
  if (o.architecture == "qwen2") {
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_q.bias", {o.dim}, 0.0f, 0.5f, GgmlType::F32));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_k.bias", {kv_dim}, 0.0f, 0.5f, GgmlType::F32));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_v.bias", {kv_dim}, 0.0f, 0.5f, GgmlType::F32));
  } else if (o.architecture == "qwen3") {
    RETURN_IF_ERROR(
        AddRandom(w, o, p + "attn_q_norm.weight", {head_dim}, 1.0f, 0.1f, GgmlType::F32));
    RETURN_IF_ERROR(
        AddRandom(w, o, p + "attn_k_norm.weight", {head_dim}, 1.0f, 0.1f, GgmlType::F32));
  }
  return absl::OkStatus();
}

}  // namespace

void AddSyntheticTokenizer(GgufWriter& w, const SyntheticVocab& vocab) {
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", vocab.tokens);
  w.AddFloat32Array("tokenizer.ggml.scores", vocab.scores);
  w.AddInt32Array("tokenizer.ggml.token_type", vocab.token_types);
  w.AddUint32("tokenizer.ggml.bos_token_id", kSyntheticBosId);
  w.AddUint32("tokenizer.ggml.eos_token_id", kSyntheticEosId);
  w.AddUint32("tokenizer.ggml.unknown_token_id", kSyntheticUnkId);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddBool("tokenizer.ggml.add_eos_token", false);
}

absl::Status ValidateRandomModelOptions(const RandomModelOptions& o) {
  const std::pair<const char*, int> sizes[] = {
      {"layers", o.n_layers},     {"dim", o.dim},         {"heads", o.n_heads},
      {"kv-heads", o.n_kv_heads}, {"ffn-dim", o.ffn_dim}, {"context", o.context_length}};
  for (const auto& [what, v] : sizes) {
    if (v <= 0 || v > kMaxDimension) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " = ", v, " must be in [1, ", kMaxDimension, "]"));
    }
  }
  if (o.dim % o.n_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heads ", o.n_heads, " must divide dim ", o.dim));
  }
  if (o.n_heads % o.n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv-heads ", o.n_kv_heads, " must divide heads ", o.n_heads));
  }
  if (o.dim / o.n_heads > kMaxHeadDim || (o.dim / o.n_heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim dim/heads = ", o.dim / o.n_heads,
                                                   " must be even and at most ", kMaxHeadDim));
  }
  if (o.vocab_size < kMinSyntheticVocab || o.vocab_size > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab ", o.vocab_size, " must be in [", kMinSyntheticVocab, ", 1000000]"));
  }
  const bool quantized = CanQuantize(o.dtype);
  if (o.dtype != GgmlType::F32 && o.dtype != GgmlType::F16 && o.dtype != GgmlType::BF16 &&
      !quantized) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", GgmlTypeName(o.dtype),
                     " unsupported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"));
  }
  if (quantized) {
    const int64_t block = GgmlTypeSizeOf(o.k_m_mix ? GgmlType::Q6_K : o.dtype)->block_elems;
    const int64_t need = std::max(block, GgmlTypeSizeOf(o.dtype)->block_elems);
    if (o.dim % need != 0 || o.ffn_dim % need != 0) {
      return absl::InvalidArgumentError(absl::StrCat("dtype ", GgmlTypeName(o.dtype), ": dim ",
                                                     o.dim, " and ffn-dim ", o.ffn_dim,
                                                     " must be multiples of ", need));
    }
  }
  if (o.k_m_mix && o.dtype != GgmlType::Q4_K && o.dtype != GgmlType::Q5_K) {
    return absl::InvalidArgumentError("the K_M mix applies to Q4_K and Q5_K only");
  }
  if (o.architecture != "llama" && o.architecture != "qwen2" && o.architecture != "qwen3") {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture \"", o.architecture, "\" unsupported (supported: llama, qwen2, qwen3)"));
  }
  if (!(o.rope_scaling_factor >= 0)) {
    return absl::InvalidArgumentError("rope scaling factor must be >= 0 (0: none)");
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufWriter> BuildRandomModel(const RandomModelOptions& o) {
  RETURN_IF_ERROR(ValidateRandomModelOptions(o));
  GgufWriter w;
  AddMetadata(w, o);
  if (o.write_tokenizer) {
    o.write_tokenizer(w);
  } else {
    ASSIGN_OR_RETURN(SyntheticVocab vocab, BuildSyntheticVocab(o.vocab_size, o.seed));
    AddSyntheticTokenizer(w, vocab);
  }
  const int64_t dim = o.dim, ffn = o.ffn_dim, vocab_n = o.vocab_size;
  const int64_t kv_dim = static_cast<int64_t>(o.dim / o.n_heads) * o.n_kv_heads;
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(dim));
  const float s_ffn = 1.0f / std::sqrt(static_cast<float>(ffn));
  const GgmlType t = o.dtype;
  const GgmlType more_bits = o.k_m_mix ? GgmlType::Q6_K : t;  // llama.cpp's *_K_M upgrades
  RETURN_IF_ERROR(AddRandom(w, o, "token_embd.weight", {dim, vocab_n}, 0.0f, 1.0f, t));
  RETURN_IF_ERROR(AddRandom(w, o, "output_norm.weight", {dim}, 1.0f, 0.1f, GgmlType::F32));
  if (!o.tie_output) {
    RETURN_IF_ERROR(AddRandom(w, o, "output.weight", {dim, vocab_n}, 0.0f, s_dim, more_bits));
  }
  for (int l = 0; l < o.n_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    const int n = o.n_layers;
    const bool upgrade = l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
    const GgmlType tv = upgrade ? more_bits : t;
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_norm.weight", {dim}, 1.0f, 0.1f, GgmlType::F32));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_q.weight", {dim, dim}, 0.0f, s_dim, t));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_k.weight", {dim, kv_dim}, 0.0f, s_dim, t));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_v.weight", {dim, kv_dim}, 0.0f, s_dim, tv));
    RETURN_IF_ERROR(AddRandom(w, o, p + "attn_output.weight", {dim, dim}, 0.0f, s_dim, t));
    RETURN_IF_ERROR(AddRandom(w, o, p + "ffn_norm.weight", {dim}, 1.0f, 0.1f, GgmlType::F32));
    RETURN_IF_ERROR(AddRandom(w, o, p + "ffn_gate.weight", {dim, ffn}, 0.0f, s_dim, t));
    RETURN_IF_ERROR(AddRandom(w, o, p + "ffn_up.weight", {dim, ffn}, 0.0f, s_dim, t));
    RETURN_IF_ERROR(AddRandom(w, o, p + "ffn_down.weight", {ffn, dim}, 0.0f, s_ffn, tv));
    RETURN_IF_ERROR(AddArchitectureTensors(w, o, p));
  }
  return w;
}

absl::Status WriteRandomModel(const RandomModelOptions& options, const std::string& path) {
  ASSIGN_OR_RETURN(GgufWriter w, BuildRandomModel(options));
  return w.WriteFile(path);
}

}  // namespace pagoda::modelgen
