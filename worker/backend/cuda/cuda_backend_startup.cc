// CudaBackend's start-up checks and timed choices, run once by Init after the workspace and
// the arena exist: every projection prepared and the FP8 paths run once, programmatic launches
// tried, and the small-batch products, the kept blocks' products and the prefill attention
// kernel each timed on the device against their alternative.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/quant/quant_kernels.h"

namespace pagoda::worker::cuda {

absl::Status CudaBackend::CheckFp8Products() {
  // Every projection prepared (FP8 shapes planned for every slice size, block kernels set up),
  // so that a graph capture, which records the first step of each decode shape, does neither.
  for (int i = 0; i < config().n_layers; ++i) {
    const DeviceLayer& layer = weights_.layer(i);
    for (const Projection* p : {&layer.wqkv, &layer.wo, &layer.w_gate_up, &layer.w_down}) {
      RETURN_IF_ERROR(products_->Prepare(*p));
    }
  }
  RETURN_IF_ERROR(products_->Prepare(weights_.output()));
  if (weights_.fp8_max_rows() == 0) return absl::OkStatus();
  // Each FP8 projection of the first layer run for one token (our GEMV, where it is on), for one
  // more than the GEMV takes, and for the first size cuBLASLt takes when our tensor-core product
  // takes that one: every product a step may use runs once, so a GPU or cuBLASLt without a
  // kernel for these shapes fails here, at start, not in the first request. (Until
  // PickFp8Products, an auto threshold is 1: cuBLASLt past the GEMV.)
  const DeviceLayer& l = weights_.layer(0);
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(xn_.get(), 0, xn_.bytes(), stream_), "FP8 check"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(h_.get(), 0, h_.bytes(), stream_), "FP8 check"));
  const int past_gemv = UntilTimed(options_.fp8_gemv_max_tokens) + 1;
  std::vector<int> sizes = {1};
  if (past_gemv > 1) sizes.push_back(past_gemv);
  // A threshold above past_gemv needs a run of its own; one up to it is past_gemv's run (0:
  // cuBLASLt never runs).
  if (options_.fp8_cublaslt_min_tokens > past_gemv) {
    sizes.push_back(options_.fp8_cublaslt_min_tokens);
  }
  for (const int n : sizes) {
    if (n > limits_.max_tokens) continue;
    RETURN_IF_ERROR(products_->Run(xn_.get(), l.wqkv, qkv_.get<float>(), n, false));
    RETURN_IF_ERROR(products_->Run(xn_.get(), l.wo, x_.get<float>(), n, false));
    RETURN_IF_ERROR(products_->Run(xn_.get(), l.w_gate_up, gate_up_.get<float>(), n, false));
    RETURN_IF_ERROR(products_->Run(h_.get(), l.w_down, x_.get<float>(), n, false));
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "FP8 check");
}

absl::Status CudaBackend::PickGemvTokens() {
  const bool dense_auto = options_.dense_gemv_max_tokens == kGemvAuto;
  const bool fp8_auto = options_.fp8_gemv_max_tokens == kGemvAuto;
  if (!dense_auto && !fp8_auto) return absl::OkStatus();
  int dense = UntilTimed(options_.dense_gemv_max_tokens);
  int fp8 = UntilTimed(options_.fp8_gemv_max_tokens);
  const DeviceLayer& l = weights_.layer(0);
  const Projection& head = weights_.output();
  auto has = [](const Projection& p, WeightFormat format) {
    for (int i = 0; i < p.num_parts; ++i) {
      if (p.parts[static_cast<size_t>(i)].format == format) return true;
    }
    return false;
  };
  auto layer_has = [&](WeightFormat format) {
    return has(l.wqkv, format) || has(l.wo, format) || has(l.w_gate_up, format) ||
           has(l.w_down, format);
  };
  // Sizes in doubling steps, each format's GEMV against its library (TimeOursUpTo).
  std::vector<int> sizes;
  for (int n = 1; n <= kQuantGemvMaxTokens && n <= limits_.max_logit_rows; n *= 2) {
    sizes.push_back(n);
  }
  auto pick = [&](WeightFormat format, int& threshold, std::string& trace) -> absl::Status {
    ASSIGN_OR_RETURN(threshold, TimeOursUpTo(
                                    sizes, [format](WeightFormat f) { return f == format; },
                                    [&](int n) {
                                      threshold = n;
                                      return products_->SetGemvTokens(dense, fp8);
                                    },
                                    &trace));
    return absl::OkStatus();
  };
  auto model_has = [&](WeightFormat format) { return layer_has(format) || has(head, format); };
  std::string dense_trace, fp8_trace;
  if (dense_auto && model_has(WeightFormat::kDense)) {
    RETURN_IF_ERROR(pick(WeightFormat::kDense, dense, dense_trace));
  }
  if (fp8_auto && model_has(WeightFormat::kFp8)) {
    RETURN_IF_ERROR(pick(WeightFormat::kFp8, fp8, fp8_trace));
  }
  if (dense_auto && dense_trace.empty()) dense = 0;  // no dense matrix: nothing to choose
  if (fp8_auto && fp8_trace.empty()) fp8 = 0;
  RETURN_IF_ERROR(products_->SetGemvTokens(dense, fp8));
  options_.dense_gemv_max_tokens = dense;
  options_.fp8_gemv_max_tokens = fp8;
  auto log = [](const char* format, const char* library, int tokens, const std::string& trace) {
    if (trace.empty()) return;
    const std::string choice =
        tokens > 0
            ? absl::StrFormat("our GEMV for steps of up to %d tokens, %s beyond", tokens, library)
            : absl::StrFormat("%s at every step size", library);
    PAGODA_LOG(kInfo, "cuda", "%s matrices: %s (a step's products, ms GEMV/%s at tokens%s)", format,
               choice, library, trace);
  };
  log("dense", "cuBLAS", dense, dense_trace);
  log("FP8", "cuBLASLt", fp8, fp8_trace);
  return CudaStatus(cudaStreamSynchronize(stream_), "PickGemvTokens");
}

absl::StatusOr<int> CudaBackend::TimeOursUpTo(const std::vector<int>& sizes,
                                              const std::function<bool(WeightFormat)>& matches,
                                              const std::function<absl::Status(int)>& set_up_to,
                                              std::string* trace) {
  int chosen = 0;
  for (const int n : sizes) {
    float ours = std::numeric_limits<float>::infinity(), theirs = ours;
    for (int trial = 0; trial < 2; ++trial) {
      RETURN_IF_ERROR(set_up_to(n));
      ASSIGN_OR_RETURN(const float a, TimeStepProducts(n, matches));
      RETURN_IF_ERROR(set_up_to(0));
      ASSIGN_OR_RETURN(const float b, TimeStepProducts(n, matches));
      ours = std::min(ours, a);
      theirs = std::min(theirs, b);
    }
    absl::StrAppendFormat(trace, " %d: %.3f/%.3f", n, ours, theirs);
    if (!(ours < theirs)) break;
    chosen = n;
  }
  RETURN_IF_ERROR(set_up_to(chosen));
  return chosen;
}

absl::Status CudaBackend::PickSplitK() {
  if (options_.split_k_max_tokens != kGemvAuto) return absl::OkStatus();
  // Init left kGemvAuto only where the products have split-K's workspace. FP8 parts whose
  // product is timed too (kGemvAuto) take our tensor-core product for this timing (cuBLASLt
  // until PickFp8Products), where they fit it; set ones keep their threshold.
  auto on_tensor_cores = [](WeightFormat f) { return IsBlockFormat(f) || f == WeightFormat::kFp8; };
  std::vector<int> sizes;
  for (const int n : {16, 64, 256}) {
    if (n <= limits_.max_tokens) sizes.push_back(n);
  }
  const bool fp8_timed = options_.fp8_cublaslt_min_tokens == kGemvAuto;
  if (fp8_timed) RETURN_IF_ERROR(products_->SetFp8CublasltMinTokens(0));
  std::string trace;
  absl::StatusOr<int> chosen = TimeOursUpTo(
      sizes, on_tensor_cores, [&](int n) { return products_->SetSplitKMaxTokens(n); }, &trace);
  // Back to the threshold PickFp8Products starts from (Init's: cuBLASLt past the GEMV).
  if (fp8_timed) RETURN_IF_ERROR(products_->SetFp8CublasltMinTokens(1));
  RETURN_IF_ERROR(chosen.status());
  options_.split_k_max_tokens = *chosen;
  if (!trace.empty()) {
    const std::string choice =
        *chosen > 0 ? absl::StrFormat("split-K for steps of up to %d tokens", *chosen)
                    : std::string("no split-K");
    PAGODA_LOG(kInfo, "cuda",
               "tensor-core products: %s (a step's products, ms split/unsplit at tokens%s)", choice,
               trace);
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "PickSplitK");
}

absl::StatusOr<float> CudaBackend::TimeStepProducts(
    int n, const std::function<bool(WeightFormat)>& matches) {
  const DeviceLayer& l = weights_.layer(0);
  const Projection& head = weights_.output();
  auto holds = [&](const Projection& p) {
    for (int i = 0; i < p.num_parts; ++i) {
      if (matches(p.parts[static_cast<size_t>(i)].format)) return true;
    }
    return false;
  };
  const bool layer = holds(l.wqkv) || holds(l.wo) || holds(l.w_gate_up) || holds(l.w_down);
  const bool classifier = holds(head) && n <= limits_.max_logit_rows;
  for (DeviceBuffer* input : {&xn_, &attn_, &h_}) {
    RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(input->get(), 0, input->bytes(), stream_), "product timing"));
  }
  auto run_layer = [&]() -> absl::Status {
    RETURN_IF_ERROR(products_->Run(xn_.get(), l.wqkv, qkv_.get<float>(), n, false));
    RETURN_IF_ERROR(products_->Run(attn_.get(), l.wo, x_.get<float>(), n, false));
    RETURN_IF_ERROR(GateUpSilu(l, n, /*marks=*/false));
    return products_->Run(h_.get(), l.w_down, x_.get<float>(), n, false);
  };
  auto run_head = [&] { return products_->Run(xn_.get(), head, logits_.get<float>(), n, false); };
  cudaEvent_t events[3] = {};
  absl::Status status;
  for (cudaEvent_t& e : events) {
    if (status.ok()) status = CudaStatus(cudaEventCreate(&e), "cudaEventCreate");
  }
  constexpr int kPasses = 3;
  float layer_ms = 0, head_ms = 0;
  auto timed = [&]() -> absl::Status {
    if (layer) RETURN_IF_ERROR(run_layer());  // warm-up
    if (classifier) RETURN_IF_ERROR(run_head());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events[0], stream_), "event"));
    for (int pass = 0; pass < kPasses && layer; ++pass) RETURN_IF_ERROR(run_layer());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events[1], stream_), "event"));
    for (int pass = 0; pass < kPasses && classifier; ++pass) RETURN_IF_ERROR(run_head());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events[2], stream_), "event"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events[2]), "event"));
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&layer_ms, events[0], events[1]), "event"));
    return CudaStatus(cudaEventElapsedTime(&head_ms, events[1], events[2]), "event");
  };
  if (status.ok()) status = timed();
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  RETURN_IF_ERROR(status);
  return (layer_ms * config().n_layers + head_ms) / kPasses;
}

absl::StatusOr<int> CudaBackend::TimeLibraryFrom(const std::function<bool(WeightFormat)>& matches,
                                                 int past_tokens,
                                                 const std::function<absl::Status(int)>& set_from,
                                                 const LibraryChoiceLog& log) {
  // Per size, the better of two alternating trials per side; the library takes the steps from
  // the smallest size from which it wins at every larger one timed.
  std::string trace;
  int chosen = 0;
  for (const int n : {16, 64, 256, 1024, 4096}) {
    if (n > limits_.max_tokens || n <= past_tokens) continue;
    float ours = std::numeric_limits<float>::infinity(), library = ours;
    for (int trial = 0; trial < 2; ++trial) {
      RETURN_IF_ERROR(set_from(0));
      ASSIGN_OR_RETURN(const float a, TimeStepProducts(n, matches));
      RETURN_IF_ERROR(set_from(1));
      ASSIGN_OR_RETURN(const float b, TimeStepProducts(n, matches));
      ours = std::min(ours, a);
      library = std::min(library, b);
    }
    absl::StrAppendFormat(&trace, " %d: %.3f/%.3f", n, ours, library);
    if (library < ours) {
      if (chosen == 0) chosen = n;
    } else {
      chosen = 0;
    }
  }
  RETURN_IF_ERROR(set_from(chosen));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "product timing"));
  if (!trace.empty()) {
    const std::string choice = chosen > 0 ? absl::StrFormat("%s below %d tokens, %s from there",
                                                            log.ours, chosen, log.library)
                                          : absl::StrFormat("%s at every size", log.ours);
    PAGODA_LOG(kInfo, "cuda", "%s: %s (a step's products, ms %s at tokens%s)", log.what, choice,
               log.times, trace);
  }
  return chosen;
}

absl::Status CudaBackend::PickBlockProducts() {
  if (options_.quant_cublas_min_tokens != kGemvAuto) return absl::OkStatus();
  options_.quant_cublas_min_tokens = 0;
  const size_t widest_row = static_cast<size_t>(weights_.block_max_cols()) * DTypeSize(dtype_);
  if (options_.max_decode_scratch_bytes < widest_row) {
    PAGODA_LOG(kInfo, "cuda",
               "quantized matrices past the fused product: tensor cores at every size (a decode "
               "scratch of %d bytes holds no row of %d)",
               static_cast<int64_t>(options_.max_decode_scratch_bytes),
               static_cast<int64_t>(widest_row));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(options_.quant_cublas_min_tokens,
                   TimeLibraryFrom([](WeightFormat f) { return IsBlockFormat(f); },
                                   options_.quant_gemv_max_tokens,
                                   [&](int from) { return products_->SetCublasMinTokens(from); },
                                   {"quantized matrices past the fused product", "tensor cores",
                                    "decoded ahead of cuBLAS", "tensor cores/cuBLAS"}));
  return absl::OkStatus();
}

absl::Status CudaBackend::PickFp8Products() {
  if (options_.fp8_cublaslt_min_tokens != kGemvAuto) return absl::OkStatus();
  // No FP8 matrix: nothing to time, and the threshold reads 0. Every FP8 part of the layers (the
  // classifier stays in the dtype) must fit the tensor-core product for it to be timed: a model
  // whose parts do not stays on cuBLASLt.
  const bool fp8 = weights_.fp8_max_rows() > 0;
  options_.fp8_cublaslt_min_tokens = fp8 ? 1 : 0;
  bool fit = fp8;
  for (int l = 0; l < config().n_layers && fit; ++l) {
    const DeviceLayer& layer = weights_.layer(l);
    for (const Projection* p : {&layer.wqkv, &layer.wo, &layer.w_gate_up, &layer.w_down}) {
      for (int i = 0; i < p->num_parts; ++i) {
        const DeviceMatrix& part = p->parts[static_cast<size_t>(i)];
        if (part.format == WeightFormat::kFp8 && !Fp8TensorCoresFit(part)) fit = false;
      }
    }
  }
  if (!fit) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      options_.fp8_cublaslt_min_tokens,
      TimeLibraryFrom(
          [](WeightFormat f) { return f == WeightFormat::kFp8; }, options_.fp8_gemv_max_tokens,
          [&](int from) { return products_->SetFp8CublasltMinTokens(from); },
          {"FP8 matrices past the GEMV", "our tensor-core product", "cuBLASLt", "ours/cuBLASLt"}));
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckProgrammaticLaunch() {
  if (!options_.programmatic_launch) return absl::OkStatus();
  // One of our kernels twice, each launched after the one before it, eagerly and then replayed
  // from a captured graph (as decode steps are). Where the driver refuses either, its error is
  // not sticky: programmatic launches go off and every kernel launches plainly.
  const SiluMulParams silu{gate_up_.get<float>(), h_.get(), 1, config().ffn_dim, dtype_};
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(gate_up_.get(), 0, gate_up_.bytes(), stream_),
                             "programmatic launch"));
  auto twice = [&]() -> absl::Status {
    RETURN_IF_ERROR(LaunchSiluMul(silu, stream_));
    return LaunchSiluMul(silu, stream_);
  };
  absl::Status status = twice();
  if (status.ok()) status = CudaStatus(cudaStreamSynchronize(stream_), "programmatic launch");
  if (status.ok()) {
    status = CudaStatus(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                        "programmatic launch capture");
    if (status.ok()) {
      const absl::Status enqueued = twice();
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
      status = enqueued.ok() ? CudaStatus(ended, "programmatic launch capture") : enqueued;
      cudaGraphExec_t exec = nullptr;
      if (status.ok()) {
        status = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "programmatic launch graph");
      }
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (status.ok()) status = CudaStatus(cudaGraphLaunch(exec, stream_), "programmatic launch");
      if (status.ok()) {
        status = CudaStatus(cudaStreamSynchronize(stream_), "programmatic launch graph");
      }
      if (exec != nullptr) cudaGraphExecDestroy(exec);
    }
  }
  if (status.ok()) return absl::OkStatus();
  cudaGetLastError();  // clear the error: a refusal is not sticky, a fault in a kernel is
  if (cudaStreamSynchronize(stream_) != cudaSuccess) return status;
  options_.programmatic_launch = false;
  SetProgrammaticLaunch(false);
  PAGODA_LOG(kWarning, "cuda", "programmatic dependent launches are off: %s",
             std::string(status.message()));
  return absl::OkStatus();
}

absl::Status CudaBackend::PickPrefillKernel() {
  const common::ModelConfig& c = config();
  const int ps = options_.page_size;
  if (!options_.time_prefill_kernel || options_.prefill_kernel != PrefillKernel::kAuto ||
      !PrefillWgmmaAvailable() || (c.head_dim != 64 && c.head_dim != 128)) {
    return absl::OkStatus();
  }
  // The prompt the worker's default plan prefills in one step (its whole budget, from position
  // 0), as far as the context and the arena allow: what a long prompt's time to first token is
  // made of.
  const int n =
      std::min({limits_.max_tokens, 8192, c.context_length, layout_.num_pages * ps}) / ps * ps;
  if (n == 0) return absl::OkStatus();
  const int pages = n / ps;
  std::vector<int32_t> ints = {0, n, 0};  // token_start, num_tokens, start_pos, then the pages
  for (int p = 0; p < pages; ++p) ints.push_back(p);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(inputs_.get(), ints.data(), ints.size() * 4, cudaMemcpyHostToDevice, stream_),
      "prefill kernel timing"));
  char* const arena = arena_.get<char>();
  const size_t kv_bytes = static_cast<size_t>(pages) * layout_.page_bytes();
  const size_t kv_count = kv_bytes / DTypeSize(dtype_);
  RETURN_IF_ERROR(LaunchFillRandom(q_.get(), size_t(n) * c.q_dim(), dtype_, 1.0f, 1, stream_));
  RETURN_IF_ERROR(
      LaunchFillRandom(arena + layout_.k_offset(0), kv_count, dtype_, 1.0f, 2, stream_));
  RETURN_IF_ERROR(
      LaunchFillRandom(arena + layout_.v_offset(0), kv_count, dtype_, 1.0f, 3, stream_));
  PrefillAttentionParams p{};
  const int32_t* in = inputs_.get<int32_t>();
  p.batch.token_start = in;
  p.batch.num_tokens = in + 1;
  p.batch.start_pos = in + 2;
  p.batch.page_table = in + 3;
  p.batch.page_table_stride = pages;
  p.batch.num_seqs = 1;
  p.shape.n_heads = c.n_heads;
  p.shape.n_kv_heads = c.n_kv_heads;
  p.shape.head_dim = c.head_dim;
  p.shape.page_size = ps;
  p.shape.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.shape.dtype = dtype_;
  p.q = q_.get();
  p.k_cache = arena + layout_.k_offset(0);
  p.v_cache = arena + layout_.v_offset(0);
  p.out = attn_.get();
  p.max_chunk_tokens = n;
  cudaEvent_t events[2] = {};
  absl::Status status;
  for (cudaEvent_t& e : events) {
    if (status.ok()) status = CudaStatus(cudaEventCreate(&e), "cudaEventCreate");
  }
  constexpr int kLaunches = 3;
  auto time_kernel = [&](PrefillKernel kernel) -> absl::StatusOr<float> {
    p.kernel = kernel;
    RETURN_IF_ERROR(LaunchPrefillAttention(p, stream_));  // warm-up
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events[0], stream_), "event"));
    for (int i = 0; i < kLaunches; ++i) RETURN_IF_ERROR(LaunchPrefillAttention(p, stream_));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events[1], stream_), "event"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events[1]), "event"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, events[0], events[1]), "event"));
    return ms / kLaunches;
  };
  float wgmma = std::numeric_limits<float>::infinity(), mma_sync = wgmma;
  for (int trial = 0; trial < 2 && status.ok(); ++trial) {
    absl::StatusOr<float> a = time_kernel(PrefillKernel::kWgmma);
    absl::StatusOr<float> b = a.ok() ? time_kernel(PrefillKernel::kMmaSync) : a;
    if (!b.ok()) status = b.status();
    if (status.ok()) wgmma = std::min(wgmma, *a), mma_sync = std::min(mma_sync, *b);
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  RETURN_IF_ERROR(status);
  // As Init left them: the pages poisoned, the attention output zeros.
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(arena + layout_.k_offset(0), 0xff, kv_bytes, stream_),
                             "prefill kernel timing"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(arena + layout_.v_offset(0), 0xff, kv_bytes, stream_),
                             "prefill kernel timing"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(attn_.get(), 0, attn_.bytes(), stream_), "prefill kernel timing"));
  options_.prefill_kernel = mma_sync < wgmma ? PrefillKernel::kMmaSync : PrefillKernel::kWgmma;
  PAGODA_LOG(kInfo, "cuda",
             "prefill attention: %s (one layer's attention of a %d-token prompt, ms wgmma %.3f, "
             "mma.sync %.3f)",
             mma_sync < wgmma ? "mma.sync" : "wgmma", n, wgmma, mma_sync);
  return CudaStatus(cudaStreamSynchronize(stream_), "PickPrefillKernel");
}

}  // namespace pagoda::worker::cuda
