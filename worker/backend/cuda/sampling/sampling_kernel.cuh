// Device code of the GPU sampler (sampling.h): one thread block turns one row of logits into
// one token.
//
// Per row (all loops stride by thread, every decision is uniform across the block):
//  1. Argmax pass: (max logit m, lowest id holding it), NaN read as -inf. Greedy rows
//     (temperature <= 0 or NaN, top_k == 1) and rows whose m is not finite stop here, exactly
//     like the CPU Sample().
//  2. Probability pass: p_i = min(1, expf((l_i - m) / temperature)), 0 where that is NaN
//     (NaN logits); written over the logits. p_i is in [0, 1], and for such floats the order
//     of the bit patterns (uint32) is the order of the values, so thresholds are searched as
//     integers.
//  3. Top-k (0 < k < vocab): t_k = the largest bit pattern t with #{p_i >= t} >= k, i.e. the
//     k-th largest p, by bisection (30 steps). All p_i >= t_k are kept: ties at the k-th value
//     keep a few more than k (the CPU keeps exactly k, lower ids first).
//  4. Top-p (0 < top_p < 1): t_p = the largest t >= t_k with mass{p_i >= t} >= top_p * mass
//     {p_i >= t_k}, by bisection again: the most probable tokens whose mass reaches top_p,
//     again keeping every token tied with the last one.
//  5. Min-p (0 < min_p): keep p_i >= min_p (the top token has p = 1).
//  6. Draw: target = CounterUniform(seed, index) * kept mass; the token is the lowest id whose
//     running kept mass (ids ascending) exceeds target.
//
// Masses are fixed point: weight(p) = round(p * 2^40) as uint64 (exact below 2^64 for vocab
// < 2^24), so every sum is an exact integer: the same in any summation order (deterministic
// without ordering the reductions), monotone in the threshold, and the draw always lands on a
// kept token of positive weight. Tokens with p < 2^-41 (relative to the top token, p = 1) get
// weight 0 and are never drawn: at most vocab * 2^-41 of probability, far below fp32 noise.
//
// Bisection steps read the active elements (p >= current lower bound) from the row in global
// memory until at most kCapacity of them remain; then those are copied once into shared
// memory and the remaining steps read only that list. The list's order depends on atomic slot
// allocation, which is harmless: only integer counts and sums are taken over it. The draw
// always reads the row, in id order.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "worker/backend/cuda/kernel_args.h"
#include "worker/backend/cuda/sampling/counter_uniform.cuh"

namespace pagoda::worker::cuda::sampling_internal {

inline constexpr unsigned kFullMask = 0xffffffffu;
// Bit pattern just above 1.0f: no probability reaches it (p is clamped to 1).
inline constexpr uint32_t kAboveOneBits = 0x3f800001u;
// Largest vocabulary the fixed-point masses support without overflow (2^23 * 2^40 < 2^64).
inline constexpr int kMaxVocab = kMaxSampleVocab;

// Shared memory of one block. kCapacity: how many probabilities the compacted list holds.
template <int kCapacity>
struct SampleShared {
  uint32_t list[kCapacity];  // bit patterns of the active probabilities, in no particular order
  uint32_t list_size;
  uint32_t warp_count[32];  // per-warp partial results of the block reductions
  uint64_t warp_mass[32];
  float warp_value[32];
  int32_t warp_id[32];
  int32_t draw_warp;     // the warp whose id segment holds the drawn token
  uint64_t draw_target;  // the draw's target, relative to that segment's start
};

// Fixed-point weight of a probability given by its bit pattern: round(p * 2^40), p in [0, 1].
__device__ __forceinline__ uint64_t Weight(uint32_t bits) {
  return __float2ull_rn(__uint_as_float(bits) * 1099511627776.0f);
}

__device__ __forceinline__ uint32_t WarpSum(uint32_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ uint64_t WarpSum(uint64_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

struct CountMass {
  uint32_t count;
  uint64_t mass;
};

// Sum over the block; every thread gets the total. Integer sums: exact in any order.
template <int kThreads, int kCapacity>
__device__ CountMass BlockSum(CountMass v, SampleShared<kCapacity>& s) {
  const int lane = threadIdx.x % 32;
  v.count = WarpSum(v.count);
  v.mass = WarpSum(v.mass);
  __syncthreads();  // every thread is done reading the previous reduction's partials
  if (lane == 0) {
    s.warp_count[threadIdx.x / 32] = v.count;
    s.warp_mass[threadIdx.x / 32] = v.mass;
  }
  __syncthreads();
  // Every warp sums the partials itself (lane w takes warp w's), so no third barrier.
  const bool has = lane < kThreads / 32;
  return {WarpSum(has ? s.warp_count[lane] : 0u), WarpSum(has ? s.warp_mass[lane] : uint64_t{0})};
}

struct ValueId {
  float value;
  int32_t id;
};

// Strict total order for argmax: larger value first, then lower id (values are never NaN
// here; -0 == +0, so the lower id wins, as with the CPU's `>` scan).
__device__ __forceinline__ bool Better(ValueId a, ValueId b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Every lane gets the warp's best.
__device__ __forceinline__ ValueId WarpArgmax(ValueId best) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const ValueId other{__shfl_xor_sync(kFullMask, best.value, offset),
                        __shfl_xor_sync(kFullMask, best.id, offset)};
    if (Better(other, best)) best = other;
  }
  return best;
}

// (max logit, lowest id holding it) over the row, NaN read as -inf; every thread gets it.
template <int kThreads, int kCapacity>
__device__ ValueId BlockArgmax(const float* row,  // [vocab]
                               int vocab, SampleShared<kCapacity>& s) {
  const int lane = threadIdx.x % 32;
  ValueId best{-INFINITY, INT32_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float l = row[i];
    const ValueId c{isnan(l) ? -INFINITY : l, i};
    if (Better(c, best)) best = c;
  }
  best = WarpArgmax(best);
  __syncthreads();
  if (lane == 0) {
    s.warp_value[threadIdx.x / 32] = best.value;
    s.warp_id[threadIdx.x / 32] = best.id;
  }
  __syncthreads();
  // Every warp reduces the partials itself (lane w takes warp w's): the order is irrelevant,
  // Better() being a strict total order.
  best = lane < kThreads / 32 ? ValueId{s.warp_value[lane], s.warp_id[lane]}
                              : ValueId{-INFINITY, INT32_MAX};
  return WarpArgmax(best);
}

// The elements still in play during the threshold searches: those with bits >= lo. Every
// thread holds an identical copy (all fields come from block-wide results).
template <int kThreads, int kCapacity>
class ActiveSet {
 public:
  __device__ ActiveSet(const float* row, int vocab, SampleShared<kCapacity>& s)
      : row_(row), vocab_(vocab), s_(s) {}

  __device__ uint32_t lo() const { return lo_; }

  // Raises the lower bound; `count` is the exact number of elements with bits >= lo.
  __device__ void Raise(uint32_t lo, uint32_t count) {
    lo_ = lo;
    count_ = count;
  }

  // Count (and, if kWithMass, weight) of the elements with bits >= t, for t >= lo().
  template <bool kWithMass>
  __device__ CountMass AtLeast(uint32_t t) {
    MaybeCompact();
    CountMass local{0, 0};
    if (compacted_) {
      const int n = min(static_cast<int>(s_.list_size), kCapacity);  // == count at compaction
      for (int i = threadIdx.x; i < n; i += kThreads) Add<kWithMass>(s_.list[i], t, local);
    } else {
      for (int i = threadIdx.x; i < vocab_; i += kThreads) {
        Add<kWithMass>(__float_as_uint(row_[i]), t, local);
      }
    }
    return BlockSum<kThreads>(local, s_);
  }

 private:
  template <bool kWithMass>
  __device__ static void Add(uint32_t bits, uint32_t t, CountMass& acc) {
    if (bits >= t) {
      ++acc.count;
      if (kWithMass) acc.mass += Weight(bits);
    }
  }

  // Once the active elements fit, copies them into s_.list (one pass over the row).
  __device__ void MaybeCompact() {
    if (compacted_ || count_ > static_cast<uint32_t>(kCapacity)) return;
    if (threadIdx.x == 0) s_.list_size = 0;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    // Trip count is uniform across the block, so every ballot sees the full warp.
    for (int base = 0; base < vocab_; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const uint32_t bits = i < vocab_ ? __float_as_uint(row_[i]) : 0u;
      const bool keep = i < vocab_ && bits >= lo_;
      const unsigned mask = __ballot_sync(kFullMask, keep);
      if (mask == 0) continue;
      const int leader = __ffs(mask) - 1;
      uint32_t first = 0;
      if (lane == leader) first = atomicAdd(&s_.list_size, static_cast<uint32_t>(__popc(mask)));
      first = __shfl_sync(kFullMask, first, leader);
      const uint32_t slot = first + __popc(mask & ((1u << lane) - 1u));
      // slot < count_ <= kCapacity always (count_ is exact); the check only guards memory.
      if (keep && slot < static_cast<uint32_t>(kCapacity)) s_.list[slot] = bits;
    }
    __syncthreads();
    compacted_ = true;
  }

  const float* row_;  // [vocab] probabilities
  int vocab_;
  SampleShared<kCapacity>& s_;
  uint32_t lo_ = 0;
  uint32_t count_ = 0;
  bool compacted_ = false;
};

// t_k: the largest bit pattern t with #{bits >= t} >= k, 0 < k < vocab (the k-th largest p).
template <int kThreads, int kCapacity>
__device__ void SearchTopK(ActiveSet<kThreads, kCapacity>& active, uint32_t k) {
  // Invariant: #{>= lo} >= k (true at lo = 0: all vocab >= k), #{>= hi} < k (zero at hi).
  uint32_t hi = kAboveOneBits;
  while (hi - active.lo() > 1) {
    const uint32_t mid = active.lo() + (hi - active.lo()) / 2;
    const CountMass at = active.template AtLeast<false>(mid);
    if (at.count >= k) {
      active.Raise(mid, at.count);
    } else {
      hi = mid;
    }
  }
}

// t_p: the largest t >= lo with mass{bits >= t} >= top_p * mass{bits >= lo}, 0 < top_p < 1.
template <int kThreads, int kCapacity>
__device__ void SearchTopP(ActiveSet<kThreads, kCapacity>& active, float top_p) {
  const uint64_t kept = active.template AtLeast<true>(active.lo()).mass;
  // Monotone in the mass (uint64 -> double rounding is monotone). Holds at lo since
  // top_p < 1; fails at hi because kept >= 2^40 (the top token has p = 1) and top_p > 0.
  const double need = static_cast<double>(top_p) * static_cast<double>(kept);
  uint32_t hi = kAboveOneBits;
  while (hi - active.lo() > 1) {
    const uint32_t mid = active.lo() + (hi - active.lo()) / 2;
    const CountMass at = active.template AtLeast<true>(mid);
    if (static_cast<double>(at.mass) >= need) {
      active.Raise(mid, at.count);
    } else {
      hi = mid;
    }
  }
}

// Draws the token among bits >= threshold and writes it to *out. Ids are cut into one
// contiguous segment per warp; a single thread picks the segment holding the target from the
// per-warp kept masses, then that warp scans its segment 32 ids at a time.
template <int kThreads, int kCapacity>
__device__ void Draw(const float* row,  // [vocab] probabilities
                     int vocab, uint32_t threshold, double u, int32_t fallback, int32_t* out,
                     float* out_logp, SampleShared<kCapacity>& s) {
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int segment = (vocab + kWarps - 1) / kWarps;
  const int begin = min(warp * segment, vocab);
  const int end = min(begin + segment, vocab);
  uint64_t mass = 0;
  for (int i = begin + lane; i < end; i += 32) {
    const uint32_t bits = __float_as_uint(row[i]);
    if (bits >= threshold) mass += Weight(bits);
  }
  mass = WarpSum(mass);
  __syncthreads();  // every thread is done reading the previous reduction's partials
  if (lane == 0) s.warp_mass[warp] = mass;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) total += s.warp_mass[w];
    // total >= 2^40: the top token (p = 1) is always kept.
    uint64_t target = static_cast<uint64_t>(u * static_cast<double>(total));
    if (target >= total) target = total - 1;
    int chosen = kWarps - 1;
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) {
      if (target < s.warp_mass[w]) {
        chosen = w;
        break;
      }
      target -= s.warp_mass[w];
    }
    s.draw_warp = chosen;
    s.draw_target = target;
  }
  __syncthreads();
  if (warp != s.draw_warp) return;
  const uint64_t target = s.draw_target;  // < this segment's kept mass
  int32_t token = fallback;               // unreachable with exact integer masses
  uint64_t before = 0;                    // kept mass of the segment's ids below `base`
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    uint64_t inclusive = 0;
    if (i < end) {
      const uint32_t bits = __float_as_uint(row[i]);
      if (bits >= threshold) inclusive = Weight(bits);
    }
    for (int offset = 1; offset < 32; offset <<= 1) {
      const uint64_t other = __shfl_up_sync(kFullMask, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    const unsigned hit = __ballot_sync(kFullMask, before + inclusive > target);
    if (hit != 0) {
      token = base + __ffs(hit) - 1;
      break;
    }
    before += __shfl_sync(kFullMask, inclusive, 31);
  }
  if (lane == 0) {
    *out = token;
    if (out_logp != nullptr) *out_logp = logf(row[token]);  // (l - m) / T
  }
}

// The whole row: called by every thread of block `row_index` with blockDim.x == kThreads.
template <int kThreads, int kCapacity>
__device__ void SampleRow(float* logits,                  // [rows][vocab]
                          const SampleRowParams* params,  // [rows]
                          int32_t* out_tokens,            // [rows]
                          float* out_logp,                // [rows] or null
                          int vocab, int row_index, SampleShared<kCapacity>& s) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  float* row = logits + static_cast<size_t>(row_index) * static_cast<size_t>(vocab);
  const SampleRowParams p = params[row_index];
  const ValueId top = BlockArgmax<kThreads>(row, vocab, s);
  if (!(p.temperature > 0) || p.top_k == 1 || !isfinite(top.value)) {
    if (threadIdx.x == 0) {
      out_tokens[row_index] = top.id;
      if (out_logp != nullptr) out_logp[row_index] = 0.0f;  // the top token: (m - m) / T
    }
    return;
  }
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    // NaN from a NaN logit (or from -inf / +inf temperature) is probability 0.
    const float e = expf((row[i] - top.value) / p.temperature);
    row[i] = isnan(e) ? 0.0f : fminf(e, 1.0f);
  }
  __syncthreads();  // the draw reads probabilities written by other threads
  ActiveSet<kThreads, kCapacity> active(row, vocab, s);
  active.Raise(0, static_cast<uint32_t>(vocab));
  if (p.top_k > 0 && p.top_k < vocab) {
    SearchTopK(active, static_cast<uint32_t>(p.top_k));
  }
  if (p.top_p > 0 && p.top_p < 1) SearchTopP(active, p.top_p);
  // Min-p: the top token has p = 1, so the floor min_p * p_max is min_p itself (<= 1: the top
  // token stays). Only the draw reads the threshold from here on.
  uint32_t threshold = active.lo();
  if (p.min_p > 0) threshold = max(threshold, __float_as_uint(fminf(p.min_p, 1.0f)));
  Draw<kThreads>(row, vocab, threshold, CounterUniform(p.seed, p.index), top.id,
                 out_tokens + row_index, out_logp == nullptr ? nullptr : out_logp + row_index, s);
}

}  // namespace pagoda::worker::cuda::sampling_internal
