// Settings bench/gpu.sh passes to gpu_bench through the environment (Google Benchmark's main
// refuses flags it does not know).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "worker/backend/cuda/attention/paged_attention.h"

namespace pagoda::bench {

// GPU_BENCH_PREFILL_KERNEL=auto|mma_sync|wgmma: the prefill attention kernel behind every
// "kernel:auto" benchmark and the backend's --prefill-attention (default auto, the launcher's
// pick). bench/gpu.sh sets mma_sync when the attention tests failed, so a faulty wgmma kernel
// costs its own rows and not the rest of the call. Aborts on another value.
inline worker::cuda::PrefillKernel BenchPrefillKernel() {
  using worker::cuda::PrefillKernel;
  const char* v = std::getenv("GPU_BENCH_PREFILL_KERNEL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return PrefillKernel::kAuto;
  if (std::strcmp(v, "mma_sync") == 0) return PrefillKernel::kMmaSync;
  if (std::strcmp(v, "wgmma") == 0) return PrefillKernel::kWgmma;
  std::fprintf(stderr, "GPU_BENCH_PREFILL_KERNEL=%s: want auto, mma_sync or wgmma\n", v);
  std::abort();
}

}  // namespace pagoda::bench
