// The CUDA backend: the Llama forward pass on an NVIDIA GPU over the same paged-KV contract as
// the CPU backend (worker/backend/backend.h), with sampling on the device.
//
// Memory: the weights (DeviceWeights, one allocation: the dtype, GGUF blocks kept as stored, or
// FP8; the products of each format in weight_products.h), a fixed workspace sized for
// max_batch_tokens, and the KV arena: one allocation of K and V pages for every layer
// (arena_layout.h), sized by num_pages or by what gpu_memory_fraction leaves. Plain cudaMalloc.
// The swap space (InitSwapSpace) is pinned host memory of whole pages, one slot after another,
// each laid out [layer][K, V][page_size][n_kv_heads][head_dim]. Swaps run on a stream of their
// own: they first wait for the compute stream (queued page copies), and return once their
// copies are done, so no Forward overlaps them (one 2D copy per page; one copy per layer's K
// or V where the arena's layers are further apart than a 2D copy may stride).
//
// A Forward pass is cut into micro-batches that fit the workspace (step_plan.h); each stages its
// packed inputs with one host-to-device copy, runs embedding → layers (RMSNorm, fused QKV GEMM,
// RoPE + KV page write, paged attention, output GEMM with the residual add fused, RMSNorm,
// gate/up GEMM, SiLU·mul, down GEMM with the residual add) → final norm of the sampled rows →
// classifier GEMM → logit adjustments (logit_bias, penalties) → logprobs → GPU sampling
// (sampling/), and copies back only the sampled tokens (and logprobs, when a row asks).
// Decode-only steps replay a CUDA graph captured per (batch bucket, partition bucket), unless a
// row has adjustments or asks for logprobs: those steps run eagerly (the adjustment list
// varies in size), so requests without them pay nothing.
//
// Not thread-safe (one caller at a time, like every Backend); any thread may call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/arena_layout.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/device_weights.h"
#include "worker/backend/cuda/dtype.h"
#include "worker/backend/cuda/phase_timer.h"
#include "worker/backend/cuda/sampling/logprobs.h"
#include "worker/backend/cuda/step_plan.h"
#include "worker/backend/cuda/weight_products.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker::cuda {

// max_batch_tokens when the options leave it 0, for a GPU of compute capability `major`.x with
// `device_memory` bytes: 8192 on Hopper and later with 70 GiB or more (H100, H200, B200), else
// 2048. These are the per-step token budgets vLLM's OpenAI server defaults to on such GPUs and
// on smaller ones; vLLM keeps the A100 at 2048 by its name after measuring lower throughput
// there, where this rule asks for compute capability 9.0. The larger workspace, about 1.7 GB
// for an 8B model, is a few percent of such a GPU's KV arena.
int DefaultMaxBatchTokens(size_t device_memory, int major);

// dense_gemv_max_tokens and fp8_gemv_max_tokens: chosen at Init by timing our GEMV against the
// library on the model's own matrices (CudaBackend::PickGemvTokens).
inline constexpr int kGemvAuto = -1;

// A small-batch threshold as it stands until PickGemvTokens: kGemvAuto takes the GEMV's whole
// range (so the start-up checks run it), a set value is itself.
inline int UntilTimed(int gemv_max_tokens) {
  return gemv_max_tokens == kGemvAuto ? kQuantGemvMaxTokens : gemv_max_tokens;
}

struct CudaBackendOptions {
  int page_size = 16;
  int num_pages = 0;  // 0 = what gpu_memory_fraction leaves after weights and workspace
  double gpu_memory_fraction = 0.9;
  // Tokens in one micro-batch (the workspace's size); 0: DefaultMaxBatchTokens of the device.
  int max_batch_tokens = 2048;
  DType dtype = DType::kBf16;  // activations, KV, and the weights not kept quantized
  // Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices stay in their GGUF blocks (weight_products.h).
  bool keep_quantized = false;
  // Kept parts, up to this many tokens: the fused product; beyond: tensor cores, or (when
  // quant_decode_then_cublas) rows decoded into a scratch of at most max_decode_scratch_bytes,
  // in slices, multiplied by cuBLAS.
  int quant_gemv_max_tokens = 8;
  bool quant_decode_then_cublas = false;
  // Kept parts past the fused product, for steps of at least this many tokens: decoded ahead of
  // cuBLAS (as quant_decode_then_cublas does for all), tensor cores below; 0: never; kGemvAuto:
  // measured at Init (PickBlockProducts: the smaller of 16, 64, 256, 1024, 4096 tokens from
  // which cuBLAS is faster). The worker passes kGemvAuto; the default keeps tests independent
  // of timings.
  int quant_cublas_min_tokens = 0;
  // The tensor-core product's kernel (LaunchQuantGemm): wgmma on compute capability 9.0, mma.sync
  // elsewhere, unless pinned (benchmarks compare them).
  QuantGemmKernel quant_gemm_kernel = QuantGemmKernel::kAuto;
  // The fused product with activations quantized to 8-bit blocks and integer dot products (as
  // llama.cpp's CUDA backend for small batches), not the dtype's values in FP32.
  bool quant_gemv_int8 = false;
  // The layers' float matrices become FP8 E4M3 with a scale per row, multiplied through
  // cuBLASLt's FP8 path (fp8_gemm.h); refused on GPUs before compute capability 8.9.
  bool fp8_weights = false;
  // FP8 matrices for up to this many tokens (at most kQuantGemvMaxTokens): our GEMV
  // (LaunchFp8Gemv) instead of cuBLASLt; 0 keeps cuBLASLt; kGemvAuto: measured at Init
  // (PickGemvTokens). bench/gpu.sh measures each at batch 1.
  int fp8_gemv_max_tokens = 8;
  // FP8 matrices past the GEMV, for steps of at least this many tokens: cuBLASLt; below, our
  // tensor-core product (LaunchQuantGemm: activations in the dtype, one kernel where cuBLASLt's
  // path takes three). 1: cuBLASLt always (the default keeps tests independent of timings); 0:
  // never; kGemvAuto: measured at Init (PickFp8Products), as the worker asks.
  int fp8_cublaslt_min_tokens = 1;
  // Steps of up to this many tokens on the tensor-core product (kept blocks, and FP8 past its
  // GEMV) cut its columns into splits where the tiles alone leave SMs idle (split-K:
  // WeightProducts::Options); 0: never; kGemvAuto: measured at Init (PickSplitK), as the worker
  // asks. wgmma only (compute capability 9.0, quant_gemm_kernel not mma.sync). forced_k_splits
  // (tests): that many splits, not the SM count's.
  int split_k_max_tokens = 0;
  int forced_k_splits = 0;
  size_t max_decode_scratch_bytes = kMaxDecodeScratchBytes;
  // Dense (BF16/FP16) matrices for up to this many tokens: our GEMV (LaunchDenseGemv) instead of
  // cuBLAS; 0 keeps cuBLAS; kGemvAuto as above. The worker passes kGemvAuto for both
  // (--gemv-max-tokens auto); these defaults keep tests independent of timings.
  int dense_gemv_max_tokens = 0;
  // Prefill attention's tensor-core kernel (head dims 64 and 128): auto takes wgmma on
  // compute capability 9.0 and mma.sync elsewhere; wgmma is refused at Init anywhere else.
  PrefillKernel prefill_kernel = PrefillKernel::kAuto;
  // With prefill_kernel auto on a GPU that runs both kernels: Init times each on one prompt of
  // the step budget and keeps the faster (PickPrefillKernel). The worker sets it for
  // --prefill-attention auto; the default keeps tests independent of timings.
  bool time_prefill_kernel = false;
  int device = 0;
  bool cuda_graphs = true;
  // Our per-layer kernels as programmatic dependent launches (LaunchKernelAfterPrior), each
  // overlapping the tail of the kernel before it. Process-wide: Init sets it (ProgrammaticLaunch)
  // for every backend of the process.
  bool programmatic_launch = true;
  // Steps whose gate/up product is one of our GEMVs compute silu(gate) * up in it
  // (WeightProducts::RunGlu), one kernel fewer per layer; the same values either way.
  bool fuse_glu = true;
  int max_graph_seqs = 256;       // decode batches up to this size replay graphs
  int max_graph_context = 32768;  // ... when their longest context is at most this
};

class CudaBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      std::shared_ptr<const LlamaModel> model, const CudaBackendOptions& options);
  // Seeded random weights made on the device for `config` (benchmarks of full-size shapes), in
  // `formats` (default: every matrix in the dtype).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateRandom(
      const common::ModelConfig& config, uint64_t seed, const CudaBackendOptions& options,
      const WeightFormats& formats = {});
  ~CudaBackend() override;

  absl::Status Forward(std::span<const SeqInput> batch, std::vector<float>* logits) override;
  using Backend::ForwardSample;  // the overload without logprobs
  absl::Status ForwardSample(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                             std::vector<int32_t>* tokens,
                             std::vector<SampledLogprobs>* logprobs) override;

  // Device-to-device copies on the backend's stream, ordered before the next Forward.
  absl::Status CopyPages(std::span<const PageCopy> copies) override;
  absl::Status InitSwapSpace(int64_t num_slots) override;
  absl::Status SwapOut(std::span<const SwapCopy> copies) override;
  absl::Status SwapIn(std::span<const SwapCopy> copies) override;
  int num_swap_pages() const override { return num_swap_pages_; }
  // The host bytes of swap slot `slot` (< num_swap_pages()), for tests.
  std::span<const std::byte> swap_slot(int slot) const;
  int page_size() const override { return options_.page_size; }
  int num_pages() const override { return layout_.num_pages; }
  const common::ModelConfig& config() const override { return weights_.config(); }
  std::string name() const override { return "cuda"; }
  size_t kv_bytes() const override { return layout_.total_bytes(); }
  size_t device_bytes() const override { return device_bytes_; }
  int max_batch_tokens() const override { return options_.max_batch_tokens; }
  // The whole micro-batch: a GPU's GEMMs reach their rate only past a thousand or so tokens.
  int preferred_prefill_chunk() const override { return options_.max_batch_tokens; }

  // Benchmarks: times the parts of every following pass into `timer` (null: stops), which runs
  // them without CUDA graphs (phase_timer.h). The timer outlives its use here.
  void set_phase_timer(PhaseTimer* timer) { timer_ = timer; }

  // The steps of up to this many tokens that multiply dense / FP8 matrices with our GEMV (after
  // kGemvAuto is resolved).
  int dense_gemv_max_tokens() const { return options_.dense_gemv_max_tokens; }
  int fp8_gemv_max_tokens() const { return options_.fp8_gemv_max_tokens; }
  // The steps of at least this many tokens that decode kept parts ahead of cuBLAS (0: none;
  // after kGemvAuto is resolved).
  int quant_cublas_min_tokens() const { return options_.quant_cublas_min_tokens; }
  // The steps of at least this many tokens that multiply FP8 matrices past the GEMV through
  // cuBLASLt (0: none; after kGemvAuto is resolved).
  int fp8_cublaslt_min_tokens() const { return options_.fp8_cublaslt_min_tokens; }
  // The steps of up to this many tokens whose tensor-core products may split (0: none; after
  // kGemvAuto is resolved).
  int split_k_max_tokens() const { return options_.split_k_max_tokens; }
  // Prefill attention's kernel: what time_prefill_kernel picked, else as given (kAuto: the
  // launcher's choice).
  PrefillKernel prefill_kernel() const { return options_.prefill_kernel; }
  // Whether our per-layer kernels launch after each other programmatically (the option, unless
  // the start-up check turned it off).
  bool programmatic_launch() const { return options_.programmatic_launch; }
  size_t weight_bytes() const { return weights_.bytes(); }
  size_t weight_bytes_per_step() const { return weights_.bytes_read_per_step(); }
  const KvArenaLayout& kv_layout() const { return layout_; }
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }
  int graph_replays() const { return graph_replays_; }
  // Benchmarks: fills every KV page with seeded random values.
  absl::Status FillKvRandom(uint64_t seed);

 private:
  CudaBackend(const CudaBackendOptions& options, DeviceWeights weights);
  absl::Status Init(cudaStream_t stream);  // workspace, arena, staging
  // At Init: every projection prepared (FP8 plans, block kernels' set-up), then the first
  // layer's FP8 projections run through both of their products.
  absl::Status CheckFp8Products();
  // Resolves kGemvAuto thresholds: per format, our GEMV against the library at 1, 2, 4 and 8
  // tokens, timing a step's products (the first layer's, n_layers times, and the classifier);
  // the GEMV keeps every size up to the first where it is not faster.
  absl::Status PickGemvTokens();
  // Resolves split_k_max_tokens' kGemvAuto: a step's tensor-core products (block parts, and FP8
  // parts on ours for the timing) split against unsplit at 16, 64 and 256 tokens (up to the
  // budget), as PickGemvTokens times its sizes (TimeOursUpTo).
  absl::Status PickSplitK();
  // The loop PickGemvTokens and PickSplitK share: at each of `sizes` (increasing), a step's
  // products of the parts `matches` takes with ours up to that size (set_up_to(n)) against
  // without (set_up_to(0)), the better of two alternating trials each; ours keeps every size up
  // to the first where it is not faster, so the result is never above a size it lost. Appends
  // " n: ours/theirs" (ms) per size to *trace; set_up_to is left at the result.
  absl::StatusOr<int> TimeOursUpTo(const std::vector<int>& sizes,
                                   const std::function<bool(WeightFormat)>& matches,
                                   const std::function<absl::Status(int)>& set_up_to,
                                   std::string* trace);
  // Resolves quant_cublas_min_tokens' kGemvAuto: a step's products of the kept parts on tensor
  // cores against decoded ahead of cuBLAS, at 16, 64, 256, 1024 and 4096 tokens (up to the
  // budget); cuBLAS takes every step from the smallest size from which it wins at each larger.
  absl::Status PickBlockProducts();
  // Resolves fp8_cublaslt_min_tokens' kGemvAuto the same way: FP8 parts past the GEMV through
  // our tensor-core product against cuBLASLt (when every FP8 part fits ours, else cuBLASLt).
  absl::Status PickFp8Products();
  // How TimeLibraryFrom logs its choice: "<what>: <ours> below N tokens, <library> from there
  // (a step's products, ms <times> at tokens n: ours/library ...)", or "<ours> at every size".
  struct LibraryChoiceLog {
    const char* what;
    const char* ours;
    const char* library;
    const char* times;
  };
  // What both share: a step's products of the parts `matches` takes at 16, 64, 256, 1024 and
  // 4096 tokens (past past_tokens, up to the budget), ours (set_from(0)) against the library's
  // (set_from(1)), the better of two alternating trials each; returns the smallest size from
  // which the library wins at every larger one timed (0: ours throughout), set through set_from,
  // and logs it with the times when a size was timed.
  absl::StatusOr<int> TimeLibraryFrom(const std::function<bool(WeightFormat)>& matches,
                                      int past_tokens,
                                      const std::function<absl::Status(int)>& set_from,
                                      const LibraryChoiceLog& log);
  // Resolves time_prefill_kernel: one prompt of min(budget, 8192, context, arena) tokens from
  // position 0 through the first layer's prefill attention, on random queries and pages, with
  // each tensor-core kernel (the better of two alternating trials of three launches); keeps the
  // faster, and poisons those pages again.
  absl::Status PickPrefillKernel();
  // With programmatic_launch: two of our kernels launched after each other, eagerly and from a
  // captured graph; where either fails, programmatic launches go off (logged), not the start.
  absl::Status CheckProgrammaticLaunch();
  // A step's products at n tokens of the parts `matches` holds: the first layer's, counted
  // n_layers times, plus the classifier's where it holds such parts and n fits the logits (a
  // decode step samples every row), timed over a few eager passes after a warm-up (zeros in:
  // the time does not depend on the values). Milliseconds. Eager launches, where decode replays
  // graphs: at the shapes where the choices matter the kernels outlast their launches.
  absl::StatusOr<float> TimeStepProducts(int n, const std::function<bool(WeightFormat)>& matches);
  absl::Status RunMicroBatch(std::span<const SeqInput> batch, std::span<const SampleInput> samples,
                             bool sample, std::vector<int32_t>* tokens, std::vector<float>* logits,
                             std::vector<SampledLogprobs>* logprobs);
  // Stages the samples' logit adjustments (adjust_host_) and notes whether a row wants
  // logprobs; true when either holds (the step then runs without a CUDA graph).
  bool StageSamplingExtras(std::span<const SampleInput> samples);
  // Copies the staged step_ to the device, runs it (graph replay or eager) and copies back.
  absl::Status Launch(const GraphShape& graph, int partitions, bool sample,
                      std::vector<int32_t>* tokens, std::vector<float>* logits,
                      std::vector<SampledLogprobs>* logprobs);
  // After the step: appends each row's logprobs from logprobs_host_ (rows that asked).
  void CollectLogprobs(int rows, std::vector<SampledLogprobs>* logprobs);
  absl::Status Enqueue(const StepInputs& s, int partitions, bool sample);  // the forward pass
  // partitions: of partition_tokens positions each (decode attention's grid).
  absl::Status EnqueueLayer(int layer, const StepInputs& s, int partitions, int partition_tokens);
  // h_ = silu(xn_ Wgate^T) * (xn_ Wup^T) for num_tokens tokens of layer w: WeightProducts::RunGlu
  // where it takes the step, else the product into gate_up_ and LaunchSiluMul. `marks`: the
  // phase timer's marks after each (the pass's; start-up timings pass false).
  absl::Status GateUpSilu(const DeviceLayer& w, int num_tokens, bool marks);
  // Ends `phase` of the pass being enqueued, when a phase timer is set.
  void Mark(PhaseTimer::Phase phase) {
    if (timer_ != nullptr) timer_->Mark(phase, stream_);
  }
  absl::StatusOr<cudaGraphExec_t> GraphFor(const GraphShape& shape, const StepInputs& s);
  // Copies between pages and swap slots (out: page -> slot) on swap_stream_, and waits for them.
  absl::Status Swap(std::span<const SwapCopy> copies, bool out);
  absl::Status EnqueueSwapCopy(const SwapCopy& c, bool out);  // one page, on swap_stream_

  CudaBackendOptions options_;
  DeviceWeights weights_;
  DType dtype_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t swap_stream_ = nullptr;  // swap copies only
  size_t max_pitch_ = 0;                // the widest stride a 2D copy may take (memPitch)
  std::unique_ptr<WeightProducts> products_;
  StepLimits limits_;
  int multiprocessors_ = 0;       // of the device: sizes the decode attention grid
  int decode_blocks_per_sm_ = 0;  // the decode split kernel's occupancy (0: unknown)
  KvArenaLayout layout_;
  DeviceBuffer arena_;
  PinnedBuffer swap_;  // [num_swap_pages_][bytes_per_pool_page]
  int num_swap_pages_ = 0;

  // Workspace, sized for limits_ (T tokens, R rows).
  DeviceBuffer x_;        // [T][dim] float32 residual stream
  DeviceBuffer xn_;       // [T][dim] dtype: normalized GEMM input
  DeviceBuffer qkv_;      // [T][q_dim + 2 kv_dim] float32
  DeviceBuffer q_;        // [T][q_dim] dtype, RoPE applied
  DeviceBuffer attn_;     // [T][q_dim] dtype
  DeviceBuffer gate_up_;  // [T][2 ffn_dim] float32
  DeviceBuffer h_;        // [T][ffn_dim] dtype
  DeviceBuffer rope_;     // [T][head_dim / 2] float2
  DeviceBuffer logits_;   // [R][vocab] float32
  DeviceBuffer tokens_;   // [R] int32 sampled
  DeviceBuffer decode_ws_;
  DeviceBuffer decode_counters_;  // LaunchDecodeAttention's, zeroed once
  DeviceBuffer sample_ws_;
  DeviceBuffer inputs_;  // packed StepInputs: ints, then SampleRowParams at samples_offset_
  size_t samples_offset_ = 0;
  PinnedBuffer staging_;  // host side of inputs_
  PinnedBuffer tokens_host_;
  // Logprobs, [R] log_norm, [R] sampled (l - m) / T, [R][20] top ids, [R][20] top logprobs;
  // written only by steps where a row asks (those run eagerly, never as a graph).
  DeviceBuffer logprobs_;
  PinnedBuffer logprobs_host_;
  // The current micro-batch's logit adjustments (AdjustLogitsEntry), grown on demand.
  DeviceBuffer adjust_;
  std::vector<AdjustLogitsEntry> adjust_host_;
  // The current micro-batch's token masks (constrained rows): [n] row ids, then [n][words]
  // masks, as 32-bit words; grown on demand.
  DeviceBuffer mask_;
  std::vector<uint32_t> mask_host_;
  int mask_rows_ = 0;
  bool step_logprobs_ = false;  // a row of the current micro-batch wants logprobs

  StepInputs step_;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // (seqs, partitions) -> graph
  int graph_replays_ = 0;
  PhaseTimer* timer_ = nullptr;  // set_phase_timer
  size_t device_bytes_ = 0;      // every device allocation above, the weights included
};

}  // namespace pagoda::worker::cuda
