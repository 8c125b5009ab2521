// Warpgroup-level tensor-core primitives of sm_90a (Hopper): wgmma.mma_async with 16-bit inputs
// and fp32 accumulators, its fences and commit groups, and the shared-memory matrix descriptors it
// reads. A warpgroup is four consecutive warps (threads 128 w .. 128 w + 127 of a block); every
// thread of it must make each call (.sync.aligned). The host emulator implements the same
// functions (tests/support/cuda_emulation) with the PTX ISA's layouts, so the kernels that use
// them run in CI; there an operation is carried out at the wait that covers it, reading shared
// memory then, so a kernel that reads its accumulators or overwrites its operands too early
// computes wrong results there as it would on the GPU.
//
// Shapes used here: m64nNk16, N = 32, 64 or 128. Warp w of the warpgroup owns rows 16 w .. 16 w +
// 15 of the 64-row tile; with g = lane / 4 and t = lane % 4:
//   D (64 x N, fp32), N / 2 floats: d[4 j + 2 h + e] = D[16 w + g + 8 h][8 j + 2 t + e]
//   A in registers (64 x 16): the mma.sync m16n8k16 A fragment (mma.cuh) of the warp's 16 rows
// B always, and A optionally, come from shared memory through a descriptor.
//
// Shared-memory layout (the only one these helpers describe: 128-byte swizzle, 16-bit elements).
// A matrix is stored as "atoms" of 8 rows x 64 elements (8 x 128 bytes, 1024-byte aligned); in
// an atom, the 16-byte chunk c of row r is stored at chunk c ^ r. Rows of consecutive atoms follow
// each other (atom a holds rows 8 a .. 8 a + 7, so a block of R rows x 64 elements is R x 128
// contiguous bytes), and wider matrices are several such blocks, one per 64 elements.
//   K-major operand (A, or B without transpose: the 64 elements of a row are k): the descriptor
//     starts at the block of k / 64 plus 32 bytes per k-step of 16 inside it; the stride byte
//     offset is 1024 (from 8 rows of m or n to the next 8); the leading byte offset is unused.
//   MN-major B (transposed: the 64 elements of a row are n, rows are k): the descriptor starts at
//     row 16 s of the first block for k-step s; stride byte offset 1024 (8 rows of k to the
//     next 8), leading byte offset the distance between blocks (n to n + 64).
// The swizzle is applied by the hardware to the address bits, so blocks must start at shared
// addresses that are multiples of 1024.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::worker::cuda::wgmma {

inline constexpr int kRowBytes = 128;     // one row of a 128-byte-swizzled block
inline constexpr int kAtomBytes = 1024;   // 8 rows: the swizzle's period and alignment
inline constexpr int kAtomElements = 64;  // 16-bit elements per row of a block

// Byte offset of element `col` (of 64) in row `row` of a swizzled block.
__host__ __device__ constexpr uint32_t SwizzledOffset(int row, int col) {
  return static_cast<uint32_t>(row * kRowBytes + (((col / 8) ^ (row % 8)) * 16) + (col % 8) * 2);
}

// The 64-bit descriptor of a 128-byte-swizzled operand at shared address `addr`.
__host__ __device__ constexpr uint64_t Descriptor(uint32_t addr, uint32_t leading_bytes,
                                                  uint32_t stride_bytes) {
  return uint64_t{(addr & 0x3ffffu) >> 4} | uint64_t{(leading_bytes >> 4) & 0x3fffu} << 16 |
         uint64_t{(stride_bytes >> 4) & 0x3fffu} << 32 | uint64_t{1} << 62;
}

#ifdef PAGODA_CUDA_EMULATION

inline uint32_t SharedAddress(const void* p) { return emulation::SharedWindowAddress(p); }
inline void Fence() {}
inline void FenceProxyAsync() { emulation::FenceProxyAsync(); }
inline void Commit() { emulation::WgmmaCommit(); }
template <int kPending>
void Wait() {
  emulation::WgmmaWait(kPending);
}
template <int N>
void FenceOperand(float (&)[N]) {}
template <int N>
void FenceOperand(uint32_t (&)[N]) {}
// d (+)= A·B, A (64 x 16) at a_desc, K-major. accumulate false: d = A·B.
template <typename T, bool kTransB, int N>
void MmaSS(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  emulation::WgmmaIssue(d, N, nullptr, a_desc, b_desc, accumulate, kTransB,
                        std::is_same_v<T, __nv_bfloat16>);
}
// The same with A in registers (the fragment above).
template <typename T, bool kTransB, int N>
void MmaRS(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
  emulation::WgmmaIssue(d, N, a, 0, b_desc, accumulate, kTransB, std::is_same_v<T, __nv_bfloat16>);
}

#else

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Orders this thread's earlier register and shared-memory accesses before the warpgroup's next
// wgmma (required before the first one, and after registers it reads were written).
__device__ __forceinline__ void Fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// Makes this thread's earlier generic-proxy writes to shared memory (cp.async included) visible
// to wgmma's async proxy; a barrier must still follow before other threads' wgmma read them.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void Commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending of this warpgroup's committed groups are still running.
template <int kPending>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of d across a Wait or an Mma: the registers are
// written asynchronously, which the asm statements' operands alone do not say.
template <int N>
__device__ __forceinline__ void FenceOperand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for an A fragment in registers, read asynchronously until its Wait.
template <int N>
__device__ __forceinline__ void FenceOperand(uint32_t (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

#define PAGODA_WGMMA_D32_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define PAGODA_WGMMA_D32(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])
#define PAGODA_WGMMA_D64_REGS                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PAGODA_WGMMA_D64(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PAGODA_WGMMA_D128_REGS                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define PAGODA_WGMMA_D128(d)                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PAGODA_WGMMA_SS_128(TYPE)                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE \
  "." TYPE " " PAGODA_WGMMA_D128_REGS ", %64, %65, p, 1, 1, 0, %67;\n}\n"
#define PAGODA_WGMMA_RS_128(TYPE)                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE \
  "." TYPE " " PAGODA_WGMMA_D128_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
#define PAGODA_WGMMA_RS_32(TYPE)                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE \
  "." TYPE " " PAGODA_WGMMA_D32_REGS ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
#define PAGODA_WGMMA_RS_64(TYPE)                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE \
  "." TYPE " " PAGODA_WGMMA_D64_REGS ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"

// d (+)= A·B, A (64 x 16) at a_desc, K-major; B (16 x N) at b_desc, MN-major when kTransB.
// accumulate false: d = A·B. Only sm_90a has the instruction; elsewhere this traps (the
// launchers never choose a wgmma kernel there).
template <typename T, bool kTransB, int N>
__device__ __forceinline__ void MmaSS(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc,
                                      bool accumulate) {
  static_assert(N == 128, "only m64n128k16 is wrapped for shared-memory A");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(PAGODA_WGMMA_SS_128("bf16")
                 : PAGODA_WGMMA_D128(d)
                 : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)),
                   "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(PAGODA_WGMMA_SS_128("f16")
                 : PAGODA_WGMMA_D128(d)
                 : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)),
                   "n"(kTransB ? 1 : 0));
  }
#else
  __trap();
#endif
}

// The same with A in registers (the fragment above).
template <typename T, bool kTransB, int N>
__device__ __forceinline__ void MmaRS(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                      bool accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "m64n32k16, m64n64k16 and m64n128k16 are wrapped");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 128 && kBf16) {
    asm volatile(PAGODA_WGMMA_RS_128("bf16")
                 : PAGODA_WGMMA_D128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  } else if constexpr (N == 128) {
    asm volatile(PAGODA_WGMMA_RS_128("f16")
                 : PAGODA_WGMMA_D128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  } else if constexpr (N == 32 && kBf16) {
    asm volatile(PAGODA_WGMMA_RS_32("bf16")
                 : PAGODA_WGMMA_D32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  } else if constexpr (N == 32) {
    asm volatile(PAGODA_WGMMA_RS_32("f16")
                 : PAGODA_WGMMA_D32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  } else if constexpr (kBf16) {
    asm volatile(PAGODA_WGMMA_RS_64("bf16")
                 : PAGODA_WGMMA_D64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(PAGODA_WGMMA_RS_64("f16")
                 : PAGODA_WGMMA_D64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc),
                   "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
  }
#else
  __trap();
#endif
}

#undef PAGODA_WGMMA_SS_128
#undef PAGODA_WGMMA_RS_128
#undef PAGODA_WGMMA_RS_64
#undef PAGODA_WGMMA_RS_32
#undef PAGODA_WGMMA_D32_REGS
#undef PAGODA_WGMMA_D32
#undef PAGODA_WGMMA_D64_REGS
#undef PAGODA_WGMMA_D64
#undef PAGODA_WGMMA_D128_REGS
#undef PAGODA_WGMMA_D128

#endif

}  // namespace pagoda::worker::cuda::wgmma
