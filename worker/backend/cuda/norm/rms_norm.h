// RMSNorm on the GPU: the launcher takes the CPU twin's Params (device pointers here).
//
// One block per token; the block reduces the sum of squares in float, then scales. Launchers
// never allocate or synchronize.
#pragma once

#include <cuda_runtime.h>

#include "worker/backend/cpu/kernel_params.h"

namespace pagoda::worker::cuda {

// p.x, p.weight, p.out: device pointers with the shapes documented in cpu::RmsNormParams.
cudaError_t LaunchRmsNorm(const cpu::RmsNormParams& p, cudaStream_t stream);

}  // namespace pagoda::worker::cuda
