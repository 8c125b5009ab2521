#include "bench/cpu/machine_limits.h"

#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::bench {

double FmaLoopAvx512(int64_t iterations, float* sink);
double FmaLoopAvx2(int64_t iterations, float* sink);
double Int8DotLoopVnni(int64_t iterations, int32_t* sink);
float ReadSumAvx512(const float* data, size_t n);
float ReadSumAvx2(const float* data, size_t n);

using worker::cpu::CpuIsa;

double FmaLoop(int64_t iterations, float* sink) {
  switch (worker::cpu::BestSupportedIsa()) {
    case CpuIsa::kAvx512Amx:
    case CpuIsa::kAvx512Vnni:
    case CpuIsa::kAvx512:
      return FmaLoopAvx512(iterations, sink);
    case CpuIsa::kAvx2:
      return FmaLoopAvx2(iterations, sink);
    default: {
      float acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      for (int64_t it = 0; it < iterations; ++it) {
        for (float& a : acc) a = a * 0.999999f + 1e-7f;
      }
      *sink = acc[0] + acc[7];
      return 2.0 * 8 * static_cast<double>(iterations);
    }
  }
}

double Int8DotLoop(int64_t iterations, int32_t* sink) {
  switch (worker::cpu::BestSupportedIsa()) {
    case CpuIsa::kAvx512Amx:
    case CpuIsa::kAvx512Vnni:
      return Int8DotLoopVnni(iterations, sink);
    default:
      *sink = 0;
      return 0.0;
  }
}

float ReadSum(const float* data, size_t n) {
  switch (worker::cpu::BestSupportedIsa()) {
    case CpuIsa::kAvx512Amx:
    case CpuIsa::kAvx512Vnni:
    case CpuIsa::kAvx512:
      return ReadSumAvx512(data, n);
    case CpuIsa::kAvx2:
      return ReadSumAvx2(data, n);
    default: {
      float s[4] = {};
      for (size_t i = 0; i < n; i += 4) {
        for (int l = 0; l < 4; ++l) s[l] += data[i + l];
      }
      return s[0] + s[1] + s[2] + s[3];
    }
  }
}

}  // namespace pagoda::bench
