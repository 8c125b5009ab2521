#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "common/status_macros.h"
#include "worker/backend/cuda/arg_check.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/kernels/activations.cuh"
#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/mma.cuh"
#include "worker/backend/cuda/quant/quant_blocks.cuh"
#include "worker/backend/cuda/quant/quant_gemm_wgmma.cuh"
#include "worker/backend/cuda/quant/quant_kernels.h"
#include "worker/backend/cuda/sampling/counter_uniform.cuh"

namespace pagoda::worker::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kGemvRowsPerWarp = 2;
constexpr int kGemvRows = kGemvWarps * kGemvRowsPerWarp;  // rows of one block
// A block walks the row in chunks of one unit per lane. The staged x of lane L's unit is 8
// float4s, piece c at slot c ^ (L % 8), so that the 8 lanes of each 16-byte-load phase, reading
// the same piece of their units, hit 8 different bank groups.
constexpr int kGemvChunk = 32 * kQuantUnit;
__device__ __forceinline__ int GemvXSlot(int lane, int piece) {
  return lane * 8 + (piece ^ (lane % 8));
}
constexpr int kDequantThreads = 128;

// The two rows a warp of a GEMV block multiplies. Plain: rows 2 w and 2 w + 1 of the block's
// kGemvRows. GLU mode (kGlu): gate row j = kGemvWarps b + w and its up row j + F (F = rows / 2),
// so that one warp holds both sums of each output. A template parameter, not a flag: the plain
// kernels keep their registers (a flag's extra live values made the K formats' fused product
// spill).
template <bool kGlu>
struct WarpRows {
  static_assert(kGemvRowsPerWarp == 2, "GLU mode pairs a gate row with an up row");
  int first;  // row 0's
  int half;   // kGlu: F

  __device__ __forceinline__ explicit WarpRows(int rows) {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if constexpr (kGlu) {
      half = rows / 2, first = static_cast<int>(blockIdx.x) * kGemvWarps + warp;
    } else {
      half = 0, first = static_cast<int>(blockIdx.x) * kGemvRows + warp * kGemvRowsPerWarp;
    }
  }
  __device__ __forceinline__ int Row(int r) const { return kGlu ? first + r * half : first + r; }
  // False past the matrix (or past F).
  __device__ __forceinline__ bool Inside(int r, int rows) const {
    return kGlu ? first < half : first + r < rows;
  }
  // The row that r reads: its own, or the matrix's last for a row past the end (read, unused).
  __device__ __forceinline__ int Read(int r, int rows) const {
    return Inside(r, rows) ? Row(r) : rows - 1;
  }
};

// Calls fn(std::bool_constant<glu>{}): a GEMV's mode as its kernel's template argument.
template <typename Fn>
auto DispatchGlu(bool glu, Fn&& fn) {
  return glu ? fn(std::true_type{}) : fn(std::false_type{});
}

// Blocks of a GEMV launch: kGemvRows rows each, or kGemvWarps gate/up pairs in GLU mode.
dim3 GemvGrid(int rows, bool glu) {
  return dim3(glu ? (rows / 2 + kGemvWarps - 1) / kGemvWarps : (rows + kGemvRows - 1) / kGemvRows);
}

// The fused products' end: each (row, token) sum over the warp's lanes, written by lane 0:
// out[t * ld_out + row] (added to it when accumulating), or in GLU mode
// glu_out[t * F + j] = T(silu(gate sum) * up sum). P: QuantGemvParams or QuantGemvInt8Params.
template <typename T, bool kGlu, typename P>
__device__ __forceinline__ void StoreWarpSums(
    const float (&acc)[kGemvRowsPerWarp][kQuantGemvMaxTokens], const WarpRows<kGlu>& rows,
    const P& p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
    if (t >= p.num_tokens) break;
    float v[kGemvRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      v[r] = acc[r][t];
      for (int offset = 16; offset > 0; offset >>= 1) {
        v[r] += __shfl_xor_sync(0xffffffff, v[r], offset);
      }
    }
    if (lane != 0) continue;
    if constexpr (kGlu) {
      if (rows.Inside(0, p.w.rows)) {
        static_cast<T*>(p.glu_out)[static_cast<size_t>(t) * rows.half + rows.first] =
            FromFloat<T>(SiluTimes(v[0], v[1]));
      }
    } else {
#pragma unroll
      for (int r = 0; r < kGemvRowsPerWarp; ++r) {
        if (!rows.Inside(r, p.w.rows)) continue;
        float* o = p.out + static_cast<size_t>(t) * p.ld_out + rows.Row(r);
        *o = p.accumulate ? *o + v[r] : v[r];
      }
    }
  }
}

template <WeightFormat F, typename T, bool kGlu>
__global__ void __launch_bounds__(kGemvWarps * 32, 3) QuantGemvKernel(QuantGemvParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  __shared__ float4 xs[kQuantGemvMaxTokens][32 * 8];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const WarpRows<kGlu> rows(p.w.rows);
  const int tokens = p.num_tokens, n_in = p.w.cols;
  const T* x = static_cast<const T*>(p.x);
  const uint8_t* w = static_cast<const uint8_t*>(p.w.data);
  float acc[kGemvRowsPerWarp][kQuantGemvMaxTokens] = {};
  for (int c0 = 0; c0 < n_in; c0 += kGemvChunk) {
    const int len = min(kGemvChunk, n_in - c0);
    __syncthreads();  // the previous chunk's reads are done
    for (int i = static_cast<int>(threadIdx.x); i < tokens * len; i += kGemvWarps * 32) {
      const int t = i / len, k = i - t * len;
      reinterpret_cast<float*>(&xs[t][GemvXSlot(k / kQuantUnit, k % kQuantUnit / 4)])[k % 4] =
          ToFloat(x[static_cast<size_t>(t) * n_in + c0 + k]);
    }
    __syncthreads();
    if (lane * kQuantUnit >= len) continue;
    const int unit = c0 / kQuantUnit + lane;
    // Unrolled, so that acc stays in registers (indexed by a loop variable, it went to local
    // memory).
#pragma unroll
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      if (!rows.Inside(r, p.w.rows)) continue;
      float y[kQuantUnit];
      DecodeUnit<F>(w + static_cast<size_t>(rows.Row(r)) * p.w.row_bytes, unit, y);
#pragma unroll
      for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
        if (t >= tokens) break;
        float xt[kQuantUnit];
#pragma unroll
        for (int c = 0; c < kQuantUnit / 4; ++c) {
          const float4 v = xs[t][GemvXSlot(lane, c)];
          xt[4 * c] = v.x, xt[4 * c + 1] = v.y, xt[4 * c + 2] = v.z, xt[4 * c + 3] = v.w;
        }
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kQuantUnit; ++k) s += y[k] * xt[k];
        acc[r][t] += s;
      }
    }
  }
  StoreWarpSums<T>(acc, rows, p);
}

// All of a pass's weight loads of this lane, before any arithmetic (kGemvRowsPerWarp x kSteps
// of 16 bytes in flight): the warp's rows from byte `first` of each row, 512 bytes a step, lane
// l at byte 16 l of each; zeros past `bytes`. A missing row reads the last, unused.
template <int kSteps, bool kGlu>
__device__ __forceinline__ void LoadRowSteps(const DeviceMatrix& w, const WarpRows<kGlu>& rows,
                                             size_t first, int bytes,
                                             uint4 (&wv)[kGemvRowsPerWarp][kSteps]) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < kGemvRowsPerWarp; ++r) {
    const int row = rows.Read(r, w.rows);
    const uint8_t* base =
        static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * w.row_bytes + first;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int k = s * 512 + lane * 16;
      wv[r][s] =
          k < bytes ? __ldg(reinterpret_cast<const uint4*>(base + k)) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Dense rows: each pass stages kDenseChunk columns of x for every token; a lane takes 8
// consecutive columns (16 bytes of a row) per step of 256, kDenseSteps steps per pass. x is
// staged as float4s in two halves, the first four of each 8 columns in xs[0] and the last four
// in xs[1], so that the 32 lanes of a step read 32 consecutive float4s of each: with the 8
// columns side by side, lanes 32 bytes apart would meet in the same banks two by two.
constexpr int kDenseSteps = 4;
constexpr int kDenseChunk = kDenseSteps * 256;

template <typename T, bool kGlu>
__global__ void __launch_bounds__(kGemvWarps * 32) DenseGemvKernel(QuantGemvParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  __shared__ float4 xs[2][kQuantGemvMaxTokens][kDenseChunk / 8];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const WarpRows<kGlu> rows(p.w.rows);
  const int tokens = p.num_tokens, n_in = p.w.cols;
  const T* x = static_cast<const T*>(p.x);
  float acc[kGemvRowsPerWarp][kQuantGemvMaxTokens] = {};
  for (int c0 = 0; c0 < n_in; c0 += kDenseChunk) {
    const int len = min(kDenseChunk, n_in - c0);
    __syncthreads();  // the previous pass's reads are done
    for (int i = static_cast<int>(threadIdx.x); i < tokens * len; i += kGemvWarps * 32) {
      const int t = i / len, k = i - t * len;
      reinterpret_cast<float*>(&xs[(k >> 2) & 1][t][k >> 3])[k & 3] =
          ToFloat(x[static_cast<size_t>(t) * n_in + c0 + k]);
    }
    __syncthreads();
    uint4 wv[kGemvRowsPerWarp][kDenseSteps];
    LoadRowSteps(p.w, rows, size_t{2} * c0, 2 * len, wv);
#pragma unroll
    for (int s = 0; s < kDenseSteps; ++s) {
      const int k = s * 256 + lane * 8;
      if (k >= len) break;
#pragma unroll
      for (int r = 0; r < kGemvRowsPerWarp; ++r) {
        float y[8];
        Unpack8<T>(wv[r][s], y);
#pragma unroll
        for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
          if (t >= tokens) break;
          const float4 a = xs[0][t][k / 8], b = xs[1][t][k / 8];
          const float xt[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) sum += y[i] * xt[i];
          acc[r][t] += sum;
        }
      }
    }
  }
  StoreWarpSums<T>(acc, rows, p);
}

// FP8 E4M3 rows: the dense kernel's walk with 16 weights per 16-byte load (a step covers 512
// columns), x staged in the dtype (a pass of 2048 columns for 8 tokens would not fit in 48 KiB as
// float), in two halves as there: the first 8 of each 16 columns in xs[0], the last 8 in xs[1].
// Each lane's partial sums take the row's scale before the warp adds them.
constexpr int kFp8Steps = 4;
constexpr int kFp8Chunk = kFp8Steps * 512;

template <typename T, bool kGlu>
__global__ void __launch_bounds__(kGemvWarps * 32) Fp8GemvKernel(QuantGemvParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  __shared__ uint4 xs[2][kQuantGemvMaxTokens][kFp8Chunk / 16];  // 8 elements of the dtype each
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const WarpRows<kGlu> rows(p.w.rows);
  const int tokens = p.num_tokens, n_in = p.w.cols;
  const T* x = static_cast<const T*>(p.x);
  float acc[kGemvRowsPerWarp][kQuantGemvMaxTokens] = {};
  for (int c0 = 0; c0 < n_in; c0 += kFp8Chunk) {
    const int len = min(kFp8Chunk, n_in - c0), vectors = len / 8;  // 16 bytes of x each
    __syncthreads();  // the previous pass's reads are done
    for (int i = static_cast<int>(threadIdx.x); i < tokens * vectors; i += kGemvWarps * 32) {
      const int t = i / vectors, v = i - t * vectors;
      xs[v & 1][t][v >> 1] =
          __ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(t) * n_in + c0 + 8 * v));
    }
    __syncthreads();
    uint4 wv[kGemvRowsPerWarp][kFp8Steps];
    LoadRowSteps(p.w, rows, c0, len, wv);
#pragma unroll
    for (int s = 0; s < kFp8Steps; ++s) {
      const int k = s * 512 + lane * 16;
      if (k >= len) break;
      float y[kGemvRowsPerWarp][16];
#pragma unroll
      for (int r = 0; r < kGemvRowsPerWarp; ++r) DecodeFp8x16(wv[r][s], y[r]);
#pragma unroll
      for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
        if (t >= tokens) break;
        float xa[8], xb[8];
        Unpack8<T>(xs[0][t][k / 16], xa);
        Unpack8<T>(xs[1][t][k / 16], xb);
#pragma unroll
        for (int r = 0; r < kGemvRowsPerWarp; ++r) {
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) sum += y[r][i] * xa[i] + y[r][i + 8] * xb[i];
          acc[r][t] += sum;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRowsPerWarp; ++r) {
    const float scale = p.w.row_scales[rows.Read(r, p.w.rows)];
#pragma unroll
    for (int t = 0; t < kQuantGemvMaxTokens; ++t) acc[r][t] *= scale;
  }
  StoreWarpSums<T>(acc, rows, p);
}

// One thread per block of 32 activations.
template <typename T>
__global__ void QuantizeQ8BlocksKernel(Q8BlocksParams p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  const size_t blocks = static_cast<size_t>(p.tokens) * (p.cols / kQuantUnit);
  const T* x = static_cast<const T*>(p.x);
  for (size_t b = blockIdx.x * size_t{blockDim.x} + threadIdx.x; b < blocks;
       b += size_t{gridDim.x} * blockDim.x) {
    const T* in = x + b * kQuantUnit;
    float amax = 0.0f;
    for (int i = 0; i < kQuantUnit; ++i) amax = fmaxf(amax, fabsf(ToFloat(in[i])));
    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQuantUnit; ++i) {
      const int q = static_cast<int>(rintf(ToFloat(in[i]) * inv));
      p.q[b * kQuantUnit + i] = static_cast<int8_t>(q);
      sum += q;
    }
    p.ds[b] = make_float2(d, d * static_cast<float>(sum));
  }
}

// As QuantGemvKernel, with x staged as 8-bit blocks: a unit is 8 words (9 apart in shared
// memory, so the 32 lanes reading their units hit 32 banks) and its (d, s) pair.
constexpr int kInt8Stride = kQuantUnit / 4 + 1;

template <WeightFormat F, typename T, bool kGlu>
__global__ void __launch_bounds__(kGemvWarps * 32) QuantGemvInt8Kernel(QuantGemvInt8Params p) {
  PriorGridsDone();  // launched after its prior grid (LaunchKernelAfterPrior)
  __shared__ int xs[kQuantGemvMaxTokens][32 * kInt8Stride];
  __shared__ float2 dss[kQuantGemvMaxTokens][32];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const WarpRows<kGlu> rows(p.w.rows);
  const int tokens = p.num_tokens, n_in = p.w.cols, units = n_in / kQuantUnit;
  const uint8_t* w = static_cast<const uint8_t*>(p.w.data);
  float acc[kGemvRowsPerWarp][kQuantGemvMaxTokens] = {};
  for (int u0 = 0; u0 < units; u0 += 32) {
    const int chunk_units = min(32, units - u0);
    __syncthreads();  // the previous chunk's reads are done
    for (int i = static_cast<int>(threadIdx.x); i < tokens * chunk_units * 8;
         i += kGemvWarps * 32) {
      const int t = i / (chunk_units * 8), k = i % (chunk_units * 8);
      const int* src = reinterpret_cast<const int*>(p.xq + static_cast<size_t>(t) * n_in) +
                       static_cast<size_t>(u0) * 8;
      xs[t][k / 8 * kInt8Stride + k % 8] = src[k];
    }
    for (int i = static_cast<int>(threadIdx.x); i < tokens * chunk_units; i += kGemvWarps * 32) {
      const int t = i / chunk_units, k = i % chunk_units;
      dss[t][k] = p.ds[static_cast<size_t>(t) * units + u0 + k];
    }
    __syncthreads();
    if (lane >= chunk_units) continue;
#pragma unroll  // acc in registers, as in QuantGemvKernel
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      if (!rows.Inside(r, p.w.rows)) continue;
      IntUnit unit;
      DecodeUnitInt<F>(w + static_cast<size_t>(rows.Row(r)) * p.w.row_bytes, u0 + lane, unit);
      int packed[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        packed[k] =
            static_cast<int>(static_cast<uint32_t>(static_cast<uint8_t>(unit.q[4 * k])) |
                             static_cast<uint32_t>(static_cast<uint8_t>(unit.q[4 * k + 1])) << 8 |
                             static_cast<uint32_t>(static_cast<uint8_t>(unit.q[4 * k + 2])) << 16 |
                             static_cast<uint32_t>(static_cast<uint8_t>(unit.q[4 * k + 3])) << 24);
      }
#pragma unroll
      for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
        if (t >= tokens) break;
        const int* xt = &xs[t][lane * kInt8Stride];
        int lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) lo = __dp4a(packed[k], xt[k], lo);
#pragma unroll
        for (int k = 4; k < 8; ++k) hi = __dp4a(packed[k], xt[k], hi);
        const float2 ds = dss[t][lane];
        acc[r][t] += ds.x * (unit.lo * static_cast<float>(lo) + unit.hi * static_cast<float>(hi)) -
                     unit.min * ds.y;
      }
    }
  }
  StoreWarpSums<T>(acc, rows, p);
}

template <WeightFormat F, typename O>
__global__ void __launch_bounds__(kDequantThreads) DequantizeRowsKernel(DequantizeRowsParams p) {
  const int r = static_cast<int>(blockIdx.x);
  const int src = p.rows != nullptr ? p.rows[r] : p.first_row + r;
  const uint8_t* row =
      static_cast<const uint8_t*>(p.w.data) + static_cast<size_t>(src) * p.w.row_bytes;
  O* out = static_cast<O*>(p.out) + static_cast<size_t>(r) * p.w.cols;
  for (int u = static_cast<int>(threadIdx.x); u < p.w.cols / kQuantUnit; u += kDequantThreads) {
    float y[kQuantUnit];
    DecodeUnit<F>(row, u, y);
#pragma unroll
    for (int k = 0; k < kQuantUnit; ++k) {
      if constexpr (std::is_same_v<O, float>) {
        out[u * kQuantUnit + k] = y[k];
      } else {
        out[u * kQuantUnit + k] = FromFloat<O>(y[k]);
      }
    }
  }
}

// The tensor-core product: 64 rows x 64 tokens per block of 4 warps (2 x 2, each 32 x 32: two
// m16 tiles by four n8 tiles), 64 columns per step. Shared rows are padded by 8 elements (16
// bytes) so that ldmatrix's eight row addresses of a matrix fall in different bank groups.
constexpr int kMmaRows = 64;
constexpr int kMmaTokens = 64;
constexpr int kMmaCols = 64;
constexpr int kMmaStride = kMmaCols + 8;
constexpr int kMmaThreads = 128;

template <WeightFormat F, typename T>
__global__ void __launch_bounds__(kMmaThreads) QuantGemmMmaKernel(QuantGemvParams p) {
  __shared__ __align__(16) T ws[kMmaRows][kMmaStride];
  __shared__ __align__(16) T xs[kMmaTokens][kMmaStride];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int row0 = static_cast<int>(blockIdx.x) * kMmaRows;
  const int tok0 = static_cast<int>(blockIdx.y) * kMmaTokens;
  const int n_in = p.w.cols, units = n_in / kQuantUnit;
  const T* x = static_cast<const T*>(p.x);
  const uint8_t* w = static_cast<const uint8_t*>(p.w.data);
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's corner in the block tile
  float acc[2][4][4] = {};
  for (int c0 = 0; c0 < n_in; c0 += kMmaCols) {
    __syncthreads();  // the previous step's fragments are loaded
    {
      // Weights: thread i decodes unit (i % 2) of row i / 2 of the tile (zeros past the end).
      const int r = tid / 2, u = c0 / kQuantUnit + tid % 2;
      T* dst = &ws[r][(tid % 2) * kQuantUnit];
      if (row0 + r < p.w.rows && u < units) {
        float y[kQuantUnit];
        DecodeUnit<F>(w + static_cast<size_t>(row0 + r) * p.w.row_bytes, u, y);
#pragma unroll
        for (int k = 0; k < kQuantUnit; ++k) dst[k] = FromFloat<T>(y[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kQuantUnit; ++k) dst[k] = FromFloat<T>(0.0f);
      }
    }
    // Activations: 64 tokens x 64 columns, 16 bytes (8 elements) per copy, zeros past the end.
    for (int i = tid; i < kMmaTokens * kMmaCols / 8; i += kMmaThreads) {
      const int t = i / (kMmaCols / 8), k = (i % (kMmaCols / 8)) * 8;
      const bool inside = tok0 + t < p.num_tokens && c0 + k < n_in;
      mma::CpAsync16(&xs[t][k], inside ? x + static_cast<size_t>(tok0 + t) * n_in + c0 + k : x,
                     inside);
    }
    mma::CpAsyncCommit();
    mma::CpAsyncWait<0>();
    __syncthreads();
#pragma unroll
    for (int k16 = 0; k16 < kMmaCols; k16 += 16) {
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        mma::LdMatrixX4(a[mi], &ws[wm + mi * 16 + lane % 16][k16 + (lane / 16) * 8]);
      }
      // Matrix i of the x4 load: tokens (i / 2) * 8 + row, columns k16 + (i % 2) * 8, so
      // registers 0-1 are one n8 tile's B fragment and 2-3 the next's.
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int tok = wn + nj * 16 + (lane / 16) * 8 + lane % 8;
        mma::LdMatrixX4(b[nj], &xs[tok][k16 + ((lane / 8) % 2) * 8]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          mma::MmaM16N8K16<T>(acc[mi][ni], a[mi], b[ni / 2][(ni % 2) * 2],
                              b[ni / 2][(ni % 2) * 2 + 1]);
        }
      }
    }
  }
  // D fragment: acc[.][.][0..1] = C[g][2t, 2t+1], [2..3] = C[g+8][2t, 2t+1]; C's rows are
  // weight rows (outputs), its columns tokens.
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + wm + mi * 16 + g + (e / 2) * 8;
        const int tok = tok0 + wn + ni * 8 + 2 * t4 + e % 2;
        if (row >= p.w.rows || tok >= p.num_tokens) continue;
        float* o = p.out + static_cast<size_t>(tok) * p.ld_out + row;
        float v = acc[mi][ni][e];
        if constexpr (F == WeightFormat::kFp8) v *= p.w.row_scales[row];
        *o = p.accumulate ? *o + v : v;
      }
    }
  }
}

// One thread per block of the format: random bytes, then the scales. The largest decoded
// magnitude per unit of d is 127 (Q8_0), 8 (Q4_0), 63 x 15 and 63 x 31 (Q4_K, Q5_K: 6-bit scale
// times a 4- or 5-bit value), 127 x 32 (Q6_K). The K formats' values d sc q - dmin m are all
// positive but for the min: dmin = d times the value's mean (7.5 or 15.5) centres them.
__global__ void FillRandomBlocksKernel(uint8_t* data, size_t blocks, int block_bytes,
                                       WeightFormat format, float amplitude, uint64_t seed) {
  for (size_t b = blockIdx.x * size_t{blockDim.x} + threadIdx.x; b < blocks;
       b += size_t{gridDim.x} * blockDim.x) {
    uint8_t* block = data + b * block_bytes;
    uint64_t bits = 0;
    for (int i = 0; i < block_bytes; ++i) {
      if (i % 8 == 0) bits = CounterMix64(seed ^ ((b * 32 + i / 8) * 0x9e3779b97f4a7c15ull));
      block[i] = static_cast<uint8_t>(bits >> (8 * (i % 8)));
    }
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    auto set_half = [&](int offset, float v) {
      const __half h = __float2half(v);
      const __half_raw raw = h;
      *reinterpret_cast<uint16_t*>(block + offset) = raw.x;
    };
    const float d = amplitude * (0.5f + u);
    switch (format) {
      case WeightFormat::kQ8_0:
        set_half(0, d / 127.0f);
        break;
      case WeightFormat::kQ4_0:
        set_half(0, d / 8.0f);
        break;
      case WeightFormat::kQ4_K:
        set_half(0, d / (63.0f * 15.0f));
        set_half(2, d / (63.0f * 15.0f) * 7.5f);
        break;
      case WeightFormat::kQ5_K:
        set_half(0, d / (63.0f * 31.0f));
        set_half(2, d / (63.0f * 31.0f) * 15.5f);
        break;
      default:
        set_half(208, d / (127.0f * 32.0f));
        break;
    }
  }
}

// The rules every quantized matrix argument obeys.
void CheckMatrix(ArgCheck& check, const DeviceMatrix& w) {
  check
      .Require(IsBlockFormat(w.format), "w must be in a GGUF block format, not %s",
               WeightFormatName(w.format))
      .RequirePointer(w.data, "w.data", static_cast<uintptr_t>(DecodeAlignment(w.format)))
      .RequirePositive(w.rows, "w.rows")
      .RequirePositive(w.cols, "w.cols")
      .Require(!IsBlockFormat(w.format) || w.cols % BlockElements(w.format) == 0,
               "w.cols %d must be a multiple of %s's block of %d", w.cols,
               WeightFormatName(w.format), BlockElements(w.format))
      .Require(!IsBlockFormat(w.format) || w.row_bytes == FormatRowBytes(w.format, w.cols),
               "w.row_bytes %d must be %d for %d %s columns", static_cast<int64_t>(w.row_bytes),
               static_cast<int64_t>(FormatRowBytes(w.format, w.cols)), w.cols,
               WeightFormatName(w.format));
}

}  // namespace

bool Fp8TensorCoresFit(const DeviceMatrix& w) {
  return w.format == WeightFormat::kFp8 && w.cols > 0 && w.cols % kQuantUnit == 0 && w.rows > 0 &&
         w.row_bytes == static_cast<size_t>(w.cols) &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_scales != nullptr &&
         reinterpret_cast<uintptr_t>(w.row_scales) % 4 == 0;
}

namespace {

// The fused products' token count and output rules (P: QuantGemvParams or
// QuantGemvInt8Params): out and ld_out, or in GLU mode an even w.rows, glu_out and no
// accumulation.
template <typename P>
void CheckFusedOutput(ArgCheck& check, const P& p) {
  check.RequireRange(p.num_tokens, 1, kQuantGemvMaxTokens, "num_tokens");
  if (p.glu_out != nullptr) {
    check.RequirePointer(p.glu_out, "glu_out", 2)
        .Require(p.w.rows % 2 == 0, "GLU mode needs gate and up rows alike, not w.rows %d",
                 p.w.rows)
        .Require(!p.accumulate, "GLU mode does not accumulate");
    return;
  }
  check.RequirePointer(p.out, "out", 4)
      .Require(p.ld_out >= p.w.rows, "ld_out %d must be at least w.rows %d", p.ld_out, p.w.rows);
}

// The GEMVs over whole rows of `format` (LaunchDenseGemv, LaunchFp8Gemv): their checks (the
// fused output rules, 16-byte aligned rows of element_bytes per column, read 16 bytes at a
// time, x aligned to x_align) and their launch, kernel_of(T{}, std::bool_constant<glu>{}) the
// kernel for the dtype T and the mode.
template <typename KernelOf>
absl::Status LaunchRowGemv(const QuantGemvParams& p, cudaStream_t stream, const char* name,
                           WeightFormat format, int element_bytes, int x_align,
                           KernelOf kernel_of) {
  ArgCheck check(name);
  CheckFusedOutput(check, p);
  const int per_load = 16 / element_bytes;
  check
      .Require(p.w.format == format, "w must be %s, not %s", WeightFormatName(format),
               WeightFormatName(p.w.format))
      .RequirePointer(p.w.data, "w.data", 16)
      .RequirePositive(p.w.rows, "w.rows")
      .Require(p.w.cols > 0 && p.w.cols % per_load == 0,
               "w.cols %d must be a positive multiple of %d", p.w.cols, per_load)
      .Require(p.w.row_bytes == static_cast<size_t>(p.w.cols) * element_bytes,
               "w.row_bytes %d must be %d x w.cols %d", static_cast<int64_t>(p.w.row_bytes),
               element_bytes, p.w.cols)
      .RequirePointer(p.x, "x", x_align);
  RETURN_IF_ERROR(check.status());
  const dim3 grid = GemvGrid(p.w.rows, p.glu_out != nullptr);
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto t) {
                                    return DispatchGlu(p.glu_out != nullptr, [&](auto glu) {
                                      return LaunchKernelAfterPrior(kernel_of(t, glu), grid,
                                                                    dim3(kGemvWarps * 32), 0,
                                                                    stream, p);
                                    });
                                  }),
                    name);
}

// The wgmma product (quant_gemm_wgmma.cuh) for kN tokens a block.
template <WeightFormat F, typename T, int kN>
cudaError_t LaunchWgmmaGemm(const QuantGemvParams& p, dim3 grid, int split_steps,
                            cudaStream_t stream) {
  namespace qw = quant_wgmma;
  constexpr size_t kSmem = qw::SmemBytes<kN>();
  constexpr auto* kKernel = qw::QuantGemmWgmmaKernel<F, T, kN>;
  if (const cudaError_t err = OptInSharedMemory<kKernel>(kSmem); err != cudaSuccess) return err;
  return LaunchKernel(kKernel, grid, dim3(qw::kThreads), kSmem, stream, p, split_steps);
}

// The wgmma kernel's tokens a block: 32, 64 or 128.
int WgmmaTokenTile(int num_tokens) { return num_tokens <= 32 ? 32 : num_tokens <= 64 ? 64 : 128; }

// The wgmma kernel's steps of 64 columns along a row of `cols` (an even count:
// quant_gemm_wgmma.cuh).
int WgmmaSteps(int cols) { return (cols / kQuantUnit + 3) / 4 * 2; }

// A split's steps when k_splits are asked for: whole pairs, k_splits clamped to [1, kMaxKSplits].
int SplitSteps(int cols, int k_splits) {
  const int asked = std::clamp(k_splits, 1, kMaxKSplits);
  return (WgmmaSteps(cols) / 2 + asked - 1) / asked * 2;
}

}  // namespace

absl::Status LaunchQuantGemv(const QuantGemvParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchQuantGemv");
  CheckMatrix(check, p.w);
  CheckFusedOutput(check, p);
  check.RequirePointer(p.x, "x", 2);
  RETURN_IF_ERROR(check.status());
  const dim3 grid = GemvGrid(p.w.rows, p.glu_out != nullptr);
  return CudaStatus(
      DispatchFormat(
          p.w.format,
          [&](auto format) {
            return DispatchDType(p.dtype, [&](auto t) {
              return DispatchGlu(p.glu_out != nullptr, [&](auto glu) {
                return LaunchKernelAfterPrior(
                    QuantGemvKernel<decltype(format)::kFormat, decltype(t), decltype(glu)::value>,
                    grid, dim3(kGemvWarps * 32), 0, stream, p);
              });
            });
          }),
      "LaunchQuantGemv");
}

absl::Status LaunchDenseGemv(const QuantGemvParams& p, cudaStream_t stream) {
  return LaunchRowGemv(
      p, stream, "LaunchDenseGemv", WeightFormat::kDense, 2, 2,
      [](auto t, auto glu) { return DenseGemvKernel<decltype(t), decltype(glu)::value>; });
}

absl::Status LaunchFp8Gemv(const QuantGemvParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchFp8Gemv");
  check.RequirePointer(p.w.row_scales, "w.row_scales", 4);
  RETURN_IF_ERROR(check.status());
  return LaunchRowGemv(p, stream, "LaunchFp8Gemv", WeightFormat::kFp8, 1, 16, [](auto t, auto glu) {
    return Fp8GemvKernel<decltype(t), decltype(glu)::value>;
  });
}

absl::Status LaunchQuantizeQ8Blocks(const Q8BlocksParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchQuantizeQ8Blocks");
  check.RequirePositive(p.tokens, "tokens")
      .RequirePositive(p.cols, "cols")
      .Require(p.cols % kQuantUnit == 0, "cols %d must be a multiple of 32", p.cols)
      .RequirePointer(p.x, "x", 2)
      .RequirePointer(p.q, "q", 4)
      .RequirePointer(p.ds, "ds", 8);
  RETURN_IF_ERROR(check.status());
  const size_t blocks = static_cast<size_t>(p.tokens) * (p.cols / kQuantUnit);
  const unsigned grid = static_cast<unsigned>(std::min<size_t>((blocks + 127) / 128, 65536));
  return CudaStatus(DispatchDType(p.dtype,
                                  [&](auto t) {
                                    return LaunchKernelAfterPrior(
                                        QuantizeQ8BlocksKernel<decltype(t)>, dim3(grid), dim3(128),
                                        0, stream, p);
                                  }),
                    "LaunchQuantizeQ8Blocks");
}

absl::Status LaunchQuantGemvInt8(const QuantGemvInt8Params& p, cudaStream_t stream) {
  ArgCheck check("LaunchQuantGemvInt8");
  CheckMatrix(check, p.w);
  CheckFusedOutput(check, p);
  check.RequirePointer(p.xq, "xq", 4).RequirePointer(p.ds, "ds", 8);
  RETURN_IF_ERROR(check.status());
  const dim3 grid = GemvGrid(p.w.rows, p.glu_out != nullptr);
  return CudaStatus(DispatchFormat(p.w.format,
                                   [&](auto format) {
                                     constexpr WeightFormat kF = decltype(format)::kFormat;
                                     if (p.glu_out == nullptr) {  // the dtype is glu_out's only
                                       return LaunchKernelAfterPrior(
                                           QuantGemvInt8Kernel<kF, __nv_bfloat16, false>, grid,
                                           dim3(kGemvWarps * 32), 0, stream, p);
                                     }
                                     return DispatchDType(p.dtype, [&](auto t) {
                                       return LaunchKernelAfterPrior(
                                           QuantGemvInt8Kernel<kF, decltype(t), true>, grid,
                                           dim3(kGemvWarps * 32), 0, stream, p);
                                     });
                                   }),
                    "LaunchQuantGemvInt8");
}

absl::Status LaunchQuantGemm(const QuantGemvParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchQuantGemm");
  if (p.w.format == WeightFormat::kFp8) {
    check.Require(Fp8TensorCoresFit(p.w),
                  "FP8 w needs 16-byte aligned rows of a multiple of 32 columns (%d) and scales",
                  p.w.cols);
  } else {
    CheckMatrix(check, p.w);
  }
  check.RequirePositive(p.num_tokens, "num_tokens")
      .Require(p.glu_out == nullptr, "LaunchQuantGemm has no GLU mode (the GEMVs' only)")
      .Require(p.k_splits >= 1, "k_splits %d must be at least 1", p.k_splits)
      .RequirePointer(p.x, "x", 16)
      .RequirePointer(p.out, "out", 4)
      .Require(p.ld_out >= p.w.rows, "ld_out %d must be at least w.rows %d", p.ld_out, p.w.rows);
  RETURN_IF_ERROR(check.status());
  const bool has_wgmma = WgmmaAvailable();
  if (p.gemm_kernel == QuantGemmKernel::kWgmma ||
      (p.gemm_kernel == QuantGemmKernel::kAuto && has_wgmma)) {
    namespace qw = quant_wgmma;
    const int row_tiles = (p.w.rows + qw::kRows - 1) / qw::kRows;
    RETURN_IF_ERROR(
        check.Require(has_wgmma, "gemm_kernel wgmma needs a GPU of compute capability 9.0")
            .Require(row_tiles <= 65535, "w.rows %d needs %d tiles of %d, over 65535", p.w.rows,
                     row_tiles, qw::kRows)
            .status());
    const int n = WgmmaTokenTile(p.num_tokens);
    const int split_steps = SplitSteps(p.w.cols, p.k_splits);
    const int splits = QuantGemmSplits(p.w.cols, p.k_splits);
    const dim3 grid((p.num_tokens + n - 1) / n, row_tiles, splits);
    if (splits > 1) {
      const int tiles = QuantGemmTiles(p.w.rows, p.num_tokens);
      const size_t floats = QuantGemmSplitFloats(p.w.rows, p.num_tokens, splits);
      RETURN_IF_ERROR(
          check.RequirePointer(p.split.partials, "split.partials", 16)
              .RequirePointer(p.split.counters, "split.counters", 4)
              .Require(p.split.partial_floats >= floats,
                       "split.partial_floats %d is below the %d that %d splits of %d tiles need",
                       static_cast<int64_t>(p.split.partial_floats), static_cast<int64_t>(floats),
                       splits, tiles)
              .Require(p.split.num_counters >= tiles, "split.num_counters %d is below the %d tiles",
                       p.split.num_counters, tiles)
              .status());
    }
    return CudaStatus(DispatchTensorFormat(
                          p.w.format,
                          [&](auto format) {
                            return DispatchDType(p.dtype, [&](auto t) {
                              constexpr WeightFormat kF = decltype(format)::kFormat;
                              using T = decltype(t);
                              switch (n) {
                                case 32:
                                  return LaunchWgmmaGemm<kF, T, 32>(p, grid, split_steps, stream);
                                case 64:
                                  return LaunchWgmmaGemm<kF, T, 64>(p, grid, split_steps, stream);
                                default:
                                  return LaunchWgmmaGemm<kF, T, 128>(p, grid, split_steps, stream);
                              }
                            });
                          }),
                      "LaunchQuantGemm");
  }
  const dim3 grid((p.w.rows + kMmaRows - 1) / kMmaRows,
                  (p.num_tokens + kMmaTokens - 1) / kMmaTokens);
  return CudaStatus(
      DispatchTensorFormat(p.w.format,
                           [&](auto format) {
                             return DispatchDType(p.dtype, [&](auto t) {
                               return LaunchKernel(
                                   QuantGemmMmaKernel<decltype(format)::kFormat, decltype(t)>, grid,
                                   dim3(kMmaThreads), 0, stream, p);
                             });
                           }),
      "LaunchQuantGemm");
}

int QuantGemmTiles(int rows, int num_tokens) {
  const int n = WgmmaTokenTile(num_tokens);
  return (num_tokens + n - 1) / n * ((rows + quant_wgmma::kRows - 1) / quant_wgmma::kRows);
}

int QuantGemmSplits(int cols, int k_splits) {
  const int split_steps = SplitSteps(cols, k_splits);
  return (WgmmaSteps(cols) + split_steps - 1) / split_steps;
}

size_t QuantGemmSplitFloats(int rows, int num_tokens, int k_splits) {
  if (k_splits <= 1) return 0;
  return static_cast<size_t>(QuantGemmTiles(rows, num_tokens)) * static_cast<size_t>(k_splits) *
         quant_wgmma::kRows * static_cast<size_t>(WgmmaTokenTile(num_tokens));
}

size_t QuantGemmSplitCapacity(int tiles_x_splits) {
  return static_cast<size_t>(std::max(tiles_x_splits, 0)) * quant_wgmma::kRows * 128;
}

int QuantGemmAutoSplits(int rows, int cols, int num_tokens, int num_sms) {
  const int tiles = QuantGemmTiles(rows, num_tokens);
  if (tiles >= num_sms) return 1;
  const int by_sms = 2 * num_sms / tiles;
  const int by_steps = WgmmaSteps(cols) / kMinSplitSteps;
  return std::max(1, std::min({by_sms, by_steps, kMaxKSplits}));
}

absl::Status PrepareQuantGemm(WeightFormat format, DType dtype, QuantGemmKernel kernel) {
  if (format == WeightFormat::kDense || kernel == QuantGemmKernel::kMmaSync || !WgmmaAvailable()) {
    return absl::OkStatus();
  }
  namespace qw = quant_wgmma;
  return CudaStatus(
      DispatchTensorFormat(
          format,
          [&](auto f) {
            return DispatchDType(dtype, [&](auto t) {
              constexpr WeightFormat kF = decltype(f)::kFormat;
              using T = decltype(t);
              cudaError_t err =
                  OptInSharedMemory<qw::QuantGemmWgmmaKernel<kF, T, 32>>(qw::SmemBytes<32>());
              if (err == cudaSuccess) {
                err = OptInSharedMemory<qw::QuantGemmWgmmaKernel<kF, T, 64>>(qw::SmemBytes<64>());
              }
              if (err != cudaSuccess) return err;
              return OptInSharedMemory<qw::QuantGemmWgmmaKernel<kF, T, 128>>(qw::SmemBytes<128>());
            });
          }),
      "PrepareQuantGemm");
}

absl::Status LaunchDequantizeRows(const DequantizeRowsParams& p, cudaStream_t stream) {
  ArgCheck check("LaunchDequantizeRows");
  CheckMatrix(check, p.w);
  check.RequirePositive(p.num_rows, "num_rows")
      .RequirePointer(p.out, "out", p.out_f32 ? 4 : 2)
      .Require(p.rows != nullptr || (p.first_row >= 0 && p.first_row + p.num_rows <= p.w.rows),
               "rows [%d, %d) must lie in the matrix's %d", p.first_row, p.first_row + p.num_rows,
               p.w.rows);
  RETURN_IF_ERROR(check.status());
  return CudaStatus(
      DispatchFormat(p.w.format,
                     [&](auto format) {
                       constexpr WeightFormat kF = decltype(format)::kFormat;
                       if (p.out_f32) {
                         return LaunchKernel(DequantizeRowsKernel<kF, float>, dim3(p.num_rows),
                                             dim3(kDequantThreads), 0, stream, p);
                       }
                       return DispatchDType(p.dtype, [&](auto t) {
                         return LaunchKernel(DequantizeRowsKernel<kF, decltype(t)>,
                                             dim3(p.num_rows), dim3(kDequantThreads), 0, stream, p);
                       });
                     }),
      "LaunchDequantizeRows");
}

absl::Status LaunchFillRandomBlocks(const DeviceMatrix& w, float amplitude, uint64_t seed,
                                    cudaStream_t stream) {
  ArgCheck check("LaunchFillRandomBlocks");
  CheckMatrix(check, w);
  RETURN_IF_ERROR(check.status());
  const size_t blocks = w.bytes() / static_cast<size_t>(BlockBytes(w.format));
  const int threads = 256;
  const size_t grid = std::min<size_t>((blocks + threads - 1) / threads, 65536);
  return CudaStatus(
      LaunchKernel(FillRandomBlocksKernel, dim3(static_cast<unsigned>(grid)), dim3(threads), 0,
                   stream, static_cast<uint8_t*>(const_cast<void*>(w.data)), blocks,
                   BlockBytes(w.format), w.format, amplitude, seed),
      "LaunchFillRandomBlocks");
}

}  // namespace pagoda::worker::cuda
