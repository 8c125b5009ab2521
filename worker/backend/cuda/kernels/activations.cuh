// The gated activation of the feed-forward block, shared by the kernels that compute it
// (LaunchSiluMul, and the GEMVs' GLU mode in quant_kernels.h), so that the fused and the
// separate paths give the same values bit for bit.
#pragma once

#include <cuda_runtime.h>

namespace pagoda::worker::cuda {

// silu(g) * u = g / (1 + e^-g) * u, with the fast exponential.
__device__ __forceinline__ float SiluTimes(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

}  // namespace pagoda::worker::cuda
