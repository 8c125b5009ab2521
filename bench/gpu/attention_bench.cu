// Decode attention on Llama-3-8B shapes (32 query heads, 8 KV heads, head_dim 128, page 16, bf16)
// against the device-to-device copy bandwidth: every context position's K and V row of every
// sequence is read once, so kv_GBps = KV bytes / kernel time (split + merge kernels, CUDA events).
//
// Prefill attention (the tensor-core kernels) on the same shapes: one prompt of 1k, 8k and 32k
// tokens in one launch, TFLOP/s of the causal work, beside PyTorch's SDPA in bench/gpu.sh.
//
// Benchmarks (counters parsed from --benchmark_format=json by later scripts):
//   BM_PrefillAttention/tokens:N/kernel:K/rows_per_block:R: tflops, median_ms (K auto with R 0:
//     the launcher's pick, as the backend runs it; mma_sync with R 64 or 128; wgmma)
//   BM_DecodeAttention/batch:B/ctx:C/{paged,contiguous,paged_512}: kv_GBps, copy_GBps,
//     kv_over_copy, partition_tokens (paged: a random permutation of pages; contiguous:
//     contiguous_kv = true on the same cache; both partitioned as the backend does, with
//     DecodePartitionSplit; paged_512: partitions of 512 positions, as before that)
//   BM_DecodeAttentionPagedOverContiguous/batch:B/ctx:C: paged_over_contiguous = paged time /
//     contiguous time, the two launched alternately in each iteration.
// The KV (1 GiB per shape) is far larger than L2, so one buffer is reused across iterations.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu/bench_options.h"
#include "bench/gpu/copy_bandwidth.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/kernel_args.h"

namespace pagoda::bench {
namespace {

namespace pc = pagoda::worker::cuda;

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kPageSize = 16;

// Uniform values in [-1, 1) from a hash of the index: never zeros, never NaN.
__global__ void FillRandomBf16(__nv_bfloat16* data, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    data[i] = __float2bfloat16(static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  PAGODA_BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(count * sizeof(T), 16)));
  return static_cast<T*>(p);
}

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  T* p = DeviceAlloc<T>(v.size());
  PAGODA_BENCH_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Random q and KV caches in pages on the device, one batch's entries, and the CUDA events that
// time a launch: what the decode and prefill setups share.
class AttentionSetup {
 public:
  AttentionSetup(size_t cache_elems, size_t q_elems, uint32_t seed,
                 const std::vector<int32_t>& token_start, const std::vector<int32_t>& num_tokens,
                 const std::vector<int32_t>& start_pos, const std::vector<int32_t>& page_table)
      : q_elems_(q_elems) {
    k_ = DeviceAlloc<__nv_bfloat16>(cache_elems);
    v_ = DeviceAlloc<__nv_bfloat16>(cache_elems);
    q_ = DeviceAlloc<__nv_bfloat16>(q_elems);
    out_ = DeviceAlloc<__nv_bfloat16>(q_elems);
    FillRandomBf16<<<1024, 256>>>(k_, cache_elems, seed);
    FillRandomBf16<<<1024, 256>>>(v_, cache_elems, seed + 1);
    FillRandomBf16<<<1024, 256>>>(q_, q_elems, seed + 2);
    PAGODA_BENCH_CUDA(cudaGetLastError());
    token_start_ = DeviceCopy(token_start);
    num_tokens_ = DeviceCopy(num_tokens);
    start_pos_ = DeviceCopy(start_pos);
    page_table_ = DeviceCopy(page_table);
    PAGODA_BENCH_CUDA(cudaEventCreate(&start_));
    PAGODA_BENCH_CUDA(cudaEventCreate(&stop_));
  }
  ~AttentionSetup() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    for (void* p : {static_cast<void*>(k_), static_cast<void*>(v_), static_cast<void*>(q_),
                    static_cast<void*>(out_), static_cast<void*>(token_start_),
                    static_cast<void*>(num_tokens_), static_cast<void*>(start_pos_),
                    static_cast<void*>(page_table_)}) {
      cudaFree(p);
    }
  }
  AttentionSetup(const AttentionSetup&) = delete;
  AttentionSetup& operator=(const AttentionSetup&) = delete;

  // False when the output holds a NaN or an infinity (a broken kernel, not a slow one).
  bool OutputFinite() const {
    std::vector<__nv_bfloat16> out(q_elems_);
    PAGODA_BENCH_CUDA(cudaMemcpy(out.data(), out_, out.size() * 2, cudaMemcpyDeviceToHost));
    return std::all_of(out.begin(), out.end(),
                       [](__nv_bfloat16 v) { return std::isfinite(__bfloat162float(v)); });
  }

 protected:
  // Seconds of what `launch` enqueues on the default stream, by CUDA events; aborts on an error.
  template <typename Launch>
  double Timed(Launch launch) {
    PAGODA_BENCH_CUDA(cudaEventRecord(start_));
    if (const absl::Status launched = launch(); !launched.ok()) {
      std::fprintf(stderr, "%s\n", launched.ToString().c_str());
      std::abort();
    }
    PAGODA_BENCH_CUDA(cudaEventRecord(stop_));
    PAGODA_BENCH_CUDA(cudaEventSynchronize(stop_));
    float ms = 0;
    PAGODA_BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

  pc::AttentionShape Shape() const {
    return {kHeads,          kKvHeads, kHeadDim, kPageSize, 1.0f / std::sqrt(float{kHeadDim}),
            pc::DType::kBf16};
  }

  size_t q_elems_;
  __nv_bfloat16 *k_ = nullptr, *v_ = nullptr, *q_ = nullptr, *out_ = nullptr;
  int32_t *token_start_ = nullptr, *num_tokens_ = nullptr, *start_pos_ = nullptr;
  int32_t* page_table_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Pages 0 .. n - 1 in a seeded random order, as after a while of serving.
std::vector<int32_t> ShuffledPages(size_t n, uint32_t seed) {
  std::vector<int32_t> pages(n);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(seed));
  return pages;
}

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A decode batch of `batch` sequences at context `ctx` with random q and KV on the device.
class DecodeSetup : public AttentionSetup {
 public:
  // backend_split: partitions as the backend cuts them (DecodePartitionSplit with this device's
  // multiprocessors and the split kernel's occupancy); false: kDecodePartitionTokens each.
  DecodeSetup(int batch, int ctx, bool backend_split = true)
      : AttentionSetup(static_cast<size_t>(batch) * PagesOf(ctx) * kPageSize * kKvHeads * kHeadDim,
                       static_cast<size_t>(batch) * kHeads * kHeadDim, 1, Iota(batch),
                       std::vector<int32_t>(batch, 1), std::vector<int32_t>(batch, ctx - 1),
                       ShuffledPages(static_cast<size_t>(batch) * PagesOf(ctx), 1234)),
        batch_(batch),
        ctx_(ctx) {
    int multiprocessors = 0;
    PAGODA_BENCH_CUDA(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0));
    const int split =
        backend_split
            ? pc::DecodePartitionSplit(batch, kKvHeads, pc::DecodePartitions(ctx), multiprocessors,
                                       int64_t{1} << 30, pc::DecodeBlocksPerMultiprocessor(Shape()))
            : 1;
    max_partitions_ = pc::DecodePartitions(ctx) * split;
    partition_tokens_ = pc::kDecodePartitionTokens / split;
    workspace_ = DeviceAlloc<char>(
        pc::DecodeAttentionWorkspaceBytes(batch, kHeads, kHeadDim, max_partitions_));
    counters_ = DeviceAlloc<uint32_t>(static_cast<size_t>(batch) * kKvHeads);
    PAGODA_BENCH_CUDA(cudaMemset(counters_, 0, static_cast<size_t>(batch) * kKvHeads * 4));
    PAGODA_BENCH_CUDA(cudaDeviceSynchronize());
  }
  ~DecodeSetup() {
    cudaFree(workspace_);
    cudaFree(counters_);
  }

  // K and V bytes of every context position of every sequence.
  double KvBytes() const { return 2.0 * batch_ * ctx_ * kKvHeads * kHeadDim * sizeof(uint16_t); }

  // Seconds of one launch.
  double TimedLaunch(bool contiguous) {
    pc::DecodeAttentionParams p;
    p.batch = {token_start_, num_tokens_, start_pos_, page_table_, PagesOf(ctx_), batch_};
    p.shape = Shape();
    p.q = q_;
    p.k_cache = k_;
    p.v_cache = v_;
    p.out = out_;
    p.max_partitions = max_partitions_;
    p.partition_tokens = partition_tokens_;
    p.workspace = workspace_;
    p.counters = counters_;
    p.contiguous_kv = contiguous;
    return Timed([&] { return pc::LaunchDecodeAttention(p, nullptr); });
  }

 private:
  static int PagesOf(int ctx) { return (ctx + kPageSize - 1) / kPageSize; }

  int batch_;
  int ctx_;
  int max_partitions_ = 1;
  int partition_tokens_ = pc::kDecodePartitionTokens;
  char* workspace_ = nullptr;
  uint32_t* counters_ = nullptr;

 public:
  int partition_tokens() const { return partition_tokens_; }
};

void BM_DecodeAttention(benchmark::State& state, int batch, int ctx, bool paged,
                        bool backend_split) {
  const double copy = CopyBandwidth();
  DecodeSetup setup(batch, ctx, backend_split);
  for (int i = 0; i < 3; ++i) setup.TimedLaunch(!paged);  // warm-up
  double total = 0;
  for (auto _ : state) {
    const double t = setup.TimedLaunch(!paged);
    state.SetIterationTime(t);
    total += t;
  }
  if (!setup.OutputFinite()) state.SkipWithError("decode attention wrote NaN or infinity");
  const double kv = setup.KvBytes() * static_cast<double>(state.iterations()) / total;
  state.counters["kv_GBps"] = kv / 1e9;
  state.counters["copy_GBps"] = copy / 1e9;
  state.counters["kv_over_copy"] = kv / copy;
  state.counters["partition_tokens"] = setup.partition_tokens();
}

void BM_DecodeAttentionPagedOverContiguous(benchmark::State& state, int batch, int ctx) {
  DecodeSetup setup(batch, ctx);
  for (int i = 0; i < 3; ++i) {
    setup.TimedLaunch(false);
    setup.TimedLaunch(true);
  }
  double paged = 0, contiguous = 0;
  for (auto _ : state) {
    const double t = setup.TimedLaunch(false);
    contiguous += setup.TimedLaunch(true);
    state.SetIterationTime(t);
    paged += t;
  }
  if (!setup.OutputFinite()) state.SkipWithError("decode attention wrote NaN or infinity");
  const double n = static_cast<double>(state.iterations());
  state.counters["paged_over_contiguous"] = paged / contiguous;
  state.counters["paged_us"] = paged / n * 1e6;
  state.counters["contiguous_us"] = contiguous / n * 1e6;
}

// One prompt of `tokens` tokens prefilled in one launch (start_pos 0): its K/V already in
// shuffled pages, as after RoPE and the KV write of the same step.
class PrefillSetup : public AttentionSetup {
 public:
  explicit PrefillSetup(int tokens)
      : AttentionSetup(static_cast<size_t>(PagesOf(tokens)) * kPageSize * kKvHeads * kHeadDim,
                       static_cast<size_t>(tokens) * kHeads * kHeadDim, 11, {0}, {tokens}, {0},
                       ShuffledPages(PagesOf(tokens), 99)),
        tokens_(tokens) {
    PAGODA_BENCH_CUDA(cudaDeviceSynchronize());
  }

  // Causal attention's multiply-adds, two FLOPs each: Q·Kᵀ and P·V over the N (N + 1) / 2
  // (query, key) pairs of every query head. PyTorch's side (bench/gpu/sdpa_bench.py) counts alike.
  double Flops() const {
    return 4.0 * kHeads * kHeadDim * (static_cast<double>(tokens_) * (tokens_ + 1) / 2);
  }

  double TimedLaunch(pc::PrefillKernel kernel, int rows_per_block) {
    pc::PrefillAttentionParams p;
    p.batch = {token_start_, num_tokens_, start_pos_, page_table_, PagesOf(tokens_), 1};
    p.shape = Shape();
    p.q = q_;
    p.k_cache = k_;
    p.v_cache = v_;
    p.out = out_;
    p.max_chunk_tokens = tokens_;
    p.kernel = kernel;
    p.rows_per_block = rows_per_block;
    return Timed([&] { return pc::LaunchPrefillAttention(p, nullptr); });
  }

 private:
  static int PagesOf(int tokens) { return (tokens + kPageSize - 1) / kPageSize; }

  int tokens_;
};

// Prefill attention TFLOP/s (median launch time) for one prompt; kernel kAuto with
// rows_per_block 0 is the launcher's own choice, as the backend runs it (or the kernel that
// GPU_BENCH_PREFILL_KERNEL names).
void BM_PrefillAttention(benchmark::State& state, int tokens, pc::PrefillKernel kernel,
                         int rows_per_block) {
  if (kernel == pc::PrefillKernel::kAuto) kernel = BenchPrefillKernel();
  PrefillSetup setup(tokens);
  for (int i = 0; i < 3; ++i) setup.TimedLaunch(kernel, rows_per_block);  // warm-up
  std::vector<double> times;
  for (auto _ : state) {
    const double t = setup.TimedLaunch(kernel, rows_per_block);
    state.SetIterationTime(t);
    times.push_back(t);
  }
  if (!setup.OutputFinite()) state.SkipWithError("prefill attention wrote NaN or infinity");
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  state.counters["tflops"] = setup.Flops() / median / 1e12;
  state.counters["median_ms"] = median * 1e3;
  state.counters["tokens"] = tokens;
}

[[maybe_unused]] const bool kRegistered = [] {
  const struct {
    const char* name;
    pc::PrefillKernel kernel;
    int rows;
  } kernels[] = {{"auto", pc::PrefillKernel::kAuto, 0},
                 {"mma_sync", pc::PrefillKernel::kMmaSync, 64},
                 {"mma_sync", pc::PrefillKernel::kMmaSync, 128},
                 {"wgmma", pc::PrefillKernel::kWgmma, 128}};
  for (int tokens : {1024, 8192, 32768}) {
    for (const auto& k : kernels) {
      const std::string name = "BM_PrefillAttention/tokens:" + std::to_string(tokens) +
                               "/kernel:" + k.name + "/rows_per_block:" + std::to_string(k.rows);
      benchmark::RegisterBenchmark(name.c_str(), BM_PrefillAttention, tokens, k.kernel, k.rows)
          ->UseManualTime()
          ->MinTime(tokens >= 32768 ? 1.0 : 0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const auto& [batch, ctx] : {std::pair{64, 4096}, std::pair{4, 32768}}) {
    const std::string shape = "/batch:" + std::to_string(batch) + "/ctx:" + std::to_string(ctx);
    for (bool paged : {true, false}) {
      const std::string name = "BM_DecodeAttention" + shape + (paged ? "/paged" : "/contiguous");
      benchmark::RegisterBenchmark(name.c_str(), BM_DecodeAttention, batch, ctx, paged, true)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    // The earlier fixed partitions of 512 positions, beside the backend's choice.
    benchmark::RegisterBenchmark(("BM_DecodeAttention" + shape + "/paged_512").c_str(),
                                 BM_DecodeAttention, batch, ctx, true, false)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_DecodeAttentionPagedOverContiguous" + shape).c_str(),
                                 BM_DecodeAttentionPagedOverContiguous, batch, ctx)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace pagoda::bench
