// Host emulation of the CUDA execution model, so that the kernels' own code runs (and is checked
// against the CPU backend) on machines without a GPU. Test-only: nothing in a shipped binary
// includes it.
//
// How it is used: the kernel .cu files are compiled a second time by the C++ compiler, with this
// header included first and PAGODA_CUDA_EMULATION defined (this folder's CMakeLists.txt
// generates the wrappers). It makes the device dialect plain C++: __global__/__device__ are
// nothing, a
// __shared__ variable is a static local, threadIdx & co. read the running thread's indices, and
// the warp intrinsics (__shfl_*_sync, __ballot_sync) and __syncthreads are collectives of the
// emulator. LaunchKernel (launch.cuh) calls Launch() instead of <<<...>>>. fake_runtime.cc
// supplies the part of the CUDA runtime API that the CUDA backend and its tests use, over host
// memory, and fake_cublas.cc the cuBLAS entry points it loads (a host GEMM).
//
// Semantics: each thread block runs to completion before the next starts, the blocks of a launch
// in a shuffled order (so that a kernel whose result depends on which block runs first, or
// finishes last, shows it from run to run, as on the GPU); its threads are
// fibers on the calling thread, each running until it reaches a barrier (__syncthreads, a warp
// collective) or returns, in an order shuffled every round, so code that reads another thread's
// write without a barrier in between sees different values from run to run. A barrier completes
// when every thread that can still reach it has arrived; a thread that returned no longer takes
// part, as on the GPU. A warp collective completes when every lane of its mask has arrived with
// the same mask or has returned (lanes in disjoint masks form separate collectives). A schedule
// where neither can complete (a __syncthreads or shuffle in divergent code) fails the launch with
// cudaErrorLaunchFailure and a message saying which threads wait where (LastLaunchError()); so does
// a shuffle reading a lane that has exited.
//
// Not emulated: the memory model beyond barriers, out-of-bounds accesses (the tests trap them
// with NaN-filled padding instead), timing, concurrency between streams (everything runs in
// order, at once or at a graph's launch), and any intrinsic or API the kernels and the CUDA
// backend do not use. One launch runs at a time (a process-wide mutex): __shared__
// variables are statics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

namespace pagoda::worker::cuda::emulation {

// The built-in variables of the emulated thread that is running.
struct Builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// The running thread's, set by the scheduler as it switches fibers (null outside a kernel).
extern constinit thread_local const Builtins* current_builtins;
// Aborts with a message: a built-in read outside a kernel.
[[noreturn]] const Builtins& OutsideKernel();
inline const Builtins& Current() {
  const Builtins* b = current_builtins;
  return b != nullptr ? *b : OutsideKernel();
}

// Runs `body` once per thread of a grid x block launch; `dynamic_shared_bytes` of
// DynamicShared() per block. Returns cudaErrorInvalidConfiguration for an empty grid or block,
// a block over 1024 threads or a grid past the device's limits, cudaErrorLaunchFailure for a
// deadlocked schedule; the error is also what the fake cudaGetLastError returns next.
// after_prior: a programmatic dependent launch (LaunchKernelAfterPrior), whose threads must each
// call PriorGridsDone before their first barrier, warp collective or cp.async and before they
// exit, or the launch fails.
cudaError_t Launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                   const std::function<void()>& body, bool after_prior = false);

// Streams and graphs. Work enqueued on a stream runs at once (everything is synchronous), unless
// the stream is capturing (cudaStreamBeginCapture): then it is recorded, and each cudaGraphLaunch
// of the instantiated graph runs the recorded work again, with the arguments it was captured
// with, as a CUDA graph replays its kernels. While a stream captures, synchronizing it fails,
// as on the GPU (a synchronous copy does not, unlike on the GPU). Work's errors become the sticky
// error.
using StreamWork = std::function<cudaError_t()>;
cudaError_t Enqueue(cudaStream_t stream, StreamWork work);

// Why the last failed launch failed ("" after a good one).
std::string LastLaunchError();

// The compute capability the fake cudaGetDeviceProperties reports (9.0 unless set): tests of
// what a backend refuses on older GPUs.
void SetComputeCapability(int major, int minor);

// The sticky error the fake runtime reports: set by a failed launch, cleared by reading it.
cudaError_t TakeLastError();
cudaError_t PeekLastError();

// Kernel-side primitives (only valid inside Launch's body).
void SyncThreads();
// griddepcontrol.wait: the grids before this one are done (they are here, always); recorded for
// Launch's after_prior check.
void PriorGridsDone();
void* DynamicShared();
// Every lane of `mask` that has not exited posts `value`; returns once all of them have, with the
// mask of the lanes that posted in *posted and the values of lanes 0..31 (0 for the others) at the
// returned pointer, which stays valid until the caller's next collective.
const uint64_t* WarpExchange(unsigned mask, uint64_t value, unsigned* posted);
// The same collective for more than 8 bytes: each lane of `mask` posts `bytes` at `mine`, and
// `all` (32 x bytes) receives lane l's at l * bytes (untouched for lanes that did not post).
unsigned WarpGather(unsigned mask, const void* mine, size_t bytes, void* all);
// Fails the running launch (cudaErrorLaunchFailure, `message` in LastLaunchError()) once its
// blocks are done: for what would be undefined behaviour on the GPU but cannot deadlock here.
void ReportFault(const std::string& message);
// cudaErrorInvalidConfiguration for a grid, block or dynamic shared size no launch may have.
cudaError_t CheckConfiguration(dim3 grid, dim3 block, size_t dynamic_shared_bytes);

inline int LaneId() {
  const Builtins& b = Current();
  const unsigned linear =
      (b.thread_idx.z * b.block_dim.y + b.thread_idx.y) * b.block_dim.x + b.thread_idx.x;
  return static_cast<int>(linear % 32);
}

template <typename T>
uint64_t ToWord(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  return w;
}
template <typename T>
T FromWord(uint64_t w) {
  T v;
  std::memcpy(&v, &w, sizeof(T));
  return v;
}

// The value lane `src` posts (the caller's own when src is -1). Reading a lane that has exited
// or is not in `mask` is undefined on the GPU: a fault here.
template <typename T>
T Shuffle(unsigned mask, T v, int src) {
  unsigned posted = 0;
  const uint64_t* all = WarpExchange(mask, ToWord(v), &posted);
  if (src < 0) return v;
  if ((posted >> src & 1u) == 0) {
    ReportFault("a shuffle read lane " + std::to_string(src) +
                ", which has exited or is not in the mask");
    return v;
  }
  return FromWord<T>(all[src]);
}

// Tensor-core primitives of worker/backend/cuda/mma.cuh, as warp collectives of every lane with
// the PTX ISA's fragment layouts (documented there). ldmatrix faults on a row address that is
// not 16-byte aligned, as the instruction requires; mma.sync multiplies exactly (products of
// 16-bit floats fit in fp32) and sums each output's 16 products in fp32 in k order before adding
// the accumulator.
void LdMatrixX4(uint32_t (&r)[4], const void* row, bool trans);
void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);
// The .shared address of p, a byte of the running block's dynamic shared memory (a fault for any
// other pointer). The window starts at kDynamicSharedAddress, which is 16-byte aligned but no
// more, as the GPU promises no more: a kernel that needs 1024-byte aligned swizzle atoms must
// align them itself.
inline constexpr uint32_t kDynamicSharedAddress = 0x410;
uint32_t SharedWindowAddress(const void* p);
// wgmma.mma_async (worker/backend/cuda/wgmma.cuh) for the calling thread: d holds n / 2 fp32
// accumulators in the layout documented there; A comes from a_regs (the warp's fragment) or, when
// a_regs is null, from a_desc; B from b_desc, MN-major when trans_b. Only 128-byte-swizzled
// descriptors are emulated (others fault). Issue is a collective of the warp's lanes. The
// operation is queued and carried out by the WgmmaWait that covers its commit group, reading
// shared memory and gathering the lanes' a_regs then (so both must outlive the wait, and
// changing them before it shows in the result, as it would on the GPU); each output sums its 16
// exact products in fp32 in k order and adds that to d (accumulate) or stores it. A thread that
// exits with operations not waited for faults.
void WgmmaIssue(float* d, int n, const uint32_t* a_regs, uint64_t a_desc, uint64_t b_desc,
                bool accumulate, bool trans_b, bool bf16);
void WgmmaCommit();
// Carries out the calling thread's oldest committed groups until at most `pending` remain.
void WgmmaWait(int pending);
// cp.async of 16 bytes (zeros where !fill), landing as late as the GPU allows: when the calling
// thread's cp.async.wait_group covers its commit group (or when the thread exits), so reading
// the destination before that wait, or before a barrier after every writer's wait, reads stale
// bytes. Faults on addresses not 16-byte aligned.
void CopyAsync16(void* dst, const void* src, bool fill);
// cp.async.commit_group: the copies issued since the last commit form a group (maybe empty).
void CopyAsyncCommit();
// cp.async.wait_group: lands the calling thread's oldest groups until at most `pending` remain.
void CopyAsyncWait(int pending);
// fence.proxy.async: what the calling thread's cp.async copies wrote to shared memory so far
// becomes visible to wgmma (the async proxy); a wgmma that reads such bytes before the writer's
// fence faults, where the GPU may read stale ones.
void FenceProxyAsync();

// The first lane of the caller's width-lane segment.
inline int SegmentStart(int lane, int width) { return lane - (lane & (width - 1)); }

}  // namespace pagoda::worker::cuda::emulation

// ---- The device dialect as plain C++ (cuda_runtime.h already defines __device__, __global__,
// __host__ and __shared__ as nothing for a host compiler). ----
#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)

#define threadIdx (::pagoda::worker::cuda::emulation::Current().thread_idx)
#define blockIdx (::pagoda::worker::cuda::emulation::Current().block_idx)
#define blockDim (::pagoda::worker::cuda::emulation::Current().block_dim)
#define gridDim (::pagoda::worker::cuda::emulation::Current().grid_dim)

inline void __syncthreads() { ::pagoda::worker::cuda::emulation::SyncThreads(); }

// The lane rules of the CUDA programming guide (width a power of two <= 32): __shfl_sync reads
// lane src_lane mod width of the caller's segment; __shfl_xor_sync reads lane ^ lane_mask unless
// that lies in a later segment (then its own value); __shfl_up_sync reads lane - delta unless
// that lies before its segment (then its own value).
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  namespace emu = ::pagoda::worker::cuda::emulation;
  const int lane = emu::LaneId();
  return emu::Shuffle(mask, v, emu::SegmentStart(lane, width) + (src_lane & (width - 1)));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  namespace emu = ::pagoda::worker::cuda::emulation;
  const int lane = emu::LaneId(), src = lane ^ (lane_mask & 31);
  return emu::Shuffle(mask, v, src >= emu::SegmentStart(lane, width) + width ? -1 : src);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  namespace emu = ::pagoda::worker::cuda::emulation;
  const int lane = emu::LaneId(), src = lane - static_cast<int>(delta);
  return emu::Shuffle(mask, v, src < emu::SegmentStart(lane, width) ? -1 : src);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  unsigned posted = 0;
  const uint64_t* all =
      ::pagoda::worker::cuda::emulation::WarpExchange(mask, predicate != 0 ? 1 : 0, &posted);
  unsigned bits = 0;
  for (int i = 0; i < 32; ++i) bits |= (posted >> i & 1u) != 0 && all[i] != 0 ? 1u << i : 0u;
  return bits;
}

// A misaligned load faults on the GPU (a 16-byte load at an 8-byte boundary included); here it
// fails the launch the same way.
template <typename T>
T __ldg(const T* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) {
    ::pagoda::worker::cuda::emulation::ReportFault("__ldg of a misaligned " +
                                                   std::to_string(sizeof(T)) + "-byte value");
    return T{};
  }
  return *p;
}
// Every emulated thread of a launch runs on one host thread, so read-modify-write is atomic.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

// Blocks run one after another, and a block's writes are in memory when the next starts: a fence
// has nothing left to order, and loads and stores that bypass L1 are plain ones.
inline void __threadfence() {}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
template <typename T>
void __stcg(T* p, T v) {
  *p = v;
}

inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline int __popc(unsigned v) { return std::popcount(v); }
inline int __ffs(unsigned v) { return v == 0 ? 0 : std::countr_zero(v) + 1; }
// dp4a: c + the dot product of the four signed bytes of a and of b.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i));
  }
  return c;
}
inline unsigned long long __float2ull_rn(float f) {
  return static_cast<unsigned long long>(std::nearbyint(f));  // default rounding: to nearest even
}
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
using std::isfinite;
using std::isnan;
