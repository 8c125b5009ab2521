#include "worker/backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>

namespace pagoda::worker::cpu {
namespace {

constexpr int kLanes = 8;     // independent partial sums per dot product (vectorizable)
constexpr int kRowBlock = 4;  // weight rows computed together, sharing loads of x
constexpr int kMaxHeadDim = 256;

// sum_i a[i] * b[i] with kLanes partial sums combined in a fixed order. Every dot product in
// this file goes through this exact arithmetic, which keeps results batch-invariant.
inline float Dot(const float* a, const float* b, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Four rows of w against one x row, with arithmetic identical to four Dot() calls.
inline void Dot4(const float* w, int n_in, const float* x, float* out) {
  float acc[kRowBlock][kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n_in; i += kLanes) {
    for (int r = 0; r < kRowBlock; ++r) {
      const float* wr = w + static_cast<size_t>(r) * n_in;
      for (int l = 0; l < kLanes; ++l) acc[r][l] += wr[i + l] * x[i + l];
    }
  }
  for (int r = 0; r < kRowBlock; ++r) {
    const float* wr = w + static_cast<size_t>(r) * n_in;
    for (int j = i, l = 0; j < n_in; ++j, ++l) acc[r][l] += wr[j] * x[j];
    const float* a = acc[r];
    out[r] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
  }
}

}  // namespace

void MatMul(const MatMulParams& p, int num_threads) {
  const int blocks = (p.n_out + kRowBlock - 1) / kRowBlock;
  const size_t n_in = static_cast<size_t>(p.n_in);
  const size_t n_out = static_cast<size_t>(p.n_out);
  // Parallel over blocks of weight rows: each block is read once from memory and applied to
  // every token of the batch while it sits in cache.
#pragma omp parallel for schedule(static) num_threads(num_threads) if (blocks > 1)
  for (int b = 0; b < blocks; ++b) {
    const int o = b * kRowBlock;
    const float* w = p.w + static_cast<size_t>(o) * n_in;
    for (int t = 0; t < p.num_tokens; ++t) {
      const float* x = p.x + static_cast<size_t>(t) * n_in;
      float* out = p.out + static_cast<size_t>(t) * n_out + o;
      if (o + kRowBlock <= p.n_out) {
        Dot4(w, p.n_in, x, out);
      } else {
        for (int r = 0; o + r < p.n_out; ++r) out[r] = Dot(w + r * n_in, x, p.n_in);
      }
    }
  }
}

void RmsNorm(const RmsNormParams& p) {
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* x = p.x + static_cast<size_t>(t) * p.dim;
    float* out = p.out + static_cast<size_t>(t) * p.dim;
    const float ms = Dot(x, x, p.dim) / static_cast<float>(p.dim);
    const float inv = 1.0f / std::sqrt(ms + p.eps);
    for (int i = 0; i < p.dim; ++i) out[i] = x[i] * inv * p.weight[i];
  }
}

void BuildRopeTables(const RopeTableParams& p) {
  const int half = p.head_dim / 2;
  for (int t = 0; t < p.num_tokens; ++t) {
    const double pos = p.positions[t];
    for (int i = 0; i < half; ++i) {
      const double angle = p.inv_freq != nullptr
                               ? pos * static_cast<double>(p.inv_freq[i])
                               : pos * std::pow(static_cast<double>(p.base),
                                                -2.0 * i / static_cast<double>(p.head_dim));
      p.cos[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      p.sin[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void ApplyRope(const RopeParams& p) {
  const int half = p.head_dim / 2;
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* cos_t = p.cos + static_cast<size_t>(t) * half;
    const float* sin_t = p.sin + static_cast<size_t>(t) * half;
    float* row = p.x + static_cast<size_t>(t) * p.n_heads * p.head_dim;
    for (int h = 0; h < p.n_heads; ++h) {
      float* x = row + h * p.head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cos_t[i] - b * sin_t[i];
        x[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

void WriteKv(const KvWriteParams& p) {
  const size_t kv_dim = static_cast<size_t>(p.kv_dim);
  for (int t = 0; t < p.num_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t page = p.page_tables[t][pos / p.page_size];
    const size_t slot = static_cast<size_t>(page) * p.page_size + pos % p.page_size;
    std::copy_n(p.k + t * kv_dim, kv_dim, p.k_cache + slot * kv_dim);
    std::copy_n(p.v + t * kv_dim, kv_dim, p.v_cache + slot * kv_dim);
  }
}

void PagedAttention(const PagedAttentionParams& p, int num_threads) {
  const int group = p.n_heads / p.n_kv_heads;
  const int hd = p.head_dim;
  const size_t kv_dim = static_cast<size_t>(p.n_kv_heads) * hd;
  const int work = p.num_tokens * p.n_heads;
#pragma omp parallel for schedule(dynamic, 4) num_threads(num_threads) if (work > 1)
  for (int item = 0; item < work; ++item) {
    const int t = item / p.n_heads, h = item % p.n_heads;
    const float* q = p.q + static_cast<size_t>(item) * hd;
    const size_t head_offset = static_cast<size_t>(h / group) * hd;
    const int32_t* pages = p.page_tables[t];
    // Online softmax: running max m, running denominator l, unnormalized output acc.
    float acc[kMaxHeadDim] = {};
    float m = -INFINITY, l = 0.0f;
    for (int32_t pos = 0; pos <= p.positions[t]; ++pos) {
      const size_t slot =
          static_cast<size_t>(pages[pos / p.page_size]) * p.page_size + pos % p.page_size;
      const float* k = p.k_cache + slot * kv_dim + head_offset;
      const float* v = p.v_cache + slot * kv_dim + head_offset;
      const float s = Dot(q, k, hd) * p.scale;
      if (s > m) {
        const float correction = std::exp(m - s);  // 0 on the first position
        l *= correction;
        for (int d = 0; d < hd; ++d) acc[d] *= correction;
        m = s;
      }
      const float w = std::exp(s - m);
      l += w;
      for (int d = 0; d < hd; ++d) acc[d] += w * v[d];
    }
    float* out = p.out + static_cast<size_t>(item) * hd;
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
  }
}

void SwiGlu(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace pagoda::worker::cpu
