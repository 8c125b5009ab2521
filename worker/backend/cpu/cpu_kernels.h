// CPU kernels for the Llama forward pass over a flat batch of tokens.
//
// Contract: kernels never allocate and never fail; callers pass valid shapes (documented per
// pointer) and non-overlapping outputs unless stated. Every kernel computes each token's result
// with the same arithmetic in the same order regardless of the batch around it or the thread
// count, so the CPU backend is batch-invariant: a token's logits do not depend on which other
// sequences share its batch or how pages are laid out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::worker::cpu {

// out[t][o] = sum_i w[o][i] * x[t][i]: one pass over the weights for the whole batch.
struct MatMulParams {
  const float* x;  // [num_tokens][n_in]
  const float* w;  // [n_out][n_in]
  float* out;      // [num_tokens][n_out]
  int num_tokens;
  int n_in;
  int n_out;
};
void MatMul(const MatMulParams& p, int num_threads);

// out[t] = x[t] * weight / sqrt(mean(x[t]^2) + eps). `out` may equal `x`.
struct RmsNormParams {
  const float* x;       // [num_tokens][dim]
  const float* weight;  // [dim]
  float* out;           // [num_tokens][dim]
  int num_tokens;
  int dim;
  float eps;
};
void RmsNorm(const RmsNormParams& p);

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
void BuildRopeTables(const RopeTableParams& p);

// Rotates adjacent pairs (x[2i], x[2i+1]) of every head by the tabulated angle i of its token.
struct RopeParams {
  float* x;          // [num_tokens][n_heads][head_dim], in place
  const float* cos;  // [num_tokens][head_dim / 2]
  const float* sin;  // [num_tokens][head_dim / 2]
  int num_tokens;
  int n_heads;
  int head_dim;  // even
};
void ApplyRope(const RopeParams& p);

// Scatters each token's K and V rows into its page slot:
// cache[page_table[t][pos / page_size]][pos % page_size] = row.
struct KvWriteParams {
  const float* k;                     // [num_tokens][kv_dim]
  const float* v;                     // [num_tokens][kv_dim]
  const int32_t* positions;           // [num_tokens]
  const int32_t* const* page_tables;  // [num_tokens] -> that token's sequence's page ids
  float* k_cache;                     // [num_pages][page_size][kv_dim]
  float* v_cache;                     // [num_pages][page_size][kv_dim]
  int num_tokens;
  int kv_dim;  // n_kv_heads * head_dim
  int page_size;
};
void WriteKv(const KvWriteParams& p);

// Grouped-query causal attention over paged KV: query head h reads KV head
// h / (n_heads / n_kv_heads); token t attends to positions [0, positions[t]] of its sequence.
struct PagedAttentionParams {
  const float* q;                     // [num_tokens][n_heads][head_dim] (RoPE applied)
  const float* k_cache;               // [num_pages][page_size][n_kv_heads][head_dim]
  const float* v_cache;               // [num_pages][page_size][n_kv_heads][head_dim]
  const int32_t* positions;           // [num_tokens]
  const int32_t* const* page_tables;  // [num_tokens] -> that token's sequence's page ids
  float* out;                         // [num_tokens][n_heads][head_dim]
  int num_tokens;
  int n_heads;
  int n_kv_heads;
  int head_dim;  // <= 256
  int page_size;
  float scale;  // usually 1/sqrt(head_dim)
};
void PagedAttention(const PagedAttentionParams& p, int num_threads);

// gate[i] = silu(gate[i]) * up[i] for i < n (in place in gate).
void SwiGlu(float* gate, const float* up, size_t n);

// x[i] += y[i] for i < n.
void AddInPlace(float* x, const float* y, size_t n);

}  // namespace pagoda::worker::cpu
