// Writes a llama, qwen2 or qwen3 GGUF model with seeded random weights and a synthetic tokenizer.
//
// Used by tools/make_model.cc (pagoda-make-model) and by tests that need models of arbitrary
// shapes. Weights: N(0, 1/fan_in) matrices, N(0, 1) embeddings, norms 1 + N(0, 0.1^2); each
// tensor is drawn from its own stream keyed by (seed, tensor name), so one (options) value
// always yields byte-identical files. The tokenizer metadata is a SyntheticVocab.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/synthetic_vocab.h"

namespace pagoda::modelgen {

struct RandomModelOptions {
  int n_layers = 4;
  int dim = 256;
  int n_heads = 8;
  int n_kv_heads = 4;
  int ffn_dim = 688;
  int vocab_size = 2048;
  int context_length = 2048;
  uint64_t seed = 1;
  // Matrix type (norms stay F32): F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (quantize.h;
  // quantized types need dim and ffn_dim multiples of their block, 32 or 256).
  common::GgmlType dtype = common::GgmlType::F32;
  // With Q4_K or Q5_K: llama.cpp's *_K_M recipe: output.weight, and attn_v and ffn_down of the
  // first and last eighth of the layers and every third layer between, in Q6_K.
  bool k_m_mix = false;
  std::string name = "pagoda-random";
  bool tie_output = false;  // omit output.weight (tied to token_embd)
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  // "llama", "qwen2" (adds Q/K/V biases) or "qwen3" (adds per-head Q/K RMSNorm weights).
  std::string architecture = "llama";
  // > 0: Llama 3.1 RoPE frequency scaling keys (low/high factors 1/4, original context 64).
  float rope_scaling_factor = 0.0f;
  // When set, writes the tokenizer.* metadata instead of the synthetic vocabulary (e.g. one
  // imported from Hugging Face by tools/hf_tokenizer); vocab_size must be that tokenizer's.
  std::function<void(GgufWriter&)> write_tokenizer;
};

// Checks sizes and divisibility; errors say which option and which limit.
absl::Status ValidateRandomModelOptions(const RandomModelOptions& options);

// Writes `vocab` as the tokenizer.* metadata (model "llama", BOS/EOS/unknown ids of
// synthetic_vocab.h, add_bos): what BuildRandomModel writes without `write_tokenizer`.
void AddSyntheticTokenizer(GgufWriter& w, const SyntheticVocab& vocab);

// Builds the complete model in a writer (metadata, tokenizer, tensors).
absl::StatusOr<GgufWriter> BuildRandomModel(const RandomModelOptions& options);

// BuildRandomModel + WriteFile.
absl::Status WriteRandomModel(const RandomModelOptions& options, const std::string& path);

}  // namespace pagoda::modelgen
