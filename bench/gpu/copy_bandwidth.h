// The physical limit GPU benchmarks are measured against: device-to-device copy bandwidth,
// counting bytes read plus bytes written, measured once per process on the current device.
#pragma once

namespace pagoda::bench {

// Bytes per second (read + written) of a 2 GiB cudaMemcpyAsync device-to-device copy: the
// median of 20 timed copies after warm-up, on random data. Aborts when CUDA fails.
double CopyBandwidth();

// Aborts with file:line and the CUDA error text when `err` is not cudaSuccess.
void CheckCuda(int err, const char* what, const char* file, int line);

}  // namespace pagoda::bench

#define PAGODA_BENCH_CUDA(expr) \
  ::pagoda::bench::CheckCuda(static_cast<int>(expr), #expr, __FILE__, __LINE__)
