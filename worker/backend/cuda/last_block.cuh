// The last-block handshake of a grid whose blocks each leave a partial result of one unit of work
// in global memory (a tile's split-K sums, a sequence's attention partitions), so that the block
// that finishes last combines them in the same launch instead of a kernel after it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::worker::cuda {

// Called by every thread of a one-dimensional block once its stores of the block's partial
// result are issued; `counter` counts the unit's blocks and is zero before the first of them
// arrives. Returns true in every thread of the block that arrives last of `expected` (the other
// blocks' partials are then visible to it; its callers read them with __ldcg, from L2, so that no
// line this multiprocessor's L1 may hold comes into it), and false in the others, which should
// exit. The last block sets the counter back to zero, so the next launch over the same counters
// starts from zero (launches on one stream run in order).
__device__ __forceinline__ bool ArrivesLast(uint32_t* counter, uint32_t expected) {
  __threadfence();  // this thread's stores reach the GPU before the count says so
  __syncthreads();
  __shared__ uint32_t arrived;
  if (threadIdx.x == 0) arrived = atomicAdd(counter, 1u);
  __syncthreads();
  if (arrived + 1 < expected) return false;
  __threadfence();  // the other blocks' stores, counted before, are read after
  if (threadIdx.x == 0) *counter = 0;
  return true;
}

}  // namespace pagoda::worker::cuda
