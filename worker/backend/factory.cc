#include "worker/backend/factory.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "worker/backend/cpu/cpu_backend.h"
#ifdef PAGODA_HAVE_CUDA
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/quant/quant_kernels.h"
#endif

namespace pagoda::worker {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpu(std::shared_ptr<const LlamaModel> model,
                                                   const BackendOptions& o) {
  CpuBackendOptions cpu;
  cpu.page_size = o.page_size;
  cpu.num_pages = o.num_pages;
  if (cpu.num_pages == 0 && o.page_size > 0) {
    cpu.num_pages = PagesForBytes(model->config(), o.page_size, cpu::KvArena::kValueBytes,
                                  int64_t{o.kv_cache_mib} << 20);
  }
  cpu.num_threads = o.threads;
  cpu.kernels = o.cpu_kernels;
  cpu.quantize_activations = o.cpu_quantize_activations;
  auto backend = CpuBackend::Create(std::move(model), cpu);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(*std::move(backend));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCuda(std::shared_ptr<const LlamaModel> model,
                                                    const BackendOptions& o) {
#ifdef PAGODA_HAVE_CUDA
  cuda::CudaBackendOptions cuda;
  // auto: BF16 for float tensors, activations and KV; quantized tensors keep their blocks.
  // fp8: the same, with the layers' float matrices in FP8 E4M3.
  const bool automatic = o.dtype == "auto" || o.dtype == "fp8";
  const std::optional<cuda::DType> dtype =
      automatic ? cuda::DType::kBf16 : cuda::ParseDType(o.dtype);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--dtype \"%s\" is not supported; use auto, bf16, fp16 or fp8", o.dtype));
  }
  cuda.dtype = *dtype;
  cuda.keep_quantized = automatic;
  cuda.fp8_weights = o.dtype == "fp8";
  cuda.page_size = o.page_size;
  cuda.num_pages = o.num_pages;
  cuda.max_batch_tokens = o.max_batch_tokens;
  cuda.gpu_memory_fraction = o.gpu_memory_fraction;
  cuda.device = o.device;
  cuda.cuda_graphs = o.cuda_graphs;
  cuda.programmatic_launch = o.programmatic_launch;
  if (o.prefill_attention == "auto") {
    cuda.prefill_kernel = cuda::PrefillKernel::kAuto;
  } else if (o.prefill_attention == "mma_sync") {
    cuda.prefill_kernel = cuda::PrefillKernel::kMmaSync;
  } else if (o.prefill_attention == "wgmma") {
    cuda.prefill_kernel = cuda::PrefillKernel::kWgmma;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--prefill-attention \"%s\" is not supported; use auto, mma_sync or wgmma",
                        o.prefill_attention));
  }
  // auto on a GPU with both tensor-core kernels: whichever times faster at start.
  cuda.time_prefill_kernel = cuda.prefill_kernel == cuda::PrefillKernel::kAuto;
  if (o.gemv_max_tokens == "auto") {
    cuda.dense_gemv_max_tokens = cuda.fp8_gemv_max_tokens = cuda::kGemvAuto;
  } else if (int tokens = 0; absl::SimpleAtoi(o.gemv_max_tokens, &tokens) && tokens >= 0 &&
                             tokens <= cuda::kQuantGemvMaxTokens) {
    cuda.dense_gemv_max_tokens = cuda.fp8_gemv_max_tokens = tokens;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--gemv-max-tokens \"%s\" is not supported; use auto or 0 to %d",
                        o.gemv_max_tokens, cuda::kQuantGemvMaxTokens));
  }
  // Kept blocks past the fused product: tensor cores or decoded ahead of cuBLAS, whichever the
  // start-up timing finds faster from which step size; FP8 past its GEMV likewise, our tensor
  // cores or cuBLASLt.
  cuda.quant_cublas_min_tokens = cuda::kGemvAuto;
  cuda.fp8_cublaslt_min_tokens = cuda::kGemvAuto;
  // And split-K on those tensor cores, for the step sizes where it is faster.
  cuda.split_k_max_tokens = cuda::kGemvAuto;
  auto backend = cuda::CudaBackend::Create(std::move(model), cuda);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(*std::move(backend));
#else
  return absl::FailedPreconditionError(
      "this pagoda-worker was built without CUDA (nvcc was not found at configure time)");
#endif
}

}  // namespace

int64_t KvPageBytes(const common::ModelConfig& c, int page_size, size_t element_bytes) {
  return int64_t{2} * c.n_layers * page_size * c.n_kv_heads * c.head_dim *
         static_cast<int64_t>(element_bytes);
}

int PagesForBytes(const common::ModelConfig& c, int page_size, size_t element_bytes,
                  int64_t bytes) {
  const int64_t page_bytes = KvPageBytes(c, page_size, element_bytes);
  if (page_bytes <= 0 || bytes <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(bytes / page_bytes, int64_t{1} << 20));
}

absl::Status CreateSwapSpace(Backend& backend, int64_t mib, size_t page_bytes) {
  if (mib == 0) return absl::OkStatus();
  if (page_bytes == 0) return absl::InvalidArgumentError("a KV page of 0 bytes cannot be swapped");
  if (mib < 0 || mib > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--swap-space-mib %d must be in [0, 2^40]", mib));
  }
  const int64_t slots =
      std::min<int64_t>((mib << 20) / static_cast<int64_t>(page_bytes), int64_t{1} << 20);
  if (slots == 0) {
    const double page_mib = static_cast<double>(page_bytes) / (1 << 20);
    return absl::InvalidArgumentError(absl::StrFormat(
        "--swap-space-mib %d holds no KV page: one page (K and V of every layer) takes %.3f MiB; "
        "give at least %d, or 0 for no swap space",
        mib, page_mib, static_cast<int64_t>(std::ceil(page_mib))));
  }
  return backend.InitSwapSpace(slots);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::shared_ptr<const LlamaModel> model,
                                                       const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateBackend needs a model");
  if (options.backend == "cpu") return CreateCpu(std::move(model), options);
  if (options.backend == "cuda") return CreateCuda(std::move(model), options);
  return absl::InvalidArgumentError(
      absl::StrFormat("unsupported --backend \"%s\"; supported: cpu, cuda (and synthetic, "
                      "which pagoda-worker builds from the file's metadata alone)",
                      options.backend));
}

}  // namespace pagoda::worker
