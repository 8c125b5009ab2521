// End-to-end decode steps of the CUDA backend on a Llama-3-8B-shaped model with seeded random
// BF16 weights made on the device (no 16 GB file), against the roofline
// (weight bytes + KV bytes read per step) / measured device-to-device copy bandwidth.
//
// Each iteration is one ForwardSample of `batch` decode tokens at context kContext (KV pages
// pre-filled with random values), CUDA graphs on: host planning, input copy, graph replay,
// sampling and the token copy back are all inside the timed region.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "bench/gpu/copy_bandwidth.h"
#include "worker/backend/cuda/cuda_backend.h"

namespace pagoda::bench {
namespace {

namespace pc = pagoda::worker::cuda;

constexpr int kContext = 1024;  // positions per sequence already in the KV cache
constexpr int kMaxBatch = 256;
constexpr int kPageSize = 16;

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
  c.context_length = 8192;
  c.rms_eps = 1e-5f;
  c.rope_base = 500000.0f;
  return c;
}

pc::CudaBackend& Backend() {
  static pc::CudaBackend* backend = [] {
    pc::CudaBackendOptions o;
    o.page_size = kPageSize;
    o.num_pages = kMaxBatch * ((kContext + kPageSize) / kPageSize + 1);
    o.max_batch_tokens = 512;
    o.dtype = pc::DType::kBf16;
    auto b = pc::CudaBackend::CreateRandom(Llama3_8B(), 42, o);
    if (!b.ok()) {
      std::fprintf(stderr, "CreateRandom: %s\n", std::string(b.status().message()).c_str());
      std::abort();
    }
    if (auto s = (*b)->FillKvRandom(7); !s.ok()) {
      std::fprintf(stderr, "FillKvRandom: %s\n", std::string(s.message()).c_str());
      std::abort();
    }
    return b->release();
  }();
  return *backend;
}

void BM_DecodeStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const double copy_bw = CopyBandwidth();
  pc::CudaBackend& b = Backend();
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
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = b.ForwardSample(steps, samples, &out);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  const double kv_bytes = double(batch) * (kContext + 1) * 2.0 * c.n_layers * c.kv_dim() * 2.0;
  const double roofline_s = (double(b.weight_bytes_per_step()) + kv_bytes) / copy_bw;
  state.counters["tokens_per_s"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["roofline_tokens_per_s"] = batch / roofline_s;
  state.counters["weight_GB"] = double(b.weight_bytes_per_step()) / 1e9;
  state.counters["kv_GB"] = kv_bytes / 1e9;
  state.counters["copy_GBps"] = copy_bw / 1e9;
  state.counters["graph_replays"] = b.graph_replays();
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

}  // namespace
}  // namespace pagoda::bench
