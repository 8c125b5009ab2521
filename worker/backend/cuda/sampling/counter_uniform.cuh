// The CPU sampler's counter-based uniform draw (worker::CounterUniform in
// worker/sampling/sampler.h), callable on the host and the device.
//
// Contract: CounterUniform(seed, index) here returns bit for bit what worker::CounterUniform
// returns: splitmix64-style mixing on uint64 (wrapping multiplications, identical on host and
// device) and an exact 53-bit to double conversion. So a sequence sampled on the GPU draws the
// same numbers it would draw on the CPU. This header also compiles with a plain C++ compiler
// (cuda_runtime.h defines __host__/__device__ as nothing there), so host tests can include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::worker::cuda {

__host__ __device__ inline uint64_t CounterMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1): the top 53 bits of the mixed counter, scaled by 2^-53 (exact).
__host__ __device__ inline double CounterUniform(uint64_t seed, uint64_t index) {
  const uint64_t bits =
      CounterMix64(CounterMix64(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// Test hook: out[i] = CounterUniform(seeds[i], indices[i]) computed on the device, i < n.
// All pointers are device pointers, each [n]. Never allocates or synchronizes.
cudaError_t LaunchCounterUniformForTesting(const uint64_t* seeds, const uint64_t* indices,
                                           double* out, int n, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
