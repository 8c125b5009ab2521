// Warp-level tensor-core primitives (PTX for sm_80 and later, so sm_90 too): ldmatrix,
// mma.sync m16n8k16 with fp32 accumulators, and cp.async copies into shared memory. The host
// emulator (tests/support/cuda_emulation) implements the same functions as warp collectives
// with the PTX ISA's fragment layouts, so the kernels that use them run in CI.
//
// Fragments of mma.sync.m16n8k16 (16-bit inputs), with g = lane / 4 and t = lane % 4:
//   A (16 x 16, row-major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col"):      b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, fp32):    c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// Each 32-bit register holds two elements, the lower index in the low 16 bits.
//
// ldmatrix .x4 loads four 8 x 8 matrices of 16-bit elements from shared memory: lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and register i of lane l
// receives matrix i's elements [l / 4][2 (l % 4), +1]; with .trans, [2 (l % 4), +1][l / 4]
// (the transposed matrix's fragment). Every lane of the warp must call these (.aligned).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::worker::cuda::mma {

#ifdef PAGODA_CUDA_EMULATION

inline void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  emulation::LdMatrixX4(r, row, /*trans=*/false);
}
inline void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  emulation::LdMatrixX4(r, row, /*trans=*/true);
}
// d += a * b, elements of type T (__nv_bfloat16 or __half).
template <typename T>
void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emulation::MmaM16N8K16(d, a, b0, b1, std::is_same_v<T, __nv_bfloat16>);
}
// Copies 16 bytes from global to shared memory, or writes 16 zero bytes when !fill (src is then
// not read). Complete once a later CpAsyncWait covers the commit group they joined.
inline void CpAsync16(void* dst, const void* src, bool fill) {
  emulation::CopyAsync16(dst, src, fill);
}
inline void CpAsyncCommit() { emulation::CopyAsyncCommit(); }
template <int kPending>
void CpAsyncWait() {
  emulation::CopyAsyncWait(kPending);
}

#else

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

template <typename T>
__device__ __forceinline__ void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool fill) {
  // src-size 0 zero-fills the 16 bytes without reading src.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(fill ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's commit groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

#endif

}  // namespace pagoda::worker::cuda::mma
