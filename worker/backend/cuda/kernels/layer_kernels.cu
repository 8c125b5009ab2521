#include <algorithm>
#include <cstdint>

#include "common/status_macros.h"
#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/kernels/activations.cuh"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/launch.cuh"

namespace pagoda::worker::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 0x7fffffff;  // one block per token or row: the grid's x limit

// The sum of v over the block (whole warps, at most 1024 threads), in a fixed order: each warp's
// butterfly, then the warps' sums in order.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) t += partial[w];
    total = t;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void EmbedKernel(const int32_t* __restrict__ tokens, const T* __restrict__ table,
                            float* __restrict__ x, int dim) {
  const T* row = table + static_cast<size_t>(tokens[blockIdx.x]) * dim;
  float* out = x + static_cast<size_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = ToFloat(row[i]);
}

template <typename T>
__global__ void RmsNormCastKernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                  const float* __restrict__ weight, T* __restrict__ out, int dim,
                                  float eps) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const int src = rows != nullptr ? rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const float* row = x + static_cast<size_t>(src) * dim;
  float sum = 0;
  for (int i = threadIdx.x; i < dim; i += kThreads) sum += row[i] * row[i];
  const float inv = rsqrtf(BlockSum(sum) / dim + eps);
  T* o = out + static_cast<size_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = FromFloat<T>(row[i] * inv * weight[i]);
}

// The same for rows of 4 k floats (every model's), up to kNormQuads 4-float pieces a thread: the
// row and the weights are read once, all of a thread's 16-byte loads issued before the sum, and
// each thread writes its pieces from registers with 8-byte stores. A block of as few warps as
// hold the row: a decode step's norm is one block per token, whose time is the latency of its
// loads (the strided loop above waits on several rounds of them).
constexpr int kNormQuads = 4;
constexpr int kNormMaxDim = 4 * kNormQuads * 1024;

int NormQuadsThreads(int dim) {
  const int pieces = (dim / 4 + kNormQuads - 1) / kNormQuads;
  return std::max(32, (pieces + 31) / 32 * 32);
}

template <typename T>
__global__ void __launch_bounds__(1024)
    RmsNormCastQuadsKernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                           const float* __restrict__ weight, T* __restrict__ out, int dim,
                           float eps) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const int src = rows != nullptr ? rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const float4* row = reinterpret_cast<const float4*>(x + static_cast<size_t>(src) * dim);
  const float4* w = reinterpret_cast<const float4*>(weight);
  const int quads = dim / 4;
  float4 v[kNormQuads], g[kNormQuads];
#pragma unroll
  for (int k = 0; k < kNormQuads; ++k) {
    const int q = static_cast<int>(threadIdx.x + k * blockDim.x);
    const bool inside = q < quads;
    v[k] = inside ? row[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    g[k] = inside ? w[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kNormQuads; ++k) {
    sum += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  const float inv = rsqrtf(BlockSum(sum) / dim + eps);
  uint2* o = reinterpret_cast<uint2*>(out + static_cast<size_t>(blockIdx.x) * dim);
#pragma unroll
  for (int k = 0; k < kNormQuads; ++k) {
    const int q = static_cast<int>(threadIdx.x + k * blockDim.x);
    if (q >= quads) break;
    o[q] = make_uint2(PackPair<T>(v[k].x * inv * g[k].x, v[k].y * inv * g[k].y),
                      PackPair<T>(v[k].z * inv * g[k].z, v[k].w * inv * g[k].w));
  }
}

__global__ void RopeTableKernel(const int32_t* __restrict__ positions, float2* __restrict__ rope,
                                int head_dim, float base, const float* __restrict__ inv_freq) {
  const int half = head_dim / 2;
  const int pos = positions[blockIdx.x];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double freq = inv_freq != nullptr ? static_cast<double>(inv_freq[i])
                                            : pow(static_cast<double>(base), -2.0 * i / head_dim);
    const double angle = pos < 0 ? 0.0 : pos * freq;
    double s, c;
    sincos(angle, &s, &c);
    rope[static_cast<size_t>(blockIdx.x) * half + i] =
        make_float2(static_cast<float>(c), static_cast<float>(s));
  }
}

// One thread per head of one token (block = token): bias, then the head's RMSNorm, serially
// over head_dim (at most 256); cheap next to the QKV GEMM.
__global__ void QkvHooksKernel(QkvHooksParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const int hd = p.head_dim;
  const int heads = p.n_heads + 2 * p.n_kv_heads;
  float* row = p.qkv + static_cast<size_t>(blockIdx.x) * heads * hd;
  for (int h = threadIdx.x; h < heads; h += blockDim.x) {
    float* x = row + h * hd;
    if (p.bias != nullptr) {
      for (int i = 0; i < hd; ++i) x[i] += p.bias[h * hd + i];
    }
    const float* w = h < p.n_heads ? p.q_norm : h < p.n_heads + p.n_kv_heads ? p.k_norm : nullptr;
    if (w == nullptr) continue;
    float ss = 0.0f;
    for (int i = 0; i < hd; ++i) ss += x[i] * x[i];
    const float scale = rsqrtf(ss / hd + p.eps);
    for (int i = 0; i < hd; ++i) x[i] = x[i] * scale * w[i];
  }
}

// Grid (tokens, pieces of kThreads pairs): thread i of a token's row moves pair i of [q | k | v],
// so a decode step's few tokens spread over several blocks, each thread waiting on one load.
template <typename T>
__global__ void RopeKvWriteKernel(RopeKvWriteParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const int t = blockIdx.x;
  const int hd = p.head_dim, half = hd / 2;
  const int q_dim = p.n_heads * hd, kv_dim = p.n_kv_heads * hd;
  const int q_pairs = q_dim / 2, qk_pairs = (q_dim + kv_dim) / 2, pairs = qk_pairs + kv_dim / 2;
  const int i = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (i >= pairs) return;
  const int pos = p.positions[t];
  if (i >= q_pairs && pos < 0) return;  // a padding token writes no KV
  // Pairs of q then k: pair j of head h rotates (x[2j], x[2j+1]) by angle j; v's pairs are
  // copied. A thread moves a whole pair (one 8-byte load, one 4-byte store): q, k and v lie side
  // by side in the row, and every row, head and slot starts at an even element (head_dim is
  // even).
  const float2 x =
      reinterpret_cast<const float2*>(p.qkv + static_cast<size_t>(t) * (q_dim + 2 * kv_dim))[i];
  // Position pos's row of a layer's K or V pages.
  auto cache_row = [&](void* cache) {
    const int page =
        p.page_table[static_cast<size_t>(p.token_seq[t]) * p.page_table_stride + pos / p.page_size];
    const size_t slot = static_cast<size_t>(page) * p.page_size + pos % p.page_size;
    return reinterpret_cast<uint32_t*>(static_cast<T*>(cache) + slot * kv_dim);
  };
  if (i >= qk_pairs) {
    cache_row(p.v_cache)[i - qk_pairs] = PackPair<T>(x.x, x.y);
    return;
  }
  const bool is_q = i < q_pairs;
  const int j = is_q ? i : i - q_pairs;  // pair within q or k
  uint32_t* const dst =
      is_q ? reinterpret_cast<uint32_t*>(static_cast<T*>(p.q_out) + static_cast<size_t>(t) * q_dim)
           : cache_row(p.k_cache);
  const float2 cs = p.rope[static_cast<size_t>(t) * half + j % half];
  dst[j] = PackPair<T>(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}

template <typename T>
__global__ void SiluMulKernel(const float* __restrict__ gate_up, T* __restrict__ out,
                              int num_tokens, int ffn) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const size_t n = static_cast<size_t>(num_tokens) * ffn;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t t = i / ffn, j = i % ffn;
    out[i] = FromFloat<T>(SiluTimes(gate_up[t * 2 * ffn + j], gate_up[t * 2 * ffn + ffn + j]));
  }
}

// The same where ffn is a multiple of 4 (every model's): blockIdx.y walks the tokens, so no
// thread divides by ffn, and each thread moves four outputs with 16-byte loads of gate and up
// and one 8-byte store. A prefill chunk's gate/up activations are the largest elementwise read.
template <typename T>
__global__ void SiluMulQuadsKernel(const float* __restrict__ gate_up, T* __restrict__ out,
                                   int num_tokens, int ffn) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const int quads = ffn / 4;
  for (int t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const float4* gate =
        reinterpret_cast<const float4*>(gate_up + static_cast<size_t>(t) * 2 * ffn);
    const float4* up = gate + quads;
    uint2* o = reinterpret_cast<uint2*>(out + static_cast<size_t>(t) * ffn);
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += gridDim.x * blockDim.x) {
      const float4 g = gate[q], u = up[q];
      o[q] = make_uint2(PackPair<T>(SiluTimes(g.x, u.x), SiluTimes(g.y, u.y)),
                        PackPair<T>(SiluTimes(g.z, u.z), SiluTimes(g.w, u.w)));
    }
  }
}

__device__ __forceinline__ float HashUniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
}

template <typename T>
__global__ void FillRandomKernel(T* data, size_t n, float scale, float offset, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    data[i] = FromFloat<T>(offset + scale * HashUniform(seed, i));
  }
}

__global__ void FillRandomF32Kernel(float* data, size_t n, float scale, float offset,
                                    uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    data[i] = offset + scale * HashUniform(seed, i);
  }
}

int GridFor(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

}  // namespace

absl::Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchEmbed");
  check.RequireRange(p.num_tokens, 0, kMaxBlocks, "num_tokens");
  if (p.num_tokens == 0) return check.status();
  check.RequirePositive(p.dim, "dim")
      .RequirePointer(p.tokens, "tokens")
      .RequirePointer(p.table, "table")
      .RequirePointer(p.x, "x");
  RETURN_IF_ERROR(check.status());
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto tag) {
                                    using T = decltype(tag);
                                    return LaunchKernel(EmbedKernel<T>, p.num_tokens, kThreads, 0,
                                                        stream, p.tokens,
                                                        static_cast<const T*>(p.table), p.x, p.dim);
                                  }),
                    "LaunchEmbed");
}

absl::Status LaunchRmsNormCast(const RmsNormCastParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchRmsNormCast");
  check.RequireRange(p.num_rows, 0, kMaxBlocks, "num_rows");
  if (p.num_rows == 0) return check.status();
  check.RequirePositive(p.dim, "dim")
      .Require(p.eps >= 0, "eps %g must be >= 0", p.eps)
      .RequirePointer(p.x, "x")
      .RequirePointer(p.weight, "weight")
      .RequirePointer(p.out, "out");
  RETURN_IF_ERROR(check.status());
  const bool quads = p.dim % 4 == 0 && p.dim <= kNormMaxDim &&
                     reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.weight) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.out) % 8 == 0;
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto tag) {
                                    using T = decltype(tag);
                                    T* out = static_cast<T*>(p.out);
                                    if (quads) {
                                      return LaunchKernelAfterPrior(
                                          RmsNormCastQuadsKernel<T>, p.num_rows,
                                          NormQuadsThreads(p.dim), 0, stream, p.x, p.rows, p.weight,
                                          out, p.dim, p.eps);
                                    }
                                    return LaunchKernelAfterPrior(RmsNormCastKernel<T>, p.num_rows,
                                                                  kThreads, 0, stream, p.x, p.rows,
                                                                  p.weight, out, p.dim, p.eps);
                                  }),
                    "LaunchRmsNormCast");
}

absl::Status LaunchRopeTable(const RopeTableParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchRopeTable");
  check.RequireRange(p.num_tokens, 0, kMaxBlocks, "num_tokens");
  if (p.num_tokens == 0) return check.status();
  check
      .Require(p.head_dim > 0 && p.head_dim % 2 == 0, "head_dim %d must be even and positive",
               p.head_dim)
      .Require(p.base > 0, "base %g must be positive", p.base)
      .RequirePointer(p.positions, "positions")
      .RequirePointer(p.rope, "rope", alignof(float2));
  RETURN_IF_ERROR(check.status());
  const int threads = p.head_dim / 2 < 32 ? 32 : (p.head_dim / 2 > 128 ? 128 : p.head_dim / 2);
  return CudaStatus(LaunchKernel(RopeTableKernel, p.num_tokens, threads, 0, stream, p.positions,
                                 p.rope, p.head_dim, p.base, p.inv_freq),
                    "LaunchRopeTable");
}

absl::Status LaunchQkvHooks(const QkvHooksParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchQkvHooks");
  check.RequireRange(p.num_tokens, 0, kMaxBlocks, "num_tokens");
  if (p.num_tokens == 0 || (p.bias == nullptr && p.q_norm == nullptr)) return check.status();
  check.RequirePositive(p.head_dim, "head_dim")
      .RequirePositive(p.n_heads, "n_heads")
      .RequirePositive(p.n_kv_heads, "n_kv_heads")
      .Require((p.q_norm == nullptr) == (p.k_norm == nullptr),
               "q_norm and k_norm must both be set or both be null")
      .RequirePointer(p.qkv, "qkv");
  RETURN_IF_ERROR(check.status());
  return CudaStatus(LaunchKernelAfterPrior(QkvHooksKernel, p.num_tokens, 64, 0, stream, p),
                    "LaunchQkvHooks");
}

absl::Status LaunchRopeKvWrite(const RopeKvWriteParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchRopeKvWrite");
  check.RequireRange(p.num_tokens, 0, kMaxBlocks, "num_tokens");
  if (p.num_tokens == 0) return check.status();
  check
      .Require(p.head_dim > 0 && p.head_dim % 2 == 0, "head_dim %d must be even and positive",
               p.head_dim)
      .RequirePositive(p.n_heads, "n_heads")
      .RequirePositive(p.n_kv_heads, "n_kv_heads")
      .RequirePositive(p.page_size, "page_size")
      .RequirePositive(p.page_table_stride, "page_table_stride")
      .RequirePointer(p.qkv, "qkv", alignof(float2))
      .RequirePointer(p.rope, "rope", alignof(float2))
      .RequirePointer(p.positions, "positions")
      .RequirePointer(p.token_seq, "token_seq")
      .RequirePointer(p.page_table, "page_table")
      .RequirePointer(p.q_out, "q_out", 4)
      .RequirePointer(p.k_cache, "k_cache", 4)
      .RequirePointer(p.v_cache, "v_cache", 4);
  const int64_t pairs = (int64_t{p.n_heads} + 2 * int64_t{p.n_kv_heads}) * p.head_dim / 2;
  const int64_t pieces = (pairs + kThreads - 1) / kThreads;
  check.Require(pieces <= 65535, "%d query and key/value heads of %d are over 65535 x %d pairs",
                p.n_heads + 2 * p.n_kv_heads, p.head_dim, kThreads);
  RETURN_IF_ERROR(check.status());
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(pieces));
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto tag) {
                                    using T = decltype(tag);
                                    return LaunchKernelAfterPrior(RopeKvWriteKernel<T>, grid,
                                                                  kThreads, 0, stream, p);
                                  }),
                    "LaunchRopeKvWrite");
}

absl::Status LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchSiluMul");
  check.Require(p.num_tokens >= 0, "num_tokens %d must be >= 0", p.num_tokens)
      .Require(p.ffn_dim >= 0, "ffn_dim %d must be >= 0", p.ffn_dim);
  const size_t n = static_cast<size_t>(p.num_tokens) * p.ffn_dim;
  if (n == 0 || !check.status().ok()) return check.status();
  check.RequirePointer(p.gate_up, "gate_up").RequirePointer(p.out, "out");
  RETURN_IF_ERROR(check.status());
  const bool quads = p.ffn_dim % 4 == 0 && reinterpret_cast<uintptr_t>(p.gate_up) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.out) % 8 == 0;
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto tag) {
                                    using T = decltype(tag);
                                    T* out = static_cast<T*>(p.out);
                                    if (!quads) {
                                      return LaunchKernelAfterPrior(SiluMulKernel<T>, GridFor(n),
                                                                    kThreads, 0, stream, p.gate_up,
                                                                    out, p.num_tokens, p.ffn_dim);
                                    }
                                    const int per_token = (p.ffn_dim / 4 + kThreads - 1) / kThreads;
                                    const dim3 grid(per_token, std::min(p.num_tokens, 65535));
                                    return LaunchKernelAfterPrior(SiluMulQuadsKernel<T>, grid,
                                                                  kThreads, 0, stream, p.gate_up,
                                                                  out, p.num_tokens, p.ffn_dim);
                                  }),
                    "LaunchSiluMul");
}

absl::Status LaunchFillRandom(void* data, size_t count, DType dtype, float scale, uint64_t seed,
                              cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(ArgCheck("LaunchFillRandom").RequirePointer(data, "data", 2).status());
  return CudaStatus(DispatchDType(dtype,
                                  [&](auto tag) {
                                    using T = decltype(tag);
                                    return LaunchKernel(FillRandomKernel<T>, GridFor(count),
                                                        kThreads, 0, stream, static_cast<T*>(data),
                                                        count, scale, 0.0f, seed);
                                  }),
                    "LaunchFillRandom");
}

absl::Status LaunchFillRandomF32(float* data, size_t count, float scale, float offset,
                                 uint64_t seed, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(ArgCheck("LaunchFillRandomF32").RequirePointer(data, "data", 4).status());
  return CudaStatus(LaunchKernel(FillRandomF32Kernel, GridFor(count), kThreads, 0, stream, data,
                                 count, scale, offset, seed),
                    "LaunchFillRandomF32");
}

}  // namespace pagoda::worker::cuda
