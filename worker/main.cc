// pagoda-worker: holds the weights and the KV arena, executes the scheduler's plans.
//
//   pagoda-worker --scheduler HOST:PORT --model PATH --backend cpu|cuda|synthetic [--kv-pages N]
//                 [--page-size N] [--max-batch-tokens N] [--threads N] [--log-level info]
//                 [--dtype auto|bf16|fp16|fp8] [--gpu-memory-fraction F] [--device N]
//                 [--health-listen HOST:PORT] [--metrics-listen HOST:PORT]
//                 [--tls-ca PEM [--tls-cert PEM --tls-key PEM]] [--synthetic-step-ms MS]
//                 [--swap-space-mib N]
//
// --backend synthetic computes no model (it reads only the model file's metadata, for the
// fingerprint and the vocabulary size): it answers each plan after --synthetic-step-ms with
// deterministic tokens, to measure and test the scheduler; see synthetic_backend.h.
// --swap-space-mib gives the worker host memory for the KV pages of sequences the scheduler
// preempts by swap: floor(N MiB / KV bytes of one page) slots, reported at registration with
// the measured time to copy a page out and back in.
// SIGTERM or SIGINT stops it promptly: the scheduler re-queues what it was running.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/gguf_reader.h"
#include "common/log.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "common/startup.h"
#include "common/status_macros.h"
#include "worker/backend/factory.h"
#include "worker/backend/synthetic/synthetic_backend.h"
#include "worker/model/llama_model.h"
#include "worker/runner/health.h"
#include "worker/runner/link_client.h"
#include "worker/runner/metrics.h"

ABSL_FLAG(std::string, scheduler, "127.0.0.1:50051", "scheduler address to attach to");
ABSL_FLAG(std::string, model, "", "GGUF model file (the same file as the scheduler's)");
ABSL_FLAG(std::string, backend, "cpu",
          "compute backend: cpu, cuda, or synthetic (NOT a model: no weights are loaded and "
          "the tokens are a hash of the sequence, after --synthetic-step-ms per plan; for "
          "measuring and testing the scheduler only)");
ABSL_FLAG(double, synthetic_step_ms, 5,
          "synthetic: milliseconds each plan takes (a GPU step's time), whatever its size");
ABSL_FLAG(int32_t, kv_pages, 0,
          "KV pages in the arena; 0 = fill --kv-cache-mib (cpu) or --gpu-memory-fraction (cuda)");
ABSL_FLAG(int32_t, kv_cache_mib, 256, "cpu: KV arena size in MiB when --kv-pages is 0");
ABSL_FLAG(int32_t, swap_space_mib, 0,
          "host memory in MiB for the KV pages of sequences preempted by swap (whole pages: "
          "K and V of every layer); 0 = none: the scheduler recomputes preempted sequences");
ABSL_FLAG(std::string, dtype, "auto",
          "cuda: auto (BF16 activations, KV and float weights; quantized GGUF weights stay in "
          "their blocks on the GPU), bf16 or fp16 (every weight converted to that type), or fp8 "
          "(as auto, with the layers' float weights in FP8 E4M3; compute capability 8.9+)");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "cuda: share of the GPU's memory to use; the KV arena gets what is left after the "
          "weights and the workspace (when --kv-pages is 0)");
ABSL_FLAG(int32_t, device, 0, "cuda: GPU index");
ABSL_FLAG(bool, cuda_graphs, true, "cuda: replay CUDA graphs for decode-only iterations");
ABSL_FLAG(bool, programmatic_launch, true,
          "cuda: launch the per-layer kernels of our own (norms, RoPE, attention, SiLU, GEMVs) as "
          "programmatic dependent launches, each overlapping the tail of the kernel before it");
ABSL_FLAG(std::string, prefill_attention, "auto",
          "cuda: prefill attention's tensor-core kernel (head dims 64 and 128): auto (on "
          "compute capability 9.0 whichever of wgmma and mma_sync times faster at start, "
          "mma_sync elsewhere), mma_sync, or wgmma (9.0 only)");
ABSL_FLAG(std::string, gemv_max_tokens, "auto",
          "cuda: steps of up to N tokens multiply BF16/FP16 and FP8 weights with Pagoda's GEMV "
          "instead of cuBLAS/cuBLASLt: auto (each format's N timed at start on the model's own "
          "matrices: the largest of 1, 2, 4, 8 up to which the GEMV is faster) or 0 to 8");
ABSL_FLAG(int32_t, page_size, 16, "tokens per KV page");
ABSL_FLAG(int32_t, max_batch_tokens, 0,
          "most input tokens per plan; 0 = by the hardware: 8192 on a GPU of compute capability "
          "9.0 or later with 70 GiB or more (--backend cuda), else 2048");
ABSL_FLAG(int32_t, threads, 0, "CPU threads for the forward pass; 0 = all cores");
ABSL_FLAG(
    std::string, cpu_kernels, "",
    "cpu: kernel instruction set: auto, portable, avx2, avx512, avx512vnni or avx512amx (empty = "
    "$PAGODA_CPU_KERNELS, else auto); a set the CPU lacks is refused");
ABSL_FLAG(std::optional<bool>, cpu_quantize_activations, std::nullopt,
          "cpu: true: multiply quantized weights with activations quantized to 8 bits, as "
          "llama.cpp does; false: decode the weights to float32 (float activations); unset: 8-bit "
          "on the kernel sets with integer dot products (avx512vnni, avx512amx), float on the "
          "others, where it is faster");
ABSL_FLAG(std::string, name, "", "worker name in the scheduler's logs (default host:pid)");
// --log-level, --tls-cert, --tls-key, --tls-ca and --link-token-file: common/startup.h.
ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT to serve grpc.health.v1 on (\"\" = attached, \"liveness\" = alive); "
          "empty = off");
ABSL_FLAG(std::string, health_port_file, "",
          "after binding, write the health port here (for --health-listen HOST:0)");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics); empty = off");
ABSL_FLAG(std::string, metrics_port_file, "",
          "after binding, write the metrics port here (for --metrics-listen HOST:0)");

namespace {

// Input tokens per plan when neither the flag nor the backend sets them (the CPU backends).
constexpr int32_t kDefaultMaxBatchTokens = 2048;

int Fail(const std::string& message) {
  std::fprintf(stderr, "pagoda-worker: %s\n", message.c_str());
  return 1;
}

std::string DefaultName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("%s:%d", host, getpid());
}

// Serves health and metrics when their flags ask for it, and writes their port files. Runs
// before the model loads: "liveness" answers while the weights load, readiness waits for the
// link.
absl::Status StartEndpoints(pagoda::worker::HealthServer& health,
                            pagoda::worker::WorkerMetrics& metrics) {
  struct Endpoint {
    std::string listen, port_file, name;
    std::function<absl::StatusOr<int>(const std::string&)> serve;
  };
  const Endpoint endpoints[] = {
      {absl::GetFlag(FLAGS_health_listen), absl::GetFlag(FLAGS_health_port_file), "health",
       [&](const std::string& a) { return health.Start(a); }},
      {absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_metrics_port_file), "metrics",
       [&](const std::string& a) { return metrics.Serve(a); }},
  };
  for (const Endpoint& e : endpoints) {
    if (e.listen.empty()) {
      if (!e.port_file.empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--%s-port-file needs --%s-listen", e.name, e.name));
      }
      continue;
    }
    absl::StatusOr<int> port = e.serve(e.listen);
    if (!port.ok()) return port.status();
    PAGODA_LOG(kInfo, "worker", "%s on %s (port %d)", e.name, e.listen, *port);
    if (!e.port_file.empty() && !pagoda::common::WritePortFile(e.port_file, *port)) {
      return absl::UnavailableError(
          absl::StrFormat("cannot write --%s-port-file %s", e.name, e.port_file));
    }
  }
  return absl::OkStatus();
}

// A backend with what the link registers: the model file's fingerprint and its config.
struct LoadedBackend {
  std::unique_ptr<pagoda::worker::Backend> backend;
  std::string fingerprint;
  pagoda::common::ModelConfig config;
  size_t page_bytes = 0;  // KV bytes of one page (K and V, every layer): sizes the swap space
};

// The synthetic backend reads the file's metadata only: no weights are loaded or used.
absl::StatusOr<LoadedBackend> LoadSynthetic(const std::string& path,
                                            const pagoda::worker::BackendOptions& o) {
  namespace pw = pagoda::worker;
  absl::StatusOr<std::unique_ptr<pagoda::common::GgufFile>> file =
      pagoda::common::GgufFile::Open(path);
  if (!file.ok())
    return absl::Status(file.status().code(), path + ": " + std::string(file.status().message()));
  absl::StatusOr<pagoda::common::ModelConfig> config = pagoda::common::ReadModelConfig(**file);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        path + ": " + std::string(config.status().message()));
  }
  pw::SyntheticBackendOptions synthetic;
  synthetic.page_size = o.page_size;
  // Pages as a 2-byte KV type would give a GPU (the synthetic arena holds one int per slot).
  synthetic.num_pages =
      o.num_pages > 0 ? o.num_pages
                      : pw::PagesForBytes(*config, o.page_size, 2, int64_t{o.kv_cache_mib} << 20);
  synthetic.step = absl::Milliseconds(absl::GetFlag(FLAGS_synthetic_step_ms));
  auto backend = pw::SyntheticBackend::Create(*config, synthetic);
  if (!backend.ok()) return backend.status();
  PAGODA_LOG(kWarning, "worker",
             "synthetic backend: NO MODEL is computed; every plan takes %.3f ms and its tokens "
             "are a hash of each sequence (for measuring and testing the scheduler only)",
             absl::GetFlag(FLAGS_synthetic_step_ms));
  // The swap space too is sized in a 2-byte-KV GPU's pages.
  const size_t page_bytes = static_cast<size_t>(pw::KvPageBytes(*config, o.page_size, 2));
  return LoadedBackend{*std::move(backend), (*file)->Fingerprint(), *config, page_bytes};
}

absl::StatusOr<LoadedBackend> LoadBackend(const std::string& path,
                                          const pagoda::worker::BackendOptions& options) {
  if (options.backend == "synthetic") return LoadSynthetic(path, options);
  auto model = pagoda::worker::LlamaModel::Load(path);  // its errors name the path
  if (!model.ok()) return model.status();
  auto backend = pagoda::worker::CreateBackend(*model, options);
  if (!backend.ok()) return backend.status();
  const size_t page_bytes = (*backend)->kv_bytes() / static_cast<size_t>((*backend)->num_pages());
  return LoadedBackend{*std::move(backend), (*model)->fingerprint(), (*model)->config(),
                       page_bytes};
}

// Creates the swap space --swap-space-mib asks for (none for 0).
absl::Status SetUpSwapSpace(pagoda::worker::Backend& backend, size_t page_bytes) {
  const int64_t mib = absl::GetFlag(FLAGS_swap_space_mib);
  RETURN_IF_ERROR(pagoda::worker::CreateSwapSpace(backend, mib, page_bytes));
  if (mib > 0) {
    PAGODA_LOG(kInfo, "worker", "swap space: %d pages of %.3g MiB in %d MiB of host memory",
               backend.num_swap_pages(), static_cast<double>(page_bytes) / (1 << 20), mib);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace pw = pagoda::worker;
  if (absl::Status s = pagoda::common::StartProcess(
          argc, argv,
          "pagoda-worker --scheduler HOST:PORT --model PATH --backend cpu|cuda|synthetic "
          "[--kv-pages N]");
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) return Fail("--model PATH is required");
  const int32_t page_size = absl::GetFlag(FLAGS_page_size);
  const int32_t max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  // Read before the model loads, so that a wrong path fails at once.
  absl::StatusOr<pagoda::common::TlsConfig> tls =
      pagoda::common::LoadTlsFromFlags(pagoda::common::TlsSide::kClient);
  if (!tls.ok()) return Fail(std::string(tls.status().message()));
  if (page_size <= 0 || max_batch_tokens < 0 || absl::GetFlag(FLAGS_kv_pages) < 0 ||
      absl::GetFlag(FLAGS_kv_cache_mib) <= 0 || absl::GetFlag(FLAGS_swap_space_mib) < 0) {
    return Fail(
        "--page-size and --kv-cache-mib must be positive, --max-batch-tokens, --kv-pages and "
        "--swap-space-mib >= 0");
  }

  pw::HealthServer health;
  pw::WorkerMetrics metrics;
  // Installed before any gRPC call, and declared before everything that makes one.
  pw::AttachWatcher attach_watcher([&](bool attached) {
    health.SetReady(attached);
    metrics.SetAttached(attached);
  });
  attach_watcher.Install();
  if (absl::Status s = StartEndpoints(health, metrics); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  pw::BackendOptions backend_options;
  backend_options.backend = absl::GetFlag(FLAGS_backend);
  backend_options.page_size = page_size;
  backend_options.num_pages = absl::GetFlag(FLAGS_kv_pages);
  backend_options.kv_cache_mib = absl::GetFlag(FLAGS_kv_cache_mib);
  backend_options.max_batch_tokens = max_batch_tokens;
  backend_options.threads = absl::GetFlag(FLAGS_threads);
  backend_options.cpu_kernels = absl::GetFlag(FLAGS_cpu_kernels);
  if (backend_options.cpu_kernels.empty()) {
    const char* env = std::getenv("PAGODA_CPU_KERNELS");
    backend_options.cpu_kernels = env != nullptr ? env : "auto";
  }
  backend_options.cpu_quantize_activations = absl::GetFlag(FLAGS_cpu_quantize_activations);
  backend_options.dtype = absl::GetFlag(FLAGS_dtype);
  backend_options.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  backend_options.device = absl::GetFlag(FLAGS_device);
  backend_options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  backend_options.programmatic_launch = absl::GetFlag(FLAGS_programmatic_launch);
  backend_options.prefill_attention = absl::GetFlag(FLAGS_prefill_attention);
  backend_options.gemv_max_tokens = absl::GetFlag(FLAGS_gemv_max_tokens);
  absl::StatusOr<LoadedBackend> loaded = LoadBackend(model_path, backend_options);
  if (!loaded.ok()) {
    return Fail(std::string(loaded.status().message()));
  }
  std::unique_ptr<pw::Backend> backend = std::move(loaded->backend);
  PAGODA_LOG(kInfo, "worker",
             "loaded %s: %d layers, dim %d; %s backend, KV arena %d pages of %d tokens", model_path,
             loaded->config.n_layers, loaded->config.dim, backend->name(), backend->num_pages(),
             page_size);
  metrics.SetKvArenaBytes(static_cast<int64_t>(backend->kv_bytes()));
  if (const size_t device = backend->device_bytes(); device > 0) {
    metrics.SetDeviceMemoryUsedBytes(static_cast<int64_t>(device));
  }

  if (absl::Status s = SetUpSwapSpace(*backend, loaded->page_bytes); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  pw::Runner runner(std::move(backend));
  if (absl::Status s = runner.MeasureSwap(); !s.ok()) {
    return Fail("measuring the swap space: " + std::string(s.message()));
  }
  if (runner.backend().num_swap_pages() > 0) {
    PAGODA_LOG(kInfo, "worker", "copying one page out to the swap space and back takes %.3g ms",
               runner.swap_seconds_per_page() * 1e3);
  }
  runner.SetStepObserver([&](const pw::StepTiming& t) { metrics.ObserveStep(t); });
  pw::LinkClientOptions link;
  link.scheduler_address = absl::GetFlag(FLAGS_scheduler);
  link.worker_name = absl::GetFlag(FLAGS_name).empty() ? DefaultName() : absl::GetFlag(FLAGS_name);
  link.model_fingerprint = loaded->fingerprint;
  link.backend_name = runner.backend().name();
  // A backend that sized memory for a token count (CUDA) registers that count.
  const int backend_tokens = runner.backend().max_batch_tokens();
  link.max_batch_tokens = backend_tokens > 0     ? backend_tokens
                          : max_batch_tokens > 0 ? max_batch_tokens
                                                 : kDefaultMaxBatchTokens;
  const int chunk = runner.backend().preferred_prefill_chunk();
  PAGODA_LOG(kInfo, "worker", "plans of up to %d input tokens; prefill chunks of %s",
             link.max_batch_tokens,
             chunk > 0 ? absl::StrFormat("%d tokens", chunk) : std::string("the scheduler's size"));
  absl::StatusOr<std::string> token = pagoda::common::LoadLinkTokenFromFlags();
  if (!token.ok()) return Fail(std::string(token.status().message()));
  link.link_token = *std::move(token);
  link.credentials = pagoda::common::MakeChannelCredentials(*tls);
  PAGODA_LOG(kInfo, "worker", "attaching to %s over %s", link.scheduler_address,
             pagoda::common::DescribeTls(*tls, pagoda::common::TlsSide::kClient));
  pw::LinkClient client(link, &runner);

  absl::Status result;
  std::thread serving([&] {
    result = client.Run();
    pagoda::common::WakeSignalWaiter();
  });
  const int sig = pagoda::common::WaitForTerminationSignal();
  if (sig != SIGUSR1) PAGODA_LOG(kInfo, "worker", "signal %d: shutting down", sig);
  health.Shutdown();  // readiness goes first, so that no probe sees a half-stopped worker
  client.Stop();
  serving.join();
  if (!result.ok()) return Fail(std::string(result.message()));
  PAGODA_LOG(kInfo, "worker", "stopped");
  return 0;
}
