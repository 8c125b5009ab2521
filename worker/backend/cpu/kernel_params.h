// Parameter structs of the CPU kernels (cpu_kernels.h), shared with the CUDA launchers that
// implement the same operations on device pointers. Plain C++17 (nvcc includes it).
//
// Pointers carry their shapes in comments; kernels never allocate and never fail.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::worker::cpu {

// out[t] = x[t] * weight / sqrt(mean(x[t]^2) + eps). `out` may equal `x`.
struct RmsNormParams {
  const float* x;       // [num_tokens][dim]
  const float* weight;  // [dim]
  float* out;           // [num_tokens][dim]
  int num_tokens;
  int dim;
  float eps;
};

// RoPE angle tables: cos/sin of positions[t] * base^(-2i/head_dim) for i < head_dim / 2,
// computed once per batch and shared by Q and K of every layer.
struct RopeTableParams {
  const int32_t* positions;  // [num_tokens]
  float* cos;                // [num_tokens][head_dim / 2]
  float* sin;                // [num_tokens][head_dim / 2]
  int num_tokens;
  int head_dim;  // even
  float base;
  const float* inv_freq = nullptr;  // [head_dim / 2] angle per position; null: base^(-2i/head_dim)
};

// Rotates adjacent pairs (x[2i], x[2i+1]) of every head by the tabulated angle i of its token.
struct RopeParams {
  float* x;          // [num_tokens][n_heads][head_dim], in place
  const float* cos;  // [num_tokens][head_dim / 2]
  const float* sin;  // [num_tokens][head_dim / 2]
  int num_tokens;
  int n_heads;
  int head_dim;  // even
};

// Scatters each token's K and V rows into its page slot, as IEEE half (F16) values rounded to
// nearest even: cache[page_table[t][pos / page_size]][pos % page_size] = half(row).
struct KvWriteParams {
  const float* k;                     // [num_tokens][kv_dim]
  const float* v;                     // [num_tokens][kv_dim]
  const int32_t* positions;           // [num_tokens]
  const int32_t* const* page_tables;  // [num_tokens] -> that token's sequence's page ids
  uint16_t* k_cache;                  // [num_pages][page_size][kv_dim] F16
  uint16_t* v_cache;                  // [num_pages][page_size][kv_dim] F16
  int num_tokens;
  int kv_dim;  // n_kv_heads * head_dim
  int page_size;
};

// Grouped-query causal attention over paged KV: query head h reads KV head
// h / (n_heads / n_kv_heads); token t attends to positions [0, positions[t]] of its sequence.
struct PagedAttentionParams {
  const float* q;                     // [num_tokens][n_heads][head_dim] (RoPE applied)
  const uint16_t* k_cache;            // [num_pages][page_size][n_kv_heads][head_dim] F16
  const uint16_t* v_cache;            // [num_pages][page_size][n_kv_heads][head_dim] F16
  const int32_t* positions;           // [num_tokens]
  const int32_t* const* page_tables;  // [num_tokens] -> that token's sequence's page ids
  float* out;                         // [num_tokens][n_heads][head_dim]
  int num_tokens;
  int n_heads;
  int n_kv_heads;
  int head_dim;  // <= 256 (kMaxHeadDim)
  int page_size;
  float scale;  // usually 1/sqrt(head_dim)
};

}  // namespace pagoda::worker::cpu
