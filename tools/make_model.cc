// pagoda-make-model: writes a llama GGUF model with seeded random weights and a synthetic
// tokenizer (or a real one imported from a Hugging Face tokenizer.json), for tests and
// benchmarks of shapes no trained model has.
//
//   pagoda-make-model --output /tmp/m.gguf --layers 4 --dim 256 --heads 8 --kv-heads 4
//   pagoda-make-model --output /tmp/q.gguf --dim 64 --heads 4 --kv-heads 2 --ffn-dim 128
//     --tokenizer-json tokenizer.json --tokenizer-config tokenizer_config.json
#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "common/flags.h"
#include "common/gguf_reader.h"
#include "modelgen/random_model.h"
#include "tools/hf_tokenizer/hf_tokenizer.h"

ABSL_FLAG(std::string, output, "", "path of the GGUF file to write (required)");
ABSL_FLAG(int, layers, 4, "transformer blocks");
ABSL_FLAG(int, dim, 256, "embedding width");
ABSL_FLAG(int, heads, 8, "query heads (must divide dim)");
ABSL_FLAG(int, kv_heads, 4, "key/value heads (must divide heads)");
ABSL_FLAG(int, ffn_dim, 688, "feed-forward width");
ABSL_FLAG(int, vocab, 2048, "vocabulary size (>= 300)");
ABSL_FLAG(int, context, 2048, "context length");
ABSL_FLAG(uint64_t, seed, 1, "random seed for weights and vocabulary");
ABSL_FLAG(std::string, dtype, "f32",
          "matrix storage type: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, or q4_k_m / q5_k_m "
          "(llama.cpp's mix: Q6_K for output and some attn_v/ffn_down)");
ABSL_FLAG(std::string, name, "pagoda-random", "general.name");
ABSL_FLAG(bool, tie_output, false, "omit output.weight (classifier tied to the embedding)");
ABSL_FLAG(std::string, arch, "llama",
          "architecture: llama, qwen2 (Q/K/V biases) or qwen3 (per-head Q/K RMSNorm)");
ABSL_FLAG(float, rope_scaling, 0.0f,
          "Llama 3.1 RoPE frequency scaling factor (0: none; original context 64)");
ABSL_FLAG(std::string, tokenizer_json, "",
          "a Hugging Face tokenizer.json (byte-level BPE) to use instead of the synthetic "
          "vocabulary; --vocab is then the tokenizer's size");
ABSL_FLAG(std::string, tokenizer_config, "",
          "its tokenizer_config.json (special tokens, add_bos/add_eos, chat_template); optional");

namespace {

bool ParseDtype(std::string text, pagoda::modelgen::RandomModelOptions* o) {
  using pagoda::common::GgmlType;
  absl::AsciiStrToLower(&text);
  o->k_m_mix = text == "q4_k_m" || text == "q5_k_m";
  if (o->k_m_mix) text.resize(4);
  static constexpr std::pair<const char*, GgmlType> kTypes[] = {
      {"f32", GgmlType::F32},   {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16},
      {"q8_0", GgmlType::Q8_0}, {"q4_0", GgmlType::Q4_0}, {"q4_k", GgmlType::Q4_K},
      {"q5_k", GgmlType::Q5_K}, {"q6_k", GgmlType::Q6_K}};
  for (const auto& [name, type] : kTypes) {
    if (text == name) {
      o->dtype = type;
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::common::ParseFlags(argc, argv);  // accepts --kv-heads as well as --kv_heads
  pagoda::modelgen::RandomModelOptions o;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) {
    std::fprintf(stderr, "pagoda-make-model: --output is required\n");
    return 2;
  }
  o.n_layers = absl::GetFlag(FLAGS_layers);
  o.dim = absl::GetFlag(FLAGS_dim);
  o.n_heads = absl::GetFlag(FLAGS_heads);
  o.n_kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.ffn_dim = absl::GetFlag(FLAGS_ffn_dim);
  o.vocab_size = absl::GetFlag(FLAGS_vocab);
  o.context_length = absl::GetFlag(FLAGS_context);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.name = absl::GetFlag(FLAGS_name);
  o.tie_output = absl::GetFlag(FLAGS_tie_output);
  o.architecture = absl::GetFlag(FLAGS_arch);
  o.rope_scaling_factor = absl::GetFlag(FLAGS_rope_scaling);
  if (!ParseDtype(absl::GetFlag(FLAGS_dtype), &o)) {
    std::fprintf(stderr,
                 "pagoda-make-model: --dtype '%s' unsupported (supported: f32, f16, bf16, q8_0, "
                 "q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m)\n",
                 absl::GetFlag(FLAGS_dtype).c_str());
    return 2;
  }
  if (const std::string json = absl::GetFlag(FLAGS_tokenizer_json); !json.empty()) {
    auto tokenizer =
        pagoda::tools::ImportHfTokenizerFiles(json, absl::GetFlag(FLAGS_tokenizer_config));
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "pagoda-make-model: %s\n", tokenizer.status().ToString().c_str());
      return 2;
    }
    o.vocab_size = static_cast<int>(tokenizer->tokens.size());
    o.write_tokenizer = [t = *std::move(tokenizer)](pagoda::modelgen::GgufWriter& w) {
      pagoda::tools::AddHfTokenizerMetadata(t, w);
    };
  } else if (!absl::GetFlag(FLAGS_tokenizer_config).empty()) {
    std::fprintf(stderr, "pagoda-make-model: --tokenizer_config needs --tokenizer_json\n");
    return 2;
  }
  if (auto s = pagoda::modelgen::ValidateRandomModelOptions(o); !s.ok()) {
    std::fprintf(stderr, "pagoda-make-model: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (auto s = pagoda::modelgen::WriteRandomModel(o, output); !s.ok()) {
    std::fprintf(stderr, "pagoda-make-model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s: %s, %d layers, dim %d, heads %d/%d, ffn %d, vocab %d, context %d, %s\n",
              output.c_str(), o.architecture.c_str(), o.n_layers, o.dim, o.n_heads, o.n_kv_heads,
              o.ffn_dim, o.vocab_size, o.context_length,
              (pagoda::common::GgmlTypeName(o.dtype) + (o.k_m_mix ? "_M" : "")).c_str());
  return 0;
}
