// End-to-end steps of the CUDA backend on a Llama-3-8B-shaped model with seeded random weights
// made on the device (no 16 GB file). One backend lives at a time (weights plus a 33 GB KV arena).
//
// BM_DecodeStep: one ForwardSample of `batch` decode tokens at context kContext (KV pages
// pre-filled with random values), CUDA graphs on, BF16 weights (the worker's defaults, as every
// benchmark here unless its name says otherwise): host planning, input copy, graph
// replay, sampling and the token copy back are all inside the timed region; against the roofline
// (weight bytes + KV bytes read per step) / measured device-to-device copy bandwidth.
//
// BM_WeightsDecode/<weights>/<path>/batch:B: the same step with the weights in BF16, FP8 (the
// layers' matrices, --dtype fp8), or Q8_0 or Q4_K_M (llama.cpp's mix: Q4_K, with Q6_K for the
// classifier and for V and down in its "more bits" layers) kept in their blocks (--dtype
// auto), each beside its own roofline and with the device memory the backend holds, each at the
// worker's default ("auto", its choices timed at start: counters dense_gemv_tokens,
// fp8_gemv_tokens, block_cublas_tokens) and with each of those choices forced (Path below).
// BM_WeightsPrefill: the same backends' time to first token of a 2048-token prompt in one
// chunk, as tokens/s.
//
// BM_PrefillTtft/tokens:N/chunk:C: time to first token of one N-token prompt, prefilled in
// chunks of C tokens, one ForwardSample per chunk as the scheduler plans them (at the defaults
// a CUDA worker asks for chunks of its whole budget: counter default_chunk, 8192 on an H100),
// the last chunk sampling the first token.
// BM_PrefillGemmFloor/tokens:N/chunk:C: the same prompt's GEMMs alone, through the backend's own
// cuBLAS wrapper on random weights of the same shapes (per chunk and layer QKV, output, gate/up
// and down projections; the LM head once, for the last token). bench/gpu.sh adds PyTorch's
// attention time for the prompt to make the TTFT floor.
//
// BM_PhasesPrefill and BM_PhasesDecode: the device time of each part of the pass (norms, each
// projection, RoPE + KV write, attention, SiLU·mul, classifier, sampling), eager, with no
// launch gaps counted (PhaseTimer): where the distance to the floor and the roofline lies.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "bench/gpu/bench_options.h"
#include "bench/gpu/copy_bandwidth.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/gemm.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/phase_timer.h"
#include "worker/backend/cuda/quant/quant_kernels.h"

namespace pagoda::bench {
namespace {

namespace pc = pagoda::worker::cuda;

constexpr int kContext = 1024;  // positions per sequence already in the KV cache
constexpr int kMaxBatch = 256;
constexpr int kPageSize = 16;
// Prefill chunk sizes the benchmarks try: 512, 2048 and this, the per-sequence chunk the
// scheduler plans on an H100-class GPU (DefaultMaxBatchTokens; 2048 on smaller ones).
constexpr int kMaxChunk = 8192;

common::ModelConfig Llama3_8B() {
  common::ModelConfig c;
  c.architecture = "llama";
  c.name = "llama-3-8b-shape (random)";
  c.n_layers = 32;
  c.dim = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.ffn_dim = 14336;
  c.vocab_size = 128256;
  c.context_length = 131072;  // Llama 3.1's: the prefill benchmarks go to 32k
  c.rms_eps = 1e-5f;
  c.rope_base = 500000.0f;
  return c;
}

// The weights a benchmark runs: kBf16 converted, or kept in GGUF blocks.
enum class Weights { kBf16, kFp8, kQ8_0, kQ4_K_M };
const char* WeightsName(Weights w) {
  switch (w) {
    case Weights::kBf16:
      return "bf16";
    case Weights::kFp8:
      return "fp8";
    case Weights::kQ8_0:
      return "q8_0";
    case Weights::kQ4_K_M:
      return "q4_k_m";
  }
  return "?";
}

pc::WeightFormats FormatsOf(Weights w, const common::ModelConfig& c) {
  using F = pc::WeightFormat;
  pc::WeightFormats f;
  if (w == Weights::kBf16) return f;
  if (w == Weights::kFp8) {  // --dtype fp8: the layers' matrices; embedding and classifier BF16
    f.layers.assign(static_cast<size_t>(c.n_layers), {});
    for (auto& layer : f.layers) layer.fill(F::kFp8);
    return f;
  }
  const bool q8 = w == Weights::kQ8_0;
  const F base = q8 ? F::kQ8_0 : F::kQ4_K;
  f.embedding = base;
  f.output = q8 ? F::kQ8_0 : F::kQ6_K;
  for (int i = 0; i < c.n_layers; ++i) {
    // llama.cpp's Q4_K_M gives V and down Q6_K in the first and last eighth of the layers and
    // every third layer between.
    const int n = c.n_layers;
    const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    const F v_down = !q8 && more_bits ? F::kQ6_K : base;
    f.layers.push_back({base, base, v_down, base, base, base, v_down});
  }
  return f;
}

// How weights are multiplied. The defaults (the worker's, "auto"): BF16 and FP8 steps of up to
// 8 tokens through our GEMV or the library, as timed at start (--gemv-max-tokens auto), cuBLAS /
// cuBLASLt beyond; blocks through the fused FP32 product up to 8 tokens, and beyond on tensor
// cores or decoded ahead of cuBLAS, from the step size the start-up timing picked (counter
// block_cublas_tokens, 0: tensor cores throughout); FP8 past its GEMV through our tensor-core
// product or cuBLASLt, from the size the start-up timing picked (fp8_cublaslt_tokens). The
// others: blocks past 8 tokens always on tensor cores ("tensor_cores": the wgmma kernel on
// compute capability 9.0), always on the mma.sync kernel ("tensor_cores_mma_sync": the
// default's own on GPUs without wgmma), always decoded ahead of cuBLAS ("decode_cublas"), or
// the fused product with 8-bit activations ("gemv_int8"); FP8 past 8 tokens always on our
// tensor cores ("tensor_cores"); BF16 and FP8 with every small step through our GEMV ("gemv",
// "gemv_cublaslt") or through the library ("cublas", "cublaslt"); and the default with the
// kernels of a step as they were before the work on its kernel count and gaps ("serial_unfused":
// every kernel launched after the one before it has finished, no programmatic dependent
// launches, and SiLU·up in its own kernel after the gate/up GEMV). The default splits the
// columns of a tensor-core product whose tiles leave SMs idle up to the step size the start-up
// timing picked (split_k_tokens, 0: never); "tensor_cores" splits wherever they do, and
// "tensor_cores_unsplit" never.
enum class Path {
  kDefault,
  kTensorCores,
  kTensorCoresUnsplit,
  kMmaSync,
  kDecodeCublas,
  kGemvInt8,
  kGemv,
  kLibrary,
  kSerialUnfused
};
const char* PathName(Path p, Weights w) {
  switch (p) {
    case Path::kDefault:
      return "auto";
    case Path::kTensorCores:
      return "tensor_cores";
    case Path::kTensorCoresUnsplit:
      return "tensor_cores_unsplit";
    case Path::kDecodeCublas:
      return "decode_cublas";
    case Path::kMmaSync:
      return "tensor_cores_mma_sync";
    case Path::kGemvInt8:
      return "gemv_int8";
    case Path::kGemv:
      return w == Weights::kFp8 ? "gemv_cublaslt" : "gemv";
    case Path::kLibrary:
      return w == Weights::kFp8 ? "cublaslt" : "cublas";
    case Path::kSerialUnfused:
      return "serial_unfused";
  }
  return "?";
}

// The one backend alive: created for (weights, path), replacing the previous.
pc::CudaBackend& BackendFor(Weights weights, Path path) {
  static std::unique_ptr<pc::CudaBackend> backend;
  static std::pair<Weights, Path> key;
  if (backend != nullptr && key == std::make_pair(weights, path)) return *backend;
  backend.reset();
  key = {weights, path};
  pc::CudaBackendOptions o;
  o.page_size = kPageSize;
  o.num_pages = kMaxBatch * ((kContext + kPageSize) / kPageSize + 1);
  o.max_batch_tokens = kMaxChunk;
  o.dtype = pc::DType::kBf16;
  o.quant_decode_then_cublas = path == Path::kDecodeCublas;
  o.quant_cublas_min_tokens = path == Path::kDefault ? pc::kGemvAuto : 0;
  const bool tensor_cores = path == Path::kTensorCores || path == Path::kTensorCoresUnsplit;
  o.fp8_cublaslt_min_tokens = path == Path::kDefault ? pc::kGemvAuto : tensor_cores ? 0 : 1;
  o.split_k_max_tokens = path == Path::kDefault       ? pc::kGemvAuto
                         : path == Path::kTensorCores ? kMaxChunk
                                                      : 0;
  o.quant_gemm_kernel =
      path == Path::kMmaSync ? pc::QuantGemmKernel::kMmaSync : pc::QuantGemmKernel::kAuto;
  o.quant_gemv_int8 = path == Path::kGemvInt8;
  // The forced paths force only the weights' own format (FP8 rows keep the BF16 classifier's
  // choice).
  const int forced = path == Path::kGemv ? pc::kQuantGemvMaxTokens : 0;
  const bool forcing = path == Path::kGemv || path == Path::kLibrary;
  o.dense_gemv_max_tokens = forcing && weights == Weights::kBf16 ? forced : pc::kGemvAuto;
  o.fp8_gemv_max_tokens = forcing && weights == Weights::kFp8 ? forced : pc::kGemvAuto;
  o.prefill_kernel = BenchPrefillKernel();
  o.time_prefill_kernel = o.prefill_kernel == pc::PrefillKernel::kAuto;  // as the worker
  o.programmatic_launch = path != Path::kSerialUnfused;
  o.fuse_glu = path != Path::kSerialUnfused;
  const common::ModelConfig config = Llama3_8B();
  auto b = pc::CudaBackend::CreateRandom(config, 42, o, FormatsOf(weights, config));
  if (!b.ok()) {
    std::fprintf(stderr, "CreateRandom: %s\n", std::string(b.status().message()).c_str());
    std::abort();
  }
  if (auto s = (*b)->FillKvRandom(7); !s.ok()) {
    std::fprintf(stderr, "FillKvRandom: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
  backend = *std::move(b);
  return *backend;
}

pc::CudaBackend& Backend() { return BackendFor(Weights::kBf16, Path::kDefault); }

// Sets counter "<part>_ms" to each part's device time over `count` (PhaseTimer), and
// "parts_ms" to their sum.
void PhaseCounters(benchmark::State& state, const pc::PhaseTimer& timer, double count) {
  for (int p = 0; p < pc::PhaseTimer::kPhases; ++p) {
    state.counters[std::string(pc::PhaseTimer::Name(p)) + "_ms"] = timer.ms(p) / count;
  }
  state.counters["parts_ms"] = timer.total_ms() / count;
}

// Times decode steps of `batch` sequences on `b` (see BM_DecodeStep); with `timer`, the timed
// steps (not the warm-up) run with it: eager, parts timed.
void RunDecode(benchmark::State& state, pc::CudaBackend& b, int batch,
               pc::PhaseTimer* timer = nullptr) {
  const double copy_bw = CopyBandwidth();
  const common::ModelConfig& c = b.config();
  // Each sequence owns a shuffled run of pages, as after a while of serving.
  const int pages_per_seq = (kContext + 1 + kPageSize - 1) / kPageSize;
  std::vector<int32_t> ids(static_cast<size_t>(b.num_pages()));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  std::vector<std::vector<int32_t>> pages(batch), tokens(batch);
  std::vector<worker::SeqInput> steps;
  std::vector<worker::SampleInput> samples;
  for (int i = 0; i < batch; ++i) {
    pages[i].assign(ids.begin() + i * pages_per_seq, ids.begin() + (i + 1) * pages_per_seq);
    tokens[i] = {(i * 7919) % c.vocab_size};
    steps.push_back({tokens[i], kContext, pages[i], true});
    samples.push_back({worker::SamplingParams{}, 0});
  }
  std::vector<int32_t> out;
  for (int i = 0; i < 3; ++i) {  // warm-up: graph capture, cuBLAS heuristics
    if (auto s = b.ForwardSample(steps, samples, &out); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  b.set_phase_timer(timer);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = b.ForwardSample(steps, samples, &out);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      b.set_phase_timer(nullptr);
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  b.set_phase_timer(nullptr);
  if (timer != nullptr) PhaseCounters(state, *timer, timer->passes());
  const double kv_bytes = double(batch) * (kContext + 1) * 2.0 * c.n_layers * c.kv_dim() * 2.0;
  const double roofline_s = (double(b.weight_bytes_per_step()) + kv_bytes) / copy_bw;
  state.counters["tokens_per_s"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["roofline_tokens_per_s"] = batch / roofline_s;
  state.counters["weight_GB"] = double(b.weight_bytes_per_step()) / 1e9;
  state.counters["kv_GB"] = kv_bytes / 1e9;
  state.counters["copy_GBps"] = copy_bw / 1e9;
  state.counters["graph_replays"] = b.graph_replays();
  state.counters["device_GB"] = double(b.device_bytes()) / 1e9;
  // The small-batch products in use (what --gemv-max-tokens auto picked, for "auto").
  state.counters["dense_gemv_tokens"] = b.dense_gemv_max_tokens();
  state.counters["fp8_gemv_tokens"] = b.fp8_gemv_max_tokens();
  // Kept blocks past the fused product: decoded ahead of cuBLAS from this many tokens (0: never).
  state.counters["block_cublas_tokens"] = b.quant_cublas_min_tokens();
  // FP8 past the GEMV: through cuBLASLt from this many tokens (0: never; our tensor cores below).
  state.counters["fp8_cublaslt_tokens"] = b.fp8_cublaslt_min_tokens();
  // Tensor-core products split their columns where the tiles leave SMs idle, for steps of up to
  // this many tokens (0: never).
  state.counters["split_k_tokens"] = b.split_k_max_tokens();
  // Our kernels launched after each other programmatically (serial_unfused: 0).
  state.counters["programmatic_launch"] = b.programmatic_launch();
}

void BM_DecodeStep(benchmark::State& state) {
  RunDecode(state, Backend(), static_cast<int>(state.range(0)));
}
// over_roofline is computed by bench/gpu.sh from tokens_per_s / roofline_tokens_per_s.
BENCHMARK(BM_DecodeStep)
    ->ArgName("batch")
    ->Arg(1)
    ->Arg(64)
    ->Arg(256)
    ->UseManualTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMillisecond);

void Fail(benchmark::State& state, const absl::Status& s) {
  state.SkipWithError(std::string(s.message()).c_str());
}

// Times `run` (which returns once its work is done) by the host clock, once per iteration, and
// sets counter `name` to the median in ms beside the prompt's tokens and chunk (the state's
// two arguments). Skips the state with the error when run fails.
template <typename Run>
void TimeMedian(benchmark::State& state, const char* name, Run run) {
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (const absl::Status s = run(); !s.ok()) return Fail(state, s);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(t);
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  state.counters[name] = times[times.size() / 2] * 1e3;
}

// Prefills one `tokens`-token prompt on `b` in chunks of `chunk`, timed by TimeMedian into
// counter "ttft_ms"; with `timer`, the timed prompts (not the warm-up) run with it.
void RunPrefill(benchmark::State& state, pc::CudaBackend& b, int tokens, int chunk,
                pc::PhaseTimer* timer = nullptr) {
  const common::ModelConfig& c = b.config();
  const int num_pages = (tokens + kPageSize - 1) / kPageSize;
  if (num_pages > b.num_pages()) return state.SkipWithError("the KV arena is too small");
  std::vector<int32_t> pages(static_cast<size_t>(b.num_pages()));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(3));
  pages.resize(num_pages);
  std::vector<int32_t> prompt(tokens);
  std::mt19937 rng(tokens);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
  std::vector<int32_t> out;
  auto prefill = [&]() -> absl::Status {
    for (int start = 0; start < tokens; start += chunk) {
      const int n = std::min(chunk, tokens - start);
      const bool last = start + n == tokens;
      const worker::SeqInput step{
          std::span<const int32_t>(prompt).subspan(start, n), start,
          std::span<const int32_t>(pages).first((start + n + kPageSize - 1) / kPageSize), last};
      std::vector<worker::SampleInput> samples;
      if (last) samples.push_back({worker::SamplingParams{}, 0});
      RETURN_IF_ERROR(b.ForwardSample({&step, 1}, samples, &out));
    }
    return absl::OkStatus();
  };
  if (auto s = prefill(); !s.ok()) return Fail(state, s);  // warm-up
  b.set_phase_timer(timer);
  TimeMedian(state, "ttft_ms", prefill);
  b.set_phase_timer(nullptr);
  if (timer != nullptr) PhaseCounters(state, *timer, static_cast<double>(state.iterations()));
  state.counters["tokens"] = tokens;
  state.counters["chunk"] = chunk;
  // Prefill attention's kernel in the pass (the start-up timing's pick, unless forced).
  state.counters["prefill_wgmma"] = b.prefill_kernel() == pc::PrefillKernel::kWgmma;
  // The chunk the scheduler plans on this GPU at the worker's defaults.
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    state.counters["default_chunk"] = pc::DefaultMaxBatchTokens(prop.totalGlobalMem, prop.major);
  }
}

void BM_PrefillTtft(benchmark::State& state) {
  RunPrefill(state, Backend(), static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
}

void BM_PrefillGemmFloor(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0)), chunk = static_cast<int>(state.range(1));
  const common::ModelConfig c = Llama3_8B();
  cudaStream_t stream = nullptr;
  PAGODA_BENCH_CUDA(cudaStreamCreate(&stream));
  auto gemm = pc::Gemm::Create(stream, pc::DType::kBf16);
  if (!gemm.ok()) return Fail(state, gemm.status());
  // One layer's weights (each far larger than L2, so reusing them across layers saves nothing),
  // the LM head, and the chunk's activations (bf16 in, fp32 out), all random.
  const size_t qkv = c.q_dim() + 2 * c.kv_dim();
  std::vector<pc::DeviceBuffer> bufs;
  for (const size_t bytes :
       {qkv * c.dim * 2, size_t(c.dim) * c.q_dim() * 2, size_t(2) * c.ffn_dim * c.dim * 2,
        size_t(c.dim) * c.ffn_dim * 2, size_t(c.vocab_size) * c.dim * 2,
        size_t(chunk) * c.ffn_dim * 2, size_t(chunk) * 2 * c.ffn_dim * 4}) {
    auto buf = pc::DeviceBuffer::Allocate(bytes, "floor GEMM operand");
    if (!buf.ok()) return Fail(state, buf.status());
    if (auto s = pc::LaunchFillRandom(buf->get(), bytes / 2, pc::DType::kBf16, 0.05f,
                                      bufs.size() + 1, stream);
        !s.ok()) {
      return Fail(state, s);
    }
    bufs.push_back(std::move(*buf));
  }
  void *wqkv = bufs[0].get(), *wo = bufs[1].get(), *wgu = bufs[2].get(), *wdown = bufs[3].get();
  void *head = bufs[4].get(), *x = bufs[5].get();
  float* y = bufs[6].get<float>();
  auto run = [&]() -> absl::Status {
    for (int start = 0; start < tokens; start += chunk) {
      const int n = std::min(chunk, tokens - start);
      for (int l = 0; l < c.n_layers; ++l) {
        RETURN_IF_ERROR((*gemm)->Run({x, wqkv, y, n, c.dim, static_cast<int>(qkv), false}));
        RETURN_IF_ERROR((*gemm)->Run({x, wo, y, n, c.q_dim(), c.dim, true}));
        RETURN_IF_ERROR((*gemm)->Run({x, wgu, y, n, c.dim, 2 * c.ffn_dim, false}));
        RETURN_IF_ERROR((*gemm)->Run({x, wdown, y, n, c.ffn_dim, c.dim, true}));
      }
    }
    return (*gemm)->Run({x, head, y, 1, c.dim, c.vocab_size, false});
  };
  for (int i = 0; i < 2; ++i) {  // warm-up: cuBLAS heuristics
    if (auto s = run(); !s.ok()) return Fail(state, s);
  }
  PAGODA_BENCH_CUDA(cudaStreamSynchronize(stream));
  TimeMedian(state, "gemm_ms", [&] {
    const absl::Status s = run();
    PAGODA_BENCH_CUDA(cudaStreamSynchronize(stream));
    return s;
  });
  state.counters["tokens"] = tokens;
  state.counters["chunk"] = chunk;
  gemm->reset();
  cudaStreamDestroy(stream);
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "chunk"});
  for (int tokens : {1024, 8192, 32768}) {
    for (int chunk : {512, 2048, kMaxChunk}) {
      if (chunk < kMaxChunk || tokens > 2048) b->Args({tokens, chunk});  // one row per plan
    }
  }
}
BENCHMARK(BM_PrefillTtft)
    ->Apply(PrefillArgs)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillGemmFloor)
    ->Apply(PrefillArgs)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

// Where the time goes: BM_PhasesPrefill/tokens:N/chunk:C times the parts of one prompt's
// prefill (per prompt), BM_PhasesDecode/<weights>/batch:B those of one decode step (per step;
// BF16, FP8 and Q4_K_M at their defaults), with the stream held while each pass is enqueued,
// so no launch gap is counted (PhaseTimer).
void BM_PhasesPrefill(benchmark::State& state) {
  pc::PhaseTimer timer(/*hold=*/true);
  RunPrefill(state, Backend(), static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
             &timer);
}
BENCHMARK(BM_PhasesPrefill)
    ->ArgNames({"tokens", "chunk"})
    ->Args({8192, kMaxChunk})
    ->Args({32768, kMaxChunk})
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

const bool kPhasesRegistered = [] {
  for (Weights w : {Weights::kBf16, Weights::kFp8, Weights::kQ4_K_M}) {
    for (int batch : {1, 64}) {
      benchmark::RegisterBenchmark(
          ("BM_PhasesDecode/" + std::string(WeightsName(w)) + "/batch:" + std::to_string(batch))
              .c_str(),
          [w, batch](benchmark::State& state) {
            pc::PhaseTimer timer(/*hold=*/true);
            RunDecode(state, BackendFor(w, Path::kDefault), batch, &timer);
          })
          ->UseManualTime()
          ->Iterations(20)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

// Per weights and path (in an order that builds each backend once): decode at 1, 16, 64 and 256
// sequences, then the prefill. For block weights: the default (auto), each of its products past 8
// tokens forced (tensor_cores, tensor_cores_mma_sync, decode_cublas: 16, 64, 256 and the
// prefill), and gemv_int8 (batch 1). For BF16 and FP8: the default (auto), and at batch 1 both
// sides of its choice; for FP8 also our tensor cores past 8 tokens (tensor_cores). For BF16, FP8
// and Q4_K_M at batch 1: serial_unfused.
const bool kWeightsRegistered = [] {
  for (Weights w : {Weights::kBf16, Weights::kFp8, Weights::kQ8_0, Weights::kQ4_K_M}) {
    for (Path path : {Path::kDefault, Path::kTensorCores, Path::kMmaSync, Path::kDecodeCublas,
                      Path::kGemvInt8, Path::kGemv, Path::kLibrary, Path::kSerialUnfused}) {
      const bool blocks = w == Weights::kQ8_0 || w == Weights::kQ4_K_M;
      const bool large_only =
          path == Path::kTensorCores || path == Path::kMmaSync || path == Path::kDecodeCublas;
      // FP8's cuBLASLt side past the GEMV is in the start-up timing's log line.
      const bool fp8_large = w == Weights::kFp8 && path == Path::kTensorCores;
      const bool applies = path == Path::kDefault || fp8_large ||
                           (blocks && (large_only || path == Path::kGemvInt8)) ||
                           (!blocks && (path == Path::kGemv || path == Path::kLibrary)) ||
                           (path == Path::kSerialUnfused && w != Weights::kQ8_0);
      if (!applies) continue;
      // The alternatives to a default's small-batch product run only where they differ from it.
      const bool small_only = path == Path::kGemvInt8 || path == Path::kGemv ||
                              path == Path::kLibrary || path == Path::kSerialUnfused;
      const std::string name = std::string(WeightsName(w)) + "/" + PathName(path, w);
      for (int batch : {1, 16, 64, 256}) {
        const bool fused = batch <= pc::kQuantGemvMaxTokens;
        if ((large_only && fused) || (small_only && !fused)) continue;
        benchmark::RegisterBenchmark(
            ("BM_WeightsDecode/" + name + "/batch:" + std::to_string(batch)).c_str(),
            [w, path, batch](benchmark::State& state) {
              RunDecode(state, BackendFor(w, path), batch);
            })
            ->UseManualTime()
            ->MinTime(1.0)
            ->Unit(benchmark::kMillisecond);
      }
      // A 2048-token prefill never takes the small-batch products.
      if (small_only) continue;
      benchmark::RegisterBenchmark(("BM_WeightsPrefill/" + name + "/tokens:2048").c_str(),
                                   [w, path](benchmark::State& state) {
                                     RunPrefill(state, BackendFor(w, path), 2048, 2048);
                                   })
          ->UseManualTime()
          ->Iterations(5)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

// Split-K's other side: FP8 and Q4_K_M past the small-batch products on tensor cores that never
// split (beside BM_WeightsDecode/<w>/tensor_cores, which split wherever the tiles leave SMs
// idle), at the batches where some products' tiles do. A group of its own in bench/gpu.sh.
const bool kSplitKRegistered = [] {
  for (Weights w : {Weights::kFp8, Weights::kQ4_K_M}) {
    const std::string name =
        std::string(WeightsName(w)) + "/" + PathName(Path::kTensorCoresUnsplit, w);
    for (int batch : {16, 64, 256}) {
      benchmark::RegisterBenchmark(
          ("BM_SplitKDecode/" + name + "/batch:" + std::to_string(batch)).c_str(),
          [w, batch](benchmark::State& state) {
            RunDecode(state, BackendFor(w, Path::kTensorCoresUnsplit), batch);
          })
          ->UseManualTime()
          ->MinTime(1.0)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace pagoda::bench
