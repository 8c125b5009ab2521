// Test helpers: in-memory random models and small batch plumbing for backend tests.
#pragma once

#include <memory>
#include <string>

#include "common/gguf_reader.h"
#include "gtest/gtest.h"
#include "modelgen/random_model.h"
#include "tests/support/status_assertions.h"
#include "worker/model/llama_model.h"

namespace pagoda::testing {

// Builds a random llama model with `options` entirely in memory and loads it.
inline std::shared_ptr<const worker::LlamaModel> RandomModel(
    const modelgen::RandomModelOptions& options) {
  auto writer = modelgen::BuildRandomModel(options);
  EXPECT_OK(writer);
  if (!writer.ok()) return nullptr;
  auto file = common::GgufFile::FromBytes(writer->Serialize());
  EXPECT_OK(file);
  if (!file.ok()) return nullptr;
  auto model = worker::LlamaModel::Load(**file);
  EXPECT_OK(model);
  return model.ok() ? *model : nullptr;
}

inline modelgen::RandomModelOptions SmallRandomOptions(int dim, int heads, int kv_heads, int layers,
                                                       uint64_t seed) {
  modelgen::RandomModelOptions o;
  o.n_layers = layers;
  o.dim = dim;
  o.n_heads = heads;
  o.n_kv_heads = kv_heads;
  o.ffn_dim = dim * 3 / 2 + 4;
  o.vocab_size = 320;
  o.context_length = 256;
  o.seed = seed;
  return o;
}

}  // namespace pagoda::testing
