// CPU backend benchmarks for bench/cpu.sh: the machine's limits (FMA peak, read bandwidth) and,
// per weight type, batch-1 GEMV bandwidth, batch-64 GEMM throughput, paged attention of a
// decode batch, and forward-pass decode steps of the issue-16 model shape. Counters are rates (per
// second); a GEMV, GEMM or decode step also reports the limit it is divided by, as measured
// between its own iterations (limit_bytes, limit_flops: InterleavedLimit). cpu.sh turns them
// into ratios of one run.
//
//   build/bin/cpu_bench [--benchmark_filter=...]   (PAGODA_CPU_KERNELS=avx2 forces a lower set;
//   PAGODA_CPU_QUANTIZE_ACTIVATIONS=0 / 1 decodes quantized weights to float / multiplies 8-bit
//   activations, whatever the table's default)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include "bench/cpu/machine_limits.h"
#include "common/aligned_vector.h"
#include "common/fp16.h"
#include "common/gguf_reader.h"
#include "modelgen/random_model.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/backend/cpu/thread_pool.h"
#include "worker/model/llama_model.h"

namespace pagoda::bench {
namespace {

using common::GgmlType;
using worker::WeightMatrix;
namespace cpu = worker::cpu;

constexpr size_t kWorkingSetBytes = size_t{1} << 30;  // well past any cache of the VM
constexpr int kRows = 4096, kCols = 4096;

int Threads() {
  const char* env = std::getenv("PAGODA_BENCH_THREADS");
  return env != nullptr ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
}

cpu::CpuIsa Isa() {
  const char* env = std::getenv("PAGODA_CPU_KERNELS");
  return cpu::ResolveCpuIsa(env != nullptr ? env : "auto").value();
}

// The worker's default (CpuBackendOptions) unless PAGODA_CPU_QUANTIZE_ACTIVATIONS says.
bool QuantizeActivations() {
  const char* env = std::getenv("PAGODA_CPU_QUANTIZE_ACTIVATIONS");
  if (env == nullptr) return cpu::HasIntegerProducts(Isa());
  return std::strcmp(env, "0") != 0;
}

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                               GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// A matrix of random bytes whose scale fields are small halves (finite, sane values); the
// kernels' cost does not depend on the values.
WeightMatrix RandomBytesMatrix(GgmlType type, uint64_t seed, int rows = kRows) {
  WeightMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = kCols;
  m.row_bytes = worker::RowBytes(type, kCols);
  m.bytes.resize(m.row_bytes * rows);
  std::mt19937_64 rng(seed);
  if (type == GgmlType::F32 || type == GgmlType::BF16) {  // random bytes would be denormals
    for (size_t i = 0; i + 4 <= m.bytes.size(); i += 4) {
      const float v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-4f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (type == GgmlType::F32) {
        std::memcpy(m.bytes.data() + i, &bits, 4);
      } else {
        const uint16_t hi = static_cast<uint16_t>(bits >> 16);
        std::memcpy(m.bytes.data() + i, &hi, 2);
        std::memcpy(m.bytes.data() + i + 2, &hi, 2);
      }
    }
    return m;
  }
  for (size_t i = 0; i + 8 <= m.bytes.size(); i += 8) {
    const uint64_t v = rng() & 0x3f3f3f3f3f3f3f3full;  // small halves / bf16 / f32 exponents
    std::memcpy(m.bytes.data() + i, &v, 8);
  }
  const auto size = common::GgmlTypeSizeOf(type).value();
  const uint16_t scale = 0x1400;  // ~1e-3 as a half
  for (size_t b = 0; b < m.bytes.size() / size.block_bytes; ++b) {
    uint8_t* p = m.bytes.data() + b * size.block_bytes;
    if (type == GgmlType::Q6_K) {
      std::memcpy(p + 208, &scale, 2);
    } else if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16) {
      std::memcpy(p, &scale, 2);
      if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) std::memcpy(p + 2, &scale, 2);
    }
  }
  return m;
}

// The machine's limits at 1 thread and at the kernels' thread count (threads:N, where this
// used to be 1 and 2 whatever the kernels ran on). Several threads run through the backend's
// own pool and are timed by the wall clock around the whole parallel loop, as the kernels are,
// rather than Google Benchmark's ->Threads(), which averages each thread's own time.
void LimitThreadCounts(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1);
  if (Threads() > 1) b->Arg(Threads());
}

// Runs fn(index, thread) for each index in [0, n) on the pool's threads.
template <typename Fn>
void ForParts(cpu::ThreadPool& pool, int n, Fn fn) {
  pool.ParallelFor(n, [&](int begin, int end, int thread) {
    for (int i = begin; i < end; ++i) fn(i, thread);
  });
}

// ForParts on state.range(0) threads, once per iteration.
template <typename Fn>
void RunOnThreads(benchmark::State& state, int n, Fn fn) {
  cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) ForParts(pool, n, fn);
}

constexpr int kLimitParts = 256;  // parts of one iteration, shared out among the threads

// A register-only peak loop (FmaLoop, Int8DotLoop) on state.range(0) threads: the operations
// it reports per second, as `counter`.
template <typename Sink>
void PeakLoop(benchmark::State& state, double (*loop)(int64_t, Sink*), const char* counter) {
  std::vector<Sink> sinks(static_cast<size_t>(state.range(0)));
  const double per_part = loop(1 << 16, &sinks[0]);  // also a warm-up
  RunOnThreads(state, kLimitParts, [&](int, int thread) { loop(1 << 16, &sinks[thread]); });
  benchmark::DoNotOptimize(sinks.data());
  state.counters[counter] =
      benchmark::Counter(per_part * kLimitParts * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_FmaPeak(benchmark::State& state) { PeakLoop(state, FmaLoop, "flops"); }
void BM_Int8DotPeak(benchmark::State& state) { PeakLoop(state, Int8DotLoop, "ops"); }

void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n = kWorkingSetBytes / sizeof(float), part = n / kLimitParts;
  common::AlignedVector<float> data(n, 1.0f);
  std::vector<float> sinks(static_cast<size_t>(state.range(0)));
  RunOnThreads(state, kLimitParts,
               [&](int i, int thread) { sinks[thread] += ReadSum(data.data() + i * part, part); });
  benchmark::DoNotOptimize(sinks.data());
  state.counters["bytes"] =
      benchmark::Counter(static_cast<double>(state.iterations()) *
                             static_cast<double>(part * kLimitParts) * sizeof(float),
                         benchmark::Counter::kIsRate);
}

// The limit a kernel is divided by, measured between that kernel's own iterations (outside the
// timed region), so that both see the same state of the machine: this VM's read bandwidth jumps
// between about 30 and 49 GB/s from one minute to the next, and for seconds at a time one of its
// two cores is gone. After an iteration (each, or every n-th), Pass() runs one pass of the limit's
// loop on Threads() threads of a pool of its own (bandwidth: a read of `bytes` from a 1 GiB buffer,
// moving on through it; FMA: kFmaParts parts of FmaLoop), timed by the wall clock around the
// whole parallel loop. Report() sets the counter limit_bytes (bandwidth) or limit_flops (FMA)
// to the work per second over all passes.
class InterleavedLimit {
 public:
  enum Kind { kBandwidth, kFma };
  InterleavedLimit(benchmark::State& state, Kind kind, size_t bytes = 0)
      : state_(state), kind_(kind), pool_(Threads()), sinks_(static_cast<size_t>(Threads())) {
    if (kind_ == kBandwidth) {
      part_ = std::max<size_t>(64, bytes / sizeof(float) / kLimitParts / 64 * 64);
      data_.assign(kWorkingSetBytes / sizeof(float), 1.0f);
    } else {
      fma_per_part_ = FmaLoop(1 << 16, &sinks_[0]);  // also a warm-up
    }
  }
  void Report() {
    if (seconds_ > 0) {
      state_.counters[kind_ == kBandwidth ? "limit_bytes" : "limit_flops"] = work_ / seconds_;
    }
  }
  // `rewarm`, if set, runs after the pass, still outside the timed region: one untimed call of
  // the kernel, so that the next timed one finds its caches as a run of back-to-back calls does.
  void Pass(const std::function<void()>& rewarm = nullptr) {
    state_.PauseTiming();
    const auto start = std::chrono::steady_clock::now();
    if (kind_ == kBandwidth) {
      const size_t pass = part_ * kLimitParts;
      if (offset_ + pass > data_.size()) offset_ = 0;
      ForParts(pool_, kLimitParts, [&](int i, int thread) {
        sinks_[thread] += ReadSum(data_.data() + offset_ + i * part_, part_);
      });
      offset_ += pass;
      work_ += static_cast<double>(pass * sizeof(float));
    } else {
      ForParts(pool_, kFmaParts, [&](int, int thread) { FmaLoop(1 << 16, &sinks_[thread]); });
      work_ += fma_per_part_ * kFmaParts;
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sinks_.data());
    if (rewarm) rewarm();
    state_.ResumeTiming();
  }

 private:
  static constexpr int kFmaParts = 64;  // about 15 ms on 2 Zen 4 threads, one GEMM64 call
  benchmark::State& state_;
  const Kind kind_;
  cpu::ThreadPool pool_;
  std::vector<float> sinks_;
  common::AlignedVector<float> data_;
  size_t part_ = 0, offset_ = 0;
  double fma_per_part_ = 0, work_ = 0, seconds_ = 0;
};

// Batch-1 GEMV through the backend's MatMul (its pool and kernel table), cycling through
// matrices that together exceed the caches: weight bytes streamed per second, and (limit_bytes)
// the read bandwidth between its iterations.
void BM_Gemv(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const size_t one = worker::RowBytes(type, kCols) * kRows;
  const size_t count = std::max<size_t>(2, kWorkingSetBytes / one);
  std::vector<WeightMatrix> mats;
  for (size_t i = 0; i < count; ++i) mats.push_back(RandomBytesMatrix(type, i));
  cpu::LocalContext ctx(Isa(), Threads(), QuantizeActivations());
  common::AlignedVector<float> x(kCols, 0.5f), out(kRows);
  InterleavedLimit limit(state, InterleavedLimit::kBandwidth, one);
  size_t i = 0;
  double bytes = 0;
  for (auto _ : state) {
    const cpu::MatMulParams p[] = {{x.data(), &mats[i], out.data(), 1}};
    cpu::MatMul(ctx.get(), p);
    bytes += static_cast<double>(one);
    i = (i + 1) % count;
    limit.Pass();
  }
  limit.Report();
  state.SetLabel(common::GgmlTypeName(type));
  state.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
}

// Batch-1 GEMV of a matrix that stays in the caches (about 256 KiB per thread): the kernel's
// own rate, what it could stream if memory were no limit.
void BM_GemvCached(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const size_t row_bytes = worker::RowBytes(type, kCols);
  const int rows =
      static_cast<int>(std::max<size_t>(64, (size_t{256} << 10) * Threads() / row_bytes)) / 8 * 8;
  const WeightMatrix m = RandomBytesMatrix(type, 7, rows);
  cpu::LocalContext ctx(Isa(), Threads(), QuantizeActivations());
  common::AlignedVector<float> x(kCols, 0.5f), out(rows);
  double bytes = 0;
  for (auto _ : state) {
    const cpu::MatMulParams p[] = {{x.data(), &m, out.data(), 1}};
    cpu::MatMul(ctx.get(), p);
    bytes += static_cast<double>(m.bytes.size());
  }
  state.SetLabel(common::GgmlTypeName(type));
  state.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
}

// Batch-64 GEMM: one matrix, 64 tokens; flops per second, and (limit_flops) the FMA peak
// between its iterations.
void BM_Gemm64(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  constexpr int kTokens = 64;
  const WeightMatrix m = RandomBytesMatrix(type, 99);
  cpu::LocalContext ctx(Isa(), Threads(), QuantizeActivations());
  common::AlignedVector<float> x(static_cast<size_t>(kTokens) * kCols, 0.5f), out(kTokens * kRows);
  InterleavedLimit limit(state, InterleavedLimit::kFma);
  double flops = 0;
  for (auto _ : state) {
    const cpu::MatMulParams p[] = {{x.data(), &m, out.data(), kTokens}};
    cpu::MatMul(ctx.get(), p);
    flops += 2.0 * kTokens * kRows * kCols;
    limit.Pass();
  }
  limit.Report();
  state.SetLabel(common::GgmlTypeName(type));
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}

// Paged attention of a decode batch of the issue model's shape (16 tokens, 12 heads over 4 KV
// heads of 64) at a context of state.range(0) positions, each sequence in its own pages of 16:
// flops per second (a position costs a query-key and a weight-value product per head).
void BM_Attention(benchmark::State& state) {
  constexpr int kTokens = 16, kHeads = 12, kKvHeads = 4, kHd = 64, kPageSize = 16;
  const int context = static_cast<int>(state.range(0));
  const int pages_per_seq = (context + kPageSize - 1) / kPageSize;
  const size_t slots = static_cast<size_t>(kTokens) * pages_per_seq * kPageSize;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const auto random = [&](size_t n) {
    common::AlignedVector<float> v(n);
    for (float& f : v) f = normal(rng);
    return v;
  };
  const auto q = random(static_cast<size_t>(kTokens) * kHeads * kHd);
  // The cache's F16 values (kv_arena.h).
  const auto halves = [&](size_t n) {
    common::AlignedVector<uint16_t> h(n);
    for (uint16_t& x : h) x = common::FloatToF16(normal(rng));
    return h;
  };
  const auto k = halves(slots * kKvHeads * kHd), v = halves(slots * kKvHeads * kHd);
  common::AlignedVector<float> out(q.size());
  std::vector<int32_t> page_ids(static_cast<size_t>(kTokens) * pages_per_seq);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::vector<const int32_t*> tables(kTokens);
  for (int t = 0; t < kTokens; ++t) tables[t] = page_ids.data() + t * pages_per_seq;
  const std::vector<int32_t> positions(kTokens, context - 1);
  cpu::LocalContext ctx(Isa(), Threads(), QuantizeActivations());
  double flops = 0;
  for (auto _ : state) {
    cpu::PagedAttention(ctx.get(), {q.data(), k.data(), v.data(), positions.data(), tables.data(),
                                    out.data(), kTokens, kHeads, kKvHeads, kHd, kPageSize, 0.125f});
    flops += 4.0 * kTokens * kHeads * kHd * context;
  }
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}

// The issue-16 model shape (dim 768, 12 layers, 12 heads, 4 KV heads, ffn 2048), in memory.
std::shared_ptr<const worker::LlamaModel> IssueModel(GgmlType type, bool k_m_mix) {
  modelgen::RandomModelOptions o;
  o.n_layers = 12;
  o.dim = 768;
  o.n_heads = 12;
  o.n_kv_heads = 4;
  o.ffn_dim = 2048;
  o.vocab_size = 2048;
  o.context_length = 2048;
  o.dtype = type;
  o.k_m_mix = k_m_mix;
  auto writer = modelgen::BuildRandomModel(o).value();
  auto file = common::GgufFile::FromBytes(writer.Serialize()).value();
  return worker::LlamaModel::Load(*file).value();
}

// One decode step of `batch` sequences at context 64 (each step rewrites the same position):
// output tokens per second of the forward pass alone, and (limit_bytes) the read bandwidth
// between its steps.
void BM_DecodeStep(benchmark::State& state) {
  const int type_index = static_cast<int>(state.range(0)), batch = static_cast<int>(state.range(1));
  static const std::pair<GgmlType, bool> kModels[] = {
      {GgmlType::F16, false}, {GgmlType::Q8_0, false}, {GgmlType::Q4_K, true}};
  const auto [type, mix] = kModels[type_index];
  auto model = IssueModel(type, mix);
  worker::CpuBackendOptions options;
  options.page_size = 16;
  options.num_pages = batch * 5;
  options.num_threads = Threads();
  options.kernels = cpu::CpuIsaName(Isa());
  options.quantize_activations = QuantizeActivations();
  auto backend = worker::CpuBackend::Create(model, options).value();
  std::vector<std::vector<int32_t>> pages(batch);
  std::vector<int32_t> prompt(64);
  std::iota(prompt.begin(), prompt.end(), 3);
  std::vector<float> logits;
  for (int s = 0; s < batch; ++s) {
    pages[s] = {5 * s, 5 * s + 1, 5 * s + 2, 5 * s + 3, 5 * s + 4};
    worker::SeqInput in{prompt, 0, pages[s], false};
    (void)backend->Forward({&in, 1}, &logits);
  }
  std::vector<int32_t> token(1, 7);
  std::vector<worker::SeqInput> step;
  for (int s = 0; s < batch; ++s) step.push_back({token, 64, pages[s], true});
  // The bandwidth is read after every kStepsPerPass steps, each pass followed by an untimed
  // step: a pass flushes the caches of everything a step keeps warm (activations, KV pages,
  // norms, part of the weights) and lets the pool's threads fall asleep (Q4_K_M batch-1 steps
  // measured 2.7 ms with a pass before every one, against 1.7 back to back).
  constexpr int kStepsPerPass = 8;
  InterleavedLimit limit(state, InterleavedLimit::kBandwidth, model->weight_bytes());
  int64_t steps = 0;
  for (auto _ : state) {
    (void)backend->Forward(step, &logits);
    if (++steps % kStepsPerPass == 0) limit.Pass([&] { (void)backend->Forward(step, &logits); });
  }
  limit.Report();
  state.SetLabel(common::GgmlTypeName(type) + (mix ? "_M" : ""));
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(batch) * state.iterations(),
                                                benchmark::Counter::kIsRate);
  state.counters["weight_bytes"] = static_cast<double>(model->weight_bytes());
}

BENCHMARK(BM_FmaPeak)->Apply(LimitThreadCounts)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_Int8DotPeak)->Apply(LimitThreadCounts)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_ReadBandwidth)->Apply(LimitThreadCounts)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_Gemv)->DenseRange(0, 7)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_GemvCached)->DenseRange(0, 7)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_Gemm64)->DenseRange(0, 7)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_Attention)->Arg(64)->Arg(512)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{0, 1, 2}, {1, 16, 64}})
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pagoda::bench

BENCHMARK_MAIN();
