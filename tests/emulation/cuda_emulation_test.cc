// The host emulator of the CUDA execution model (worker/backend/cuda/emulation): built-in
// indices, block barriers, the warp intrinsics' lane arithmetic, dynamic shared memory, and the
// failures it must report instead of hanging (divergent barriers, shuffles with exited lanes).
// The kernels below are written as for nvcc; the emulator makes them plain C++.
#include "tests/support/cuda_emulation/cuda_emulation.h"
// (first: it defines the device dialect the kernels below use)

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "worker/backend/cuda/launch.cuh"
#include "worker/backend/cuda/mma.cuh"
#include "worker/backend/cuda/wgmma.cuh"

namespace pagoda::worker::cuda {
namespace {

__global__ void RecordIndices(uint32_t* out) {  // [grid threads][4]
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned local = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned id = block * blockDim.x * blockDim.y * blockDim.z + local;
  out[id * 4 + 0] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
  out[id * 4 + 1] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
  out[id * 4 + 2] = blockDim.x * blockDim.y * blockDim.z;
  out[id * 4 + 3] = gridDim.x * gridDim.y * gridDim.z;
}

TEST(CudaEmulationTest, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(4, 2, 3);
  const int threads = 12 * 24;
  std::vector<uint32_t> out(threads * 4, 0xdeadbeef);
  ASSERT_EQ(LaunchKernel(RecordIndices, grid, block, 0, nullptr, out.data()), cudaSuccess);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (int i = 0; i < threads; ++i) {
    EXPECT_EQ(out[i * 4 + 2], 24u);
    EXPECT_EQ(out[i * 4 + 3], 12u);
    seen.insert({out[i * 4], out[i * 4 + 1]});
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(threads));
}

// Each thread writes its slot, waits, then reads its neighbour's: wrong without the barrier.
__global__ void RotateThroughShared(const int* in, int* out) {
  __shared__ int slot[256];
  slot[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmulationTest, SyncThreadsOrdersSharedMemory) {
  std::vector<int> in(3 * 256), out(in.size(), -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 + 1);
  for (int run = 0; run < 3; ++run) {
    ASSERT_EQ(LaunchKernel(RotateThroughShared, 3, 256, 0, nullptr, in.data(), out.data()),
              cudaSuccess);
    for (int b = 0; b < 3; ++b) {
      for (int t = 0; t < 256; ++t) ASSERT_EQ(out[b * 256 + t], in[b * 256 + (t + 1) % 256]);
    }
  }
}

// The same without the barrier: a thread may read its neighbour's slot before it is written.
__global__ void RotateWithoutBarrier(int* out) {
  __shared__ int slot[64];
  slot[threadIdx.x] = 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 64; ++i) slot[i] = 0;  // only thread 0 resets: the race's other side
  }
  __syncthreads();
  slot[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];
}

TEST(CudaEmulationTest, RacesShowAsResultsThatChangeBetweenLaunches) {
  std::set<std::vector<int>> outcomes;
  for (int run = 0; run < 8; ++run) {
    std::vector<int> out(64, -1);
    ASSERT_EQ(LaunchKernel(RotateWithoutBarrier, 1, 64, 0, nullptr, out.data()), cudaSuccess);
    outcomes.insert(out);
  }
  EXPECT_GT(outcomes.size(), 1u) << "the fibers ran in the same order every launch";
}

__global__ void WarpIntrinsics(int* out) {  // [blockDim.x][5]
  const int lane = threadIdx.x % 32;
  const int v = static_cast<int>(threadIdx.x) * 10;
  int* o = out + threadIdx.x * 5;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[1] = __shfl_up_sync(0xffffffffu, v, 3);
  o[2] = __shfl_sync(0xffffffffu, v, 7);
  o[3] = __shfl_sync(0xffffffffu, v, lane + 1, 8);  // within segments of 8 lanes
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0) == 0x49249249u);
}

TEST(CudaEmulationTest, ShufflesAndBallotFollowTheLaneRules) {
  std::vector<int> out(64 * 5, -1);
  ASSERT_EQ(LaunchKernel(WarpIntrinsics, 1, 64, 0, nullptr, out.data()), cudaSuccess);
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32, lane = t % 32;
    const int* o = out.data() + t * 5;
    EXPECT_EQ(o[0], (warp * 32 + (lane ^ 5)) * 10) << t;
    EXPECT_EQ(o[1], (lane >= 3 ? t - 3 : t) * 10) << t;  // lanes below delta keep their own
    EXPECT_EQ(o[2], (warp * 32 + 7) * 10) << t;
    EXPECT_EQ(o[3], (warp * 32 + lane / 8 * 8 + (lane + 1) % 8) * 10) << t;
    EXPECT_EQ(o[4], 1) << t;
  }
}

// One warp: A (16 x 16) from shared memory by ldmatrix, B (16 x 16, two n8 tiles) by
// ldmatrix.trans from its row-major [k][n] copy and by ldmatrix from its [n][k] copy, then
// D = A·B + C with mma.sync for each tile. Rows are padded (stride 24) as kernels pad them.
// out: [32 lanes][4 A regs, 4 B regs (trans), 4 B regs ([n][k])], d: [16][16] floats.
constexpr int kStride = 24;
__global__ void MmaFragments(const uint16_t* a, const uint16_t* b, const float* c, uint32_t* out,
                             float* d) {
  __shared__ __align__(16) uint16_t a_s[16 * kStride], b_kn[16 * kStride], b_nk[16 * kStride];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) {
    a_s[i / 16 * kStride + i % 16] = a[i];
    b_kn[i / 16 * kStride + i % 16] = b[i];  // [k][n]
    b_nk[i % 16 * kStride + i / 16] = b[i];  // [n][k]
  }
  __syncthreads();
  uint32_t fa[4], fb[4], fbt[4];
  mma::LdMatrixX4(fa, a_s + (lane % 16) * kStride + lane / 16 * 8);
  mma::LdMatrixX4Trans(fb, b_kn + (lane % 16) * kStride + lane / 16 * 8);
  mma::LdMatrixX4(fbt, b_nk + (lane / 16 * 8 + lane % 8) * kStride + (lane / 8 % 2) * 8);
  for (int i = 0; i < 4; ++i) {
    out[lane * 12 + i] = fa[i];
    out[lane * 12 + 4 + i] = fb[i];
    out[lane * 12 + 8 + i] = fbt[i];
  }
  const int g = lane / 4, t = lane % 4;
  for (int n = 0; n < 2; ++n) {
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = c[(g + 8 * (i / 2)) * 16 + 8 * n + 2 * t + i % 2];
    mma::MmaM16N8K16<__nv_bfloat16>(acc, fa, fb[2 * n], fb[2 * n + 1]);
    for (int i = 0; i < 4; ++i) d[(g + 8 * (i / 2)) * 16 + 8 * n + 2 * t + i % 2] = acc[i];
  }
}

TEST(CudaEmulationTest, LdMatrixAndMmaFollowThePtxFragmentLayouts) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-64, 64);
  // Multiples of 1/16 below 4 in magnitude: exact in bf16, products and sums exact in fp32.
  std::vector<float> af(256), bf(256), cf(256);
  std::vector<uint16_t> a(256), b(256);
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  for (int i = 0; i < 256; ++i) {
    af[i] = small(rng) / 16.0f, bf[i] = small(rng) / 16.0f, cf[i] = small(rng) / 4.0f;
    a[i] = bits(af[i]), b[i] = bits(bf[i]);
  }
  std::vector<uint32_t> out(32 * 12, 0);
  std::vector<float> d(256, 0.0f);
  ASSERT_EQ(LaunchKernel(MmaFragments, 1, 32, 0, nullptr, a.data(), b.data(), cf.data(), out.data(),
                         d.data()),
            cudaSuccess);
  auto pair = [](uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const uint32_t* o = out.data() + lane * 12;
    // A: a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..].
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
      EXPECT_EQ(o[i], pair(a[row * 16 + col], a[row * 16 + col + 1])) << lane << " a" << i;
    }
    // B, n-tile n: b0 = B[2t, 2t+1][8n + g], b1 = B[2t+8, 2t+9][8n + g]; both loads agree.
    for (int i = 0; i < 4; ++i) {
      const int k = 2 * t + 8 * (i % 2), n = 8 * (i / 2) + g;
      EXPECT_EQ(o[4 + i], pair(b[k * 16 + n], b[(k + 1) * 16 + n])) << lane << " b" << i;
      EXPECT_EQ(o[8 + i], o[4 + i]) << lane << " b" << i << " from [n][k]";
    }
  }
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float want = 0;
      for (int k = 0; k < 16; ++k) want += af[r * 16 + k] * bf[k * 16 + col];
      EXPECT_EQ(d[r * 16 + col], want + cf[r * 16 + col]) << r << "," << col;
    }
  }
}

// One warpgroup. D1 (64 x 128) = A (64 x 64) · B1, both K-major in wgmma.cuh's swizzled blocks,
// four k-steps of 16 (the descriptors advance 32 bytes inside the block). D2 (64 x 64) = C +
// A[:, 0:32] · B2, A from registers in the fragment layout, B2 (32 x 64) MN-major (rows are k),
// two k-steps (descriptors advance 16 rows). early: each thread's d1[0] read before the wait,
// which must still hold its old value (the operation runs at the wait).
__global__ void WgmmaLayouts(const uint16_t* a, const uint16_t* b1, const uint16_t* b2,
                             const float* c, float* d1_out, float* d2_out, float* early) {
  PAGODA_DYNAMIC_SHARED(uint32_t, words);
  char* const raw = reinterpret_cast<char*>(words);
  char* const a_s =
      raw + (wgmma::kAtomBytes - wgmma::SharedAddress(raw) % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  char* const b1_s = a_s + 64 * wgmma::kRowBytes;
  char* const b2_s = b1_s + 128 * wgmma::kRowBytes;
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * 64; i += 128) {
    std::memcpy(a_s + wgmma::SwizzledOffset(i / 64, i % 64), &a[i], 2);
  }
  for (int i = tid; i < 128 * 64; i += 128) {  // b1 is [n][k]
    std::memcpy(b1_s + wgmma::SwizzledOffset(i / 64, i % 64), &b1[i], 2);
  }
  for (int i = tid; i < 32 * 64; i += 128) {  // b2 is [k][n]
    std::memcpy(b2_s + wgmma::SwizzledOffset(i / 64, i % 64), &b2[i], 2);
  }
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float d1[64], d2[32];
  for (int i = 0; i < 64; ++i) d1[i] = -1.0f;  // overwritten: the first step does not accumulate
  for (int j = 0; j < 8; ++j) {
    for (int i = 0; i < 4; ++i)
      d2[4 * j + i] = c[(16 * warp + g + 8 * (i / 2)) * 64 + 8 * j + 2 * t + i % 2];
  }
  const uint32_t a_addr = wgmma::SharedAddress(a_s), b1_addr = wgmma::SharedAddress(b1_s);
  const uint32_t b2_addr = wgmma::SharedAddress(b2_s);
  wgmma::Fence();
  for (int ks = 0; ks < 4; ++ks) {
    wgmma::MmaSS<__nv_bfloat16, false, 128>(
        d1, wgmma::Descriptor(a_addr + 32 * ks, 16, wgmma::kAtomBytes),
        wgmma::Descriptor(b1_addr + 32 * ks, 16, wgmma::kAtomBytes), ks > 0);
  }
  wgmma::Commit();
  early[tid] = d1[0];
  for (int ks = 0; ks < 2; ++ks) {
    uint32_t frag[4];
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * warp + g + 8 * (i % 2), col = 16 * ks + 2 * t + 8 * (i / 2);
      frag[i] = a[row * 64 + col] | static_cast<uint32_t>(a[row * 64 + col + 1]) << 16;
    }
    wgmma::MmaRS<__nv_bfloat16, true, 64>(
        d2, frag,
        wgmma::Descriptor(b2_addr + 16 * ks * wgmma::kRowBytes, 1 << 13, wgmma::kAtomBytes), true);
    wgmma::Commit();
    wgmma::Wait<0>();  // frag dies with this iteration: the operation must be done first
  }
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < 4; ++i) {
      d1_out[(16 * warp + g + 8 * (i / 2)) * 128 + 8 * j + 2 * t + i % 2] = d1[4 * j + i];
    }
  }
  for (int j = 0; j < 8; ++j) {
    for (int i = 0; i < 4; ++i) {
      d2_out[(16 * warp + g + 8 * (i / 2)) * 64 + 8 * j + 2 * t + i % 2] = d2[4 * j + i];
    }
  }
}

TEST(CudaEmulationTest, WgmmaFollowsThePtxLayouts) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-64, 64);
  // Multiples of 1/16 below 4 in magnitude: exact in bf16, products and sums exact in fp32.
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  auto fill = [&](size_t n, std::vector<float>* f, std::vector<uint16_t>* b) {
    for (size_t i = 0; i < n; ++i) {
      f->push_back(small(rng) / 16.0f);
      b->push_back(bits(f->back()));
    }
  };
  std::vector<float> af, b1f, b2f, c(64 * 64);
  std::vector<uint16_t> a, b1, b2;
  fill(64 * 64, &af, &a);     // [m][k]
  fill(128 * 64, &b1f, &b1);  // [n][k]
  fill(32 * 64, &b2f, &b2);   // [k][n]
  for (float& v : c) v = small(rng) / 4.0f;
  std::vector<float> d1(64 * 128, 0.0f), d2(64 * 64, 0.0f), early(128, 0.0f);
  const size_t smem = wgmma::kAtomBytes + (64 + 128 + 32) * wgmma::kRowBytes;
  ASSERT_EQ(LaunchKernel(WgmmaLayouts, 1, 128, smem, nullptr, a.data(), b1.data(), b2.data(),
                         c.data(), d1.data(), d2.data(), early.data()),
            cudaSuccess)
      << emulation::LastLaunchError();
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 128; ++n) {
      float want = 0;
      for (int k = 0; k < 64; ++k) want += af[m * 64 + k] * b1f[n * 64 + k];
      ASSERT_EQ(d1[m * 128 + n], want) << m << "," << n;
    }
    for (int n = 0; n < 64; ++n) {
      float want = c[m * 64 + n];
      for (int k = 0; k < 32; ++k) want += af[m * 64 + k] * b2f[k * 64 + n];
      ASSERT_EQ(d2[m * 64 + n], want) << m << "," << n;
    }
  }
  for (float v : early) EXPECT_EQ(v, -1.0f);
}

// A kernel that leaves a wgmma group unwaited fails its launch.
__global__ void WgmmaNeverWaited() {
  PAGODA_DYNAMIC_SHARED(uint32_t, words);
  float d[64];
  const uint64_t desc = wgmma::Descriptor(wgmma::SharedAddress(words), 16, wgmma::kAtomBytes);
  wgmma::MmaSS<__nv_bfloat16, false, 128>(d, desc, desc, false);
  wgmma::Commit();
}

TEST(CudaEmulationTest, WgmmaNotWaitedForFailsTheLaunch) {
  EXPECT_EQ(LaunchKernel(WgmmaNeverWaited, 1, 128, 16384, nullptr), cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("never waited for"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
}

// A wgmma issued on a tile whose cp.async copies no wait has covered yet fails its launch, even
// when a wait before the wgmma's own wait would land them in time here: on the GPU the
// operation may read its operands as soon as it is issued.
__global__ void WgmmaBeforeCopiesLand(const uint16_t* src) {
  PAGODA_DYNAMIC_SHARED(uint32_t, words);
  char* const tile = reinterpret_cast<char*>(words);
  for (int i = static_cast<int>(threadIdx.x); i < 128 * 8; i += 128) {
    mma::CpAsync16(tile + wgmma::SwizzledOffset(i / 8, i % 8 * 8), src, true);
  }
  mma::CpAsyncCommit();
  float d[64];
  const uint64_t desc = wgmma::Descriptor(wgmma::SharedAddress(tile), 16, wgmma::kAtomBytes);
  wgmma::Fence();
  wgmma::MmaSS<__nv_bfloat16, false, 128>(d, desc, desc, false);
  wgmma::Commit();
  mma::CpAsyncWait<0>();
  wgmma::FenceProxyAsync();
  wgmma::Wait<0>();
}

TEST(CudaEmulationTest, WgmmaIssuedBeforeItsCopiesLandFailsTheLaunch) {
  std::vector<uint16_t> src(8, 0x3f80);  // bf16 1.0
  EXPECT_EQ(LaunchKernel(WgmmaBeforeCopiesLand, 1, 128, 16384, nullptr, src.data()),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("has not landed"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
}

// A cp.async into shared bytes that an issued wgmma reads, before the wgmma's wait, fails its
// launch (on the GPU the operation may read them at any time until then); a copy into bytes of
// the same tile that the k16 wgmma does not read (columns 16 and on) does not.
__global__ void CopyUnderWgmma(const uint16_t* src, int column) {
  PAGODA_DYNAMIC_SHARED(uint32_t, words);
  // The tile on a swizzle atom, as the kernels place theirs: the swizzle follows the address.
  char* const raw = reinterpret_cast<char*>(words);
  char* const tile =
      raw + (wgmma::kAtomBytes - wgmma::SharedAddress(raw) % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  for (int i = static_cast<int>(threadIdx.x); i < 128 * 8; i += 128) {
    mma::CpAsync16(tile + wgmma::SwizzledOffset(i / 8, i % 8 * 8), src, true);
  }
  mma::CpAsyncCommit();
  mma::CpAsyncWait<0>();
  wgmma::FenceProxyAsync();
  __syncthreads();
  float d[64];
  const uint64_t desc = wgmma::Descriptor(wgmma::SharedAddress(tile), 16, wgmma::kAtomBytes);
  wgmma::Fence();
  wgmma::MmaSS<__nv_bfloat16, false, 128>(d, desc, desc, false);
  wgmma::Commit();
  __syncthreads();  // every warp's wgmma issued, none waited for: the copy below races with them
  mma::CpAsync16(tile + wgmma::SwizzledOffset(threadIdx.x, column), src, true);
  mma::CpAsyncCommit();
  wgmma::Wait<0>();
  mma::CpAsyncWait<0>();
}

TEST(CudaEmulationTest, CopyIntoAWgmmaOperandBeforeItsWaitFailsTheLaunch) {
  std::vector<uint16_t> src(8, 0x3f80);  // bf16 1.0
  EXPECT_EQ(LaunchKernel(CopyUnderWgmma, 1, 128, 16384 + 1024, nullptr, src.data(), 8),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("not yet waited for reads"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
  EXPECT_EQ(LaunchKernel(CopyUnderWgmma, 1, 128, 16384 + 1024, nullptr, src.data(), 16),
            cudaSuccess)
      << emulation::LastLaunchError();
}

// A kernel launched after its prior grid (programmatic dependent launch) must wait for that grid
// in every thread: one whose threads never call PriorGridsDone fails its launch, unless
// programmatic launches are off (then it is a plain launch, and the wait a no-op).
__global__ void WritesAfterPriorGrid(int* out, bool wait) {
  if (wait) PriorGridsDone();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulationTest, AKernelLaunchedAfterItsPriorGridMustWaitForIt) {
  std::vector<int> out(64, 0);
  EXPECT_EQ(LaunchKernelAfterPrior(WritesAfterPriorGrid, 1, 64, 0, nullptr, out.data(), true),
            cudaSuccess);
  EXPECT_EQ(out, std::vector<int>(64, 1));
  EXPECT_EQ(LaunchKernelAfterPrior(WritesAfterPriorGrid, 1, 64, 0, nullptr, out.data(), false),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("without waiting"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
  SetProgrammaticLaunch(false);
  EXPECT_EQ(LaunchKernelAfterPrior(WritesAfterPriorGrid, 1, 64, 0, nullptr, out.data(), false),
            cudaSuccess);
  SetProgrammaticLaunch(true);
}

// cp.async lands at the wait that covers its group, as late as the GPU allows: before it the
// destination holds its old bytes; wait_group 1 lands the older of two groups only; a copy
// without fill writes zeros; copies still in flight at exit land.
__global__ void CopiesLandAtTheirWait(const uint32_t* src, uint32_t* out) {
  __shared__ __align__(16) uint32_t dst[12];
  for (int i = 0; i < 12; ++i) dst[i] = 7;
  mma::CpAsync16(&dst[0], src, true);
  mma::CpAsyncCommit();
  mma::CpAsync16(&dst[4], src + 4, false);
  mma::CpAsyncCommit();
  out[0] = dst[0];  // neither group waited for
  mma::CpAsyncWait<1>();
  out[1] = dst[0];  // the first group landed
  out[2] = dst[4];  // the second not yet
  mma::CpAsyncWait<0>();
  out[3] = dst[4];
  mma::CpAsync16(&dst[8], src + 8, true);  // never committed or waited for
  out[4] = dst[8];
}

TEST(CudaEmulationTest, CopiesLandAtTheirWait) {
  std::vector<uint32_t> src(12);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 100 + static_cast<uint32_t>(i);
  std::vector<uint32_t> out(5, 0);
  ASSERT_EQ(LaunchKernel(CopiesLandAtTheirWait, 1, 1, 0, nullptr, src.data(), out.data()),
            cudaSuccess);
  EXPECT_EQ(out, (std::vector<uint32_t>{7, 100, 7, 0, 7}));
}

__global__ void MisalignedCopy(const char* src) {
  __shared__ __align__(16) char dst[32];
  mma::CpAsync16(dst, src + 8, true);
  mma::CpAsyncCommit();
  mma::CpAsyncWait<0>();
}

TEST(CudaEmulationTest, MisalignedCopyFailsTheLaunch) {
  alignas(16) char src[32] = {};
  EXPECT_EQ(LaunchKernel(MisalignedCopy, 1, 1, 0, nullptr, static_cast<const char*>(src)),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("not 16-byte aligned"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
}

// wgmma reads shared memory through the async proxy: what cp.async wrote must be fenced by its
// writer (fence.proxy.async) before the barrier that precedes the wgmma.
__global__ void WgmmaAfterCopies(const uint16_t* tile, bool fence, float* out) {
  PAGODA_DYNAMIC_SHARED(char, smem);
  char* base = smem + (wgmma::kAtomBytes - wgmma::SharedAddress(smem) % wgmma::kAtomBytes);
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < 128 * 8; i += 128) {  // 128 rows of 8 16-byte pieces: A (64) then B (64)
    mma::CpAsync16(base + wgmma::SwizzledOffset(i / 8, (i % 8) * 8), tile + 8 * i, true);
  }
  mma::CpAsyncCommit();
  mma::CpAsyncWait<0>();
  if (fence) wgmma::FenceProxyAsync();
  __syncthreads();
  float d[32];
  const uint32_t a = wgmma::SharedAddress(base), b = a + 64 * wgmma::kRowBytes;
  wgmma::Fence();
  wgmma::MmaSS<__nv_bfloat16, false, 64>(d, wgmma::Descriptor(a, 16, wgmma::kAtomBytes),
                                         wgmma::Descriptor(b, 16, wgmma::kAtomBytes), false);
  wgmma::Commit();
  wgmma::Wait<0>();
  out[tid] = d[0];
}

TEST(CudaEmulationTest, WgmmaNeedsTheProxyFenceAfterCopies) {
  std::vector<uint16_t> tile(128 * 64, 0x3f80);  // bf16 ones: each product sums 16 of them
  std::vector<float> out(128, 0.0f);
  const size_t smem = wgmma::kAtomBytes + 128 * wgmma::kRowBytes;
  ASSERT_EQ(LaunchKernel(WgmmaAfterCopies, 1, 128, smem, nullptr,
                         static_cast<const uint16_t*>(tile.data()), true, out.data()),
            cudaSuccess)
      << emulation::LastLaunchError();
  for (float v : out) EXPECT_EQ(v, 16.0f);
  EXPECT_EQ(LaunchKernel(WgmmaAfterCopies, 1, 128, smem, nullptr,
                         static_cast<const uint16_t*>(tile.data()), false, out.data()),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("no fence.proxy.async"), std::string::npos)
      << emulation::LastLaunchError();
  emulation::TakeLastError();
}

// Threads that return early leave the barrier, as on the GPU.
__global__ void EarlyExitThenBarrier(int* out) {
  __shared__ int total;
  if (threadIdx.x >= 40) return;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  atomicAdd(&total, 1);
  __syncthreads();
  out[threadIdx.x] = total;
}

TEST(CudaEmulationTest, ExitedThreadsLeaveTheBarrier) {
  std::vector<int> out(128, -1);
  ASSERT_EQ(LaunchKernel(EarlyExitThenBarrier, 1, 128, 0, nullptr, out.data()), cudaSuccess);
  for (int t = 0; t < 40; ++t) EXPECT_EQ(out[t], 40);
  for (int t = 40; t < 128; ++t) EXPECT_EQ(out[t], -1);
}

__global__ void ReadDynamicShared(uint32_t* out, int n) {
  PAGODA_DYNAMIC_SHARED(uint32_t, smem);
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) out[i] = smem[i];
  }
}

TEST(CudaEmulationTest, DynamicSharedMemoryStartsPoisoned) {
  std::vector<uint32_t> out(100, 0);
  ASSERT_EQ(LaunchKernel(ReadDynamicShared, 1, 32, 400, nullptr, out.data(), 100), cudaSuccess);
  for (uint32_t v : out) EXPECT_EQ(v, 0xffffffffu);
}

__global__ void DivergentBarrier(int* out) {
  const int lane = threadIdx.x % 32;
  int v = lane;
  if (lane < 16) {
    __syncthreads();
  } else {
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  }
  out[threadIdx.x] = v;
}

__global__ void ShuffleWithExitedLane(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Legal on the GPU: two half-warp collectives with disjoint masks at once, and a ballot over a
// full mask after some lanes returned (exited lanes do not take part).
__global__ void HalfWarpsAndExitedLanes(unsigned* out) {
  const int lane = threadIdx.x % 32;
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_xor_sync(half, static_cast<unsigned>(lane), 1);
  if (lane >= 20) return;
  out[32 + threadIdx.x] = __ballot_sync(0xffffffffu, lane % 2 == 0);
}

TEST(CudaEmulationTest, DisjointMasksAndExitedLanesAreNotDeadlocks) {
  std::vector<unsigned> out(64, 7);
  ASSERT_EQ(LaunchKernel(HalfWarpsAndExitedLanes, 1, 32, 0, nullptr, out.data()), cudaSuccess)
      << emulation::LastLaunchError();
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[lane], static_cast<unsigned>(lane ^ 1));
  for (int lane = 0; lane < 20; ++lane) EXPECT_EQ(out[32 + lane], 0x55555u) << lane;
}

// Width 8: xor may read an earlier segment, never a later one; shfl_sync wraps negative lanes.
__global__ void NarrowSegments(int* out) {
  const int lane = threadIdx.x % 32;
  out[lane] = __shfl_xor_sync(0xffffffffu, lane, 8, 8);
  out[32 + lane] = __shfl_sync(0xffffffffu, lane, -1, 8);
}

TEST(CudaEmulationTest, NarrowSegmentsFollowTheGuide) {
  std::vector<int> out(64, -1);
  ASSERT_EQ(LaunchKernel(NarrowSegments, 1, 32, 0, nullptr, out.data()), cudaSuccess);
  for (int lane = 0; lane < 32; ++lane) {
    const int segment = lane / 8 * 8;
    const int xor_src = lane ^ 8;
    EXPECT_EQ(out[lane], xor_src >= segment + 8 ? lane : xor_src) << lane;
    EXPECT_EQ(out[32 + lane], segment + 7) << lane;
  }
}

TEST(CudaEmulationTest, DeadlocksFailTheLaunchWithAMessage) {
  std::vector<int> out(64, 0);
  EXPECT_EQ(LaunchKernel(DivergentBarrier, 1, 64, 0, nullptr, out.data()), cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("__syncthreads"), std::string::npos)
      << emulation::LastLaunchError();
  EXPECT_EQ(LaunchKernel(ShuffleWithExitedLane, 1, 32, 0, nullptr, out.data()),
            cudaErrorLaunchFailure);
  EXPECT_NE(emulation::LastLaunchError().find("exited"), std::string::npos)
      << emulation::LastLaunchError();
  // The emulator keeps working after a failed launch.
  std::vector<int> in(256, 5), rotated(256, 0);
  EXPECT_EQ(LaunchKernel(RotateThroughShared, 1, 256, 0, nullptr, in.data(), rotated.data()),
            cudaSuccess);
  EXPECT_EQ(rotated[0], 5);
}

TEST(CudaEmulationTest, RejectsInvalidConfigurations) {
  std::vector<uint32_t> out(4 * 2048, 0);
  EXPECT_EQ(LaunchKernel(RecordIndices, 1, 1025, 0, nullptr, out.data()),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(LaunchKernel(RecordIndices, dim3(0), 32, 0, nullptr, out.data()),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(LaunchKernel(RecordIndices, dim3(1, 65536), 32, 0, nullptr, out.data()),
            cudaErrorInvalidConfiguration);
}

// 2D copies (the CUDA backend's KV page swaps) move `height` rows of `width` bytes between
// pitches, and refuse a pitch past the device's memPitch or narrower than a row.
TEST(CudaEmulationTest, TwoDimensionalCopiesFollowTheirPitches) {
  std::vector<uint8_t> src(64), dst(32, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(
      cudaMemcpy2DAsync(dst.data(), 8, src.data() + 2, 16, 4, 3, cudaMemcpyDeviceToHost, nullptr),
      cudaSuccess);
  const std::vector<uint8_t> want = {2,  3,  4,  5,  0, 0, 0, 0, 18, 19, 20, 21, 0, 0, 0, 0,
                                     34, 35, 36, 37, 0, 0, 0, 0, 0,  0,  0,  0,  0, 0, 0, 0};
  EXPECT_EQ(dst, want);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(cudaMemcpy2DAsync(dst.data(), 8, src.data(), prop.memPitch + 1, 4, 1,
                              cudaMemcpyDeviceToHost, nullptr),
            cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaMemcpy2DAsync(dst.data(), 2, src.data(), 16, 4, 1, cudaMemcpyDeviceToHost, nullptr),
            cudaErrorInvalidPitchValue);
}

}  // namespace
}  // namespace pagoda::worker::cuda
