// The part of the CUDA runtime API that the CUDA backend and the kernel tests call, over host
// memory, for test binaries that run the kernels under the emulator (cuda_emulation.h) instead
// of linking cudart. "Device" memory is 256-byte-aligned host memory (4 GiB of it, so that
// arena sizing and exhaustion can be tested), work runs when it is enqueued or when a captured
// graph is launched (cuda_emulation.h, Enqueue), and the one device reports itself as emulated. A
// call outside this subset fails to link, which is the intended signal that a test needs the real
// runtime.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tests/support/cuda_emulation/cuda_emulation.h"

namespace emulation = ::pagoda::worker::cuda::emulation;

namespace {

// The emulated device's memory: room for a --gpu-memory-fraction arena beside the 256 MiB
// reserve (arena_layout.h), small enough to fill at once.
constexpr size_t kTotalMemory = size_t{4} << 30;
// The widest stride a 2D copy may take (cudaDeviceProp::memPitch; 2 GiB on a GPU): small, so
// that the backend tests meet both the 2D copies of KV pages and the per-row ones an arena
// with layers further apart takes.
constexpr size_t kMaxPitch = size_t{1} << 20;

struct Stream {
  bool capturing = false;
  std::vector<emulation::StreamWork> captured;
};
struct Graph {
  std::vector<emulation::StreamWork> work;
};
struct Event {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

Stream* AsStream(cudaStream_t s) { return reinterpret_cast<Stream*>(s); }
Graph* AsGraph(cudaGraph_t g) { return reinterpret_cast<Graph*>(g); }
Graph* AsGraph(cudaGraphExec_t g) { return reinterpret_cast<Graph*>(g); }

bool Capturing(cudaStream_t s) { return s != nullptr && AsStream(s)->capturing; }

// Device allocations and their sizes, for cudaMemGetInfo.
std::mutex memory_mutex;
std::unordered_map<void*, size_t>& Allocations() {
  static auto* allocations = new std::unordered_map<void*, size_t>;
  return *allocations;
}
size_t allocated_bytes = 0;  // guarded by memory_mutex

// The errors the fakes and the emulator return, by name and text.
struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure",
     "unspecified launch failure (emulation: see the message on stderr)"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
};

ErrorText Describe(cudaError_t error) {
  for (const ErrorText& e : kErrors) {
    if (e.error == error) return e;
  }
  return {error, "cudaError (emulation)", "CUDA error (emulation)"};
}

int compute_major = 9, compute_minor = 0;  // SetComputeCapability

}  // namespace

namespace pagoda::worker::cuda::emulation {

void SetComputeCapability(int major, int minor) {
  compute_major = major;
  compute_minor = minor;
}

cudaError_t Enqueue(cudaStream_t stream, StreamWork work) {
  if (Capturing(stream)) {
    AsStream(stream)->captured.push_back(std::move(work));
    return cudaSuccess;
  }
  return work();
}

}  // namespace pagoda::worker::cuda::emulation

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "CUDA host emulation", sizeof(prop->name) - 1);
  prop->major = compute_major;
  prop->minor = compute_minor;
  prop->totalGlobalMem = size_t{16} << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->multiProcessorCount = 132;  // an H100's: the backend sizes decode attention grids by it
  prop->memPitch = kMaxPitch;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {  // as cudaGetDeviceProperties says
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = compute_major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = compute_minor;
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  *total_bytes = kTotalMemory;
  *free_bytes = allocated_bytes < kTotalMemory ? kTotalMemory - allocated_bytes : 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  *ptr = nullptr;
  if (bytes > kTotalMemory - std::min(allocated_bytes, kTotalMemory)) {
    return cudaErrorMemoryAllocation;
  }
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  Allocations()[*ptr] = bytes;
  allocated_bytes += bytes;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = Allocations().find(ptr);
  if (it == Allocations().end()) return cudaErrorInvalidValue;
  allocated_bytes -= it->second;
  Allocations().erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                      cudaStream_t stream) {
  // Captured copies read `src` when the graph runs, as on the GPU.
  return emulation::Enqueue(stream, [=] {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, cudaMemcpyKind,
                                        cudaStream_t stream) {
  if (width > dpitch || width > spitch || dpitch > kMaxPitch || spitch > kMaxPitch) {
    return cudaErrorInvalidPitchValue;
  }
  return emulation::Enqueue(stream, [=] {
    for (size_t r = 0; r < height && width > 0; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                   width);
    }
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  return emulation::Enqueue(stream, [=] {
    if (bytes > 0) std::memset(ptr, value, bytes);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t bytes) {
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(new Stream);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  delete AsStream(stream);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  if (Capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  return emulation::PeekLastError();
}

cudaError_t CUDARTAPI cudaDeviceSynchronize() { return emulation::PeekLastError(); }

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (stream == nullptr || Capturing(stream)) return cudaErrorIllegalState;
  AsStream(stream)->capturing = true;
  AsStream(stream)->captured.clear();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!Capturing(stream)) return cudaErrorIllegalState;
  Stream& s = *AsStream(stream);
  s.capturing = false;
  *graph = reinterpret_cast<cudaGraph_t>(new Graph{std::move(s.captured)});
  s.captured.clear();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new Graph(*AsGraph(graph)));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (Capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  for (const emulation::StreamWork& work : AsGraph(exec)->work) {
    if (work() != cudaSuccess) break;  // the error is sticky: the next synchronize reports it
  }
  return cudaSuccess;
}

// Events hold the host clock at the point the stream reaches them: the emulator runs work as it
// is enqueued, so an interval between two events is the host time of the work between them.
cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto* e = reinterpret_cast<Event*>(event);
  return emulation::Enqueue(stream, [e] {
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto* a = reinterpret_cast<const Event*>(start);
  const auto* b = reinterpret_cast<const Event*>(end);
  if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

// Work has run by the time it is enqueued: every recorded event is reached. Errors are sticky,
// as on a device.
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t) { return emulation::PeekLastError(); }

// Runs `fn` when the stream reaches it, as the driver's callback thread would.
cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return emulation::Enqueue(stream, [fn, data] {
    fn(data);
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  delete AsGraph(graph);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete AsGraph(exec);
  return cudaSuccess;
}

// Kernels opt in to more than 48 KiB of dynamic shared memory; the emulator allows up to sm_90's
// limit to every launch (CheckConfiguration), so this only checks the request.
// The emulator knows no register counts: the limit of an sm_90 multiprocessor's threads alone.
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks,
                                                                    const void* func,
                                                                    int block_size,
                                                                    size_t dynamic_smem_bytes) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  if (block_size <= 0 || block_size > 1024 || dynamic_smem_bytes > (227 << 10)) {
    return cudaErrorInvalidValue;
  }
  *num_blocks = std::min(32, 2048 / block_size);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && (value < 0 || value > (227 << 10))) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetLastError() { return emulation::TakeLastError(); }

cudaError_t CUDARTAPI cudaPeekAtLastError() { return emulation::PeekLastError(); }

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) { return Describe(error).name; }

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) { return Describe(error).text; }

}  // extern "C"
