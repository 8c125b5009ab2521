// The machine's own limits for bench/cpu.sh, measured with the widest vector set this CPU runs:
// FMA throughput (independent chains, no memory traffic), byte dot product throughput (VNNI),
// and read bandwidth (a sum over a buffer larger than the caches). Each runs on the calling
// thread; the benchmark runs them on each thread of the backend's pool.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::bench {

// Runs `iterations` rounds of the FMA loop; returns the floating-point operations done (2 per
// lane per FMA), and stores a value derived from the result in *sink.
double FmaLoop(int64_t iterations, float* sink);

// Runs `iterations` rounds of a loop of byte dot products (vpdpbusd, independent chains, no
// memory traffic) where the CPU has AVX-512 VNNI: the ceiling of the quantized products, which
// multiply bytes. Returns the integer operations done (2 per byte product, as a GEMM's FLOP
// count takes them; 0 without VNNI), and stores a value derived from the result in *sink.
double Int8DotLoop(int64_t iterations, int32_t* sink);

// Sums `n` floats (n a multiple of 64); the result keeps the loads alive.
float ReadSum(const float* data, size_t n);

}  // namespace pagoda::bench
