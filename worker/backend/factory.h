// Builds the compute backend the worker's flags name.
//
// Contract: "cpu" always exists; "cuda" exists where the CUDA backend was built (PAGODA_HAVE_CUDA)
// and fails with FailedPrecondition, naming the reason, where there is no usable device.
// Options that do not apply to the chosen backend are ignored.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {

struct BackendOptions {
  std::string backend = "cpu";  // "cpu" or "cuda"
  int page_size = 16;
  int num_pages = 0;         // 0: sized from kv_cache_mib (cpu) or gpu_memory_fraction (cuda)
  int max_batch_tokens = 0;  // most input tokens in one Forward; 0: the backend's default
  // cpu
  int kv_cache_mib = 256;
  int threads = 0;                   // 0 = all cores
  std::string cpu_kernels = "auto";  // auto, portable, avx2, avx512, avx512vnni, avx512amx
  std::optional<bool> cpu_quantize_activations;  // unset: per kernel set (CpuBackendOptions)
  // cuda
  // "auto" (BF16, quantized matrices kept in their blocks), "bf16" or "fp16" (every matrix
  // converted), "fp8" (auto with the layers' float matrices in FP8 E4M3)
  std::string dtype = "auto";
  double gpu_memory_fraction = 0.9;
  int device = 0;
  bool cuda_graphs = true;
  bool programmatic_launch = true;
  std::string prefill_attention = "auto";  // auto, mma_sync or wgmma
  // Steps of up to N tokens multiply BF16/FP16 and FP8 matrices with our GEMV instead of
  // cuBLAS/cuBLASLt: "auto" (timed at start, per format) or N in 0..8.
  std::string gemv_max_tokens = "auto";
};

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::shared_ptr<const LlamaModel> model,
                                                       const BackendOptions& options);

// Bytes of one KV page of `page_size` tokens for `config` (K and V, every layer) at
// `element_bytes` per value.
int64_t KvPageBytes(const common::ModelConfig& config, int page_size, size_t element_bytes);

// Pages of `page_size` tokens that fit in `bytes` for `config` (K and V, every layer), at
// `element_bytes` per value, capped at 2^20.
int PagesForBytes(const common::ModelConfig& config, int page_size, size_t element_bytes,
                  int64_t bytes);

// Creates `backend`'s host swap space for --swap-space-mib `mib`: floor(mib MiB / page_bytes)
// slots, capped at 2^20, where page_bytes is the KV bytes of one page (K and V, every layer).
// 0 MiB: no swap space (OK, nothing done). InvalidArgument for a negative size or one that
// holds no page; the backend's error when it cannot have one.
absl::Status CreateSwapSpace(Backend& backend, int64_t mib, size_t page_bytes);

}  // namespace pagoda::worker
