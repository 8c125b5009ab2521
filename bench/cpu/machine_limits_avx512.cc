// AVX-512 versions of machine_limits.h (this file is compiled with AVX-512 flags).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace pagoda::bench {

double FmaLoopAvx512(int64_t iterations, float* sink) {
  constexpr int kChains = 16;  // enough independent FMAs to cover latency x 2 ports
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  *sink = lanes[0] + lanes[15];
  return 2.0 * 16 * kChains * static_cast<double>(iterations);
}

// Compiled for VNNI in this function only; called only where the CPU has it.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double Int8DotLoopVnni(int64_t iterations,
                                                                              int32_t* sink) {
  constexpr int kChains = 16;  // as the FMA loop: enough to cover latency x ports
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  *sink = lanes[0] + lanes[15];
  return 2.0 * 64 * kChains * static_cast<double>(iterations);
}

float ReadSumAvx512(const float* data, size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(data + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(data + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(data + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(data + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  return lanes[0] + lanes[15];
}

}  // namespace pagoda::bench
