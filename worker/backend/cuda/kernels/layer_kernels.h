// The CUDA backend's per-token kernels around the GEMMs and attention: embedding gather, RMSNorm
// (fused with the row gather of the final norm and the cast to the GEMM input type), the RoPE
// table, RoPE fused with the KV page write, and SiLU·mul. CPU twins: worker/backend/cpu/
// cpu_kernels.h (RmsNorm, BuildRopeTables, ApplyRope, WriteKv, SwiGlu).
//
// Contract: launchers never allocate or synchronize, and their grids depend only on the
// arguments (CUDA-graph safe). All pointers are device memory. A launcher returns
// INVALID_ARGUMENT naming the argument and its limit when its Params break a rule stated here
// (sizes, null or misaligned pointers), otherwise the launch's own error (INTERNAL). The residual
// stream is float32; GEMM inputs are the dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

// x[t][:] = float(table[tokens[t]][:]).
struct EmbedParams {
  const int32_t* tokens;  // [num_tokens]
  const void* table;      // [vocab][dim] dtype
  float* x;               // [num_tokens][dim]
  int num_tokens = 0;
  int dim = 0;
  DType dtype = DType::kBf16;
};
absl::Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream);

// out[r][:] = dtype(x[src][:] / sqrt(mean(x[src]^2) + eps) * weight[:]), src = rows ? rows[r] : r.
struct RmsNormCastParams {
  const float* x;       // [*][dim]
  const int32_t* rows;  // [num_rows] or null
  const float* weight;  // [dim]
  void* out;            // [num_rows][dim] dtype
  int num_rows = 0;
  int dim = 0;
  float eps = 1e-5f;
  DType dtype = DType::kBf16;
};
absl::Status LaunchRmsNormCast(const RmsNormCastParams& p, cudaStream_t stream);

// rope[t][i] = (cos, sin)(positions[t] * base^(-2i/head_dim)), or positions[t] * inv_freq[i]
// when inv_freq is set (scaled RoPE, worker/model/architecture.h), the angle in double precision
// as on the CPU. Padding tokens (position < 0) get angle 0.
struct RopeTableParams {
  const int32_t* positions;  // [num_tokens]
  float2* rope;              // [num_tokens][head_dim / 2]
  int num_tokens = 0;
  int head_dim = 0;
  float base = 10000.0f;
  const float* inv_freq = nullptr;  // [head_dim / 2] or null
};

// The architecture hooks on the fused QKV projection, before RoPE (worker/model/architecture.h):
// qkv[t] += bias (qwen2), then each Q head and each K head times 1/rms(head) * q_norm / k_norm
// (qwen3). Null pointers skip their step.
struct QkvHooksParams {
  float* qkv;           // [num_tokens][(n_heads + 2 * n_kv_heads) * head_dim], in place
  const float* bias;    // [(n_heads + 2 * n_kv_heads) * head_dim] or null
  const float* q_norm;  // [head_dim] or null
  const float* k_norm;  // [head_dim] or null
  int num_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
};
absl::Status LaunchQkvHooks(const QkvHooksParams& p, cudaStream_t stream);
absl::Status LaunchRopeTable(const RopeTableParams& p, cudaStream_t stream);

// From the fused QKV projection qkv[t] = [q (n_heads*hd) | k (n_kv*hd) | v (n_kv*hd)] (float32):
// q_out[t] = dtype(RoPE(q)); K = RoPE(k) and V = v are written to their pages,
// cache[page_table[token_seq[t]][pos / page_size]][pos % page_size]. Tokens with position < 0
// (padding) write no K/V. RoPE rotates adjacent pairs (x[2i], x[2i+1]).
struct RopeKvWriteParams {
  const float* qkv;           // [num_tokens][(n_heads + 2 * n_kv_heads) * head_dim]
  const float2* rope;         // [num_tokens][head_dim / 2]
  const int32_t* positions;   // [num_tokens]
  const int32_t* token_seq;   // [num_tokens] entry in page_table
  const int32_t* page_table;  // [*][page_table_stride]
  int page_table_stride = 0;
  void* q_out;    // [num_tokens][n_heads][head_dim] dtype
  void* k_cache;  // [num_pages][page_size][n_kv_heads][head_dim] dtype (one layer)
  void* v_cache;  // same
  int num_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  DType dtype = DType::kBf16;
};
absl::Status LaunchRopeKvWrite(const RopeKvWriteParams& p, cudaStream_t stream);

// out[t][i] = dtype(silu(gate_up[t][i]) * gate_up[t][ffn_dim + i]).
struct SiluMulParams {
  const float* gate_up;  // [num_tokens][2 * ffn_dim]
  void* out;             // [num_tokens][ffn_dim] dtype
  int num_tokens = 0;
  int ffn_dim = 0;
  DType dtype = DType::kBf16;
};
absl::Status LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream);

// Seeded uniform values in [-scale, scale] (a counter-based hash of (seed, index)): benchmark
// weights and KV without a host copy. Never zeros.
absl::Status LaunchFillRandom(void* data, size_t count, DType dtype, float scale, uint64_t seed,
                              cudaStream_t stream);
absl::Status LaunchFillRandomF32(float* data, size_t count, float scale, float offset,
                                 uint64_t seed, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
