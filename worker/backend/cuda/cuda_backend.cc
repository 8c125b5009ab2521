#include "worker/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/quant/quant_kernels.h"
#include "worker/backend/cuda/sampling/logprobs.h"
#include "worker/backend/cuda/sampling/sampling.h"

namespace pagoda::worker::cuda {
namespace {

// The logprobs buffers for `rows` rows: log_norm and the sampled (l - m) / T per row, then
// kMaxLogprobsTop ids and logprobs per row.
size_t LogprobsBytes(int rows) { return size_t(rows) * (2 + 2 * kMaxLogprobsTop) * 4; }

// 32-bit words of a token mask over `vocab` tokens.
int MaskWords(int vocab) { return (vocab + 31) / 32; }

// Decode attention partial results the workspace holds: e.g. 256 decodes of 8k tokens.
constexpr int64_t kDecodeUnits = 8192;

absl::Status SelectDevice(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("--backend cuda: no CUDA device is visible");
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--device %d: only %d CUDA device(s) are visible", device, count));
  }
  return CudaStatus(cudaSetDevice(device), "cudaSetDevice");
}

absl::Status CheckOptions(const CudaBackendOptions& o, const common::ModelConfig& c) {
  if (o.quant_cublas_min_tokens < kGemvAuto) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaBackend quant_cublas_min_tokens (%d) must be >= 0, or kGemvAuto",
                        o.quant_cublas_min_tokens));
  }
  if (o.fp8_cublaslt_min_tokens < kGemvAuto) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaBackend fp8_cublaslt_min_tokens (%d) must be >= 0, or kGemvAuto",
                        o.fp8_cublaslt_min_tokens));
  }
  if (o.split_k_max_tokens < kGemvAuto || o.forced_k_splits < 0 ||
      o.forced_k_splits > kMaxKSplits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaBackend split_k_max_tokens (%d) must be >= 0, or kGemvAuto; forced_k_splits (%d) "
        "in [0, %d]",
        o.split_k_max_tokens, o.forced_k_splits, kMaxKSplits));
  }
  if (o.page_size <= 0 || o.num_pages < 0 || o.max_batch_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaBackend page_size (%d) must be positive, max_batch_tokens (%d) and num_pages (%d) "
        ">= 0",
        o.page_size, o.max_batch_tokens, o.num_pages));
  }
  if (c.head_dim % 2 != 0 || c.head_dim > common::kMaxHeadDim || c.n_heads % c.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the CUDA kernels need an even head_dim <= %d and n_heads divisible by n_kv_heads; the "
        "model has head_dim %d, %d heads, %d KV heads",
        common::kMaxHeadDim, c.head_dim, c.n_heads, c.n_kv_heads));
  }
  if (c.vocab_size > kMaxSampleVocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the GPU sampler supports vocabularies up to %d tokens; the model has %d",
                        kMaxSampleVocab, c.vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

int DefaultMaxBatchTokens(size_t device_memory, int major) {
  return major >= 9 && device_memory >= (size_t{70} << 30) ? 8192 : 2048;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options, DeviceWeights weights)
    : options_(options), weights_(std::move(weights)), dtype_(options.dtype) {}

CudaBackend::~CudaBackend() {
  cudaSetDevice(options_.device);  // the caller's thread may have another device current
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  products_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (swap_stream_ != nullptr) cudaStreamDestroy(swap_stream_);
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    std::shared_ptr<const LlamaModel> model, const CudaBackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CudaBackend needs a model");
  RETURN_IF_ERROR(CheckOptions(options, model->config()));
  RETURN_IF_ERROR(SelectDevice(options.device));
  cudaStream_t stream;
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  auto weights = DeviceWeights::Upload(*model, options.dtype, options.keep_quantized,
                                       options.fp8_weights, stream);
  if (!weights.ok()) {
    cudaStreamDestroy(stream);
    return weights.status();
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(options, *std::move(weights)));
  RETURN_IF_ERROR(b->Init(stream));
  return b;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateRandom(
    const common::ModelConfig& config, uint64_t seed, const CudaBackendOptions& options,
    const WeightFormats& formats) {
  RETURN_IF_ERROR(common::ValidateModelConfig(config));
  RETURN_IF_ERROR(CheckOptions(options, config));
  RETURN_IF_ERROR(SelectDevice(options.device));
  cudaStream_t stream;
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  auto weights = DeviceWeights::Random(config, options.dtype, formats, seed, stream);
  if (!weights.ok()) {
    cudaStreamDestroy(stream);
    return weights.status();
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(options, *std::move(weights)));
  RETURN_IF_ERROR(b->Init(stream));
  return b;
}

absl::Status CudaBackend::Init(cudaStream_t stream) {
  stream_ = stream;
  const common::ModelConfig& c = config();
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, options_.device), "cudaGetDeviceProperties"));
  multiprocessors_ = prop.multiProcessorCount;
  if (options_.max_batch_tokens == 0) {
    options_.max_batch_tokens = DefaultMaxBatchTokens(prop.totalGlobalMem, prop.major);
  }
  AttentionShape attention;
  attention.n_heads = c.n_heads;
  attention.n_kv_heads = c.n_kv_heads;
  attention.head_dim = c.head_dim;
  attention.dtype = dtype_;
  decode_blocks_per_sm_ = DecodeBlocksPerMultiprocessor(attention);
  max_pitch_ = prop.memPitch;
  SetProgrammaticLaunch(options_.programmatic_launch);
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&swap_stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  if (options_.prefill_kernel == PrefillKernel::kWgmma && (prop.major != 9 || prop.minor != 0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--prefill-attention wgmma needs compute capability 9.0 (Hopper's sm_90a code); GPU %d, "
        "%s, has compute capability %d.%d: use auto or mma_sync",
        options_.device, prop.name, prop.major, prop.minor));
  }
  if (options_.quant_gemm_kernel == QuantGemmKernel::kWgmma &&
      (prop.major != 9 || prop.minor != 0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the wgmma product of quantized weights needs compute capability 9.0 (Hopper's sm_90a "
        "code); GPU %d, %s, has compute capability %d.%d",
        options_.device, prop.name, prop.major, prop.minor));
  }
  if (weights_.fp8_max_rows() > 0 && prop.major * 10 + prop.minor < 89) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--dtype fp8 needs FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper, "
        "Blackwell); GPU %d, %s, has compute capability %d.%d: use --dtype auto or bf16",
        options_.device, prop.name, prop.major, prop.minor));
  }
  WeightProducts::Options products;
  products.gemv_max_tokens = options_.quant_gemv_max_tokens;
  products.dense_gemv_max_tokens = UntilTimed(options_.dense_gemv_max_tokens);
  products.fp8_gemv_max_tokens = UntilTimed(options_.fp8_gemv_max_tokens);
  products.gemv_int8 = options_.quant_gemv_int8 && weights_.block_max_cols() > 0;
  products.gemv_int8_max_cols = weights_.block_max_cols();
  products.fp8_max_n_in = weights_.fp8_max_cols();
  products.fp8_max_n_out = weights_.fp8_max_rows();
  products.fuse_glu = options_.fuse_glu;
  // FP8 past the GEMV: cuBLASLt until PickFp8Products times our tensor-core product (kGemvAuto).
  products.fp8_cublaslt_min_tokens =
      options_.fp8_cublaslt_min_tokens == kGemvAuto ? 1 : options_.fp8_cublaslt_min_tokens;
  // Decoded ahead of cuBLAS: every step past the fused product (quant_decode_then_cublas), those
  // from a size (quant_cublas_min_tokens), or none until PickBlockProducts times it (kGemvAuto).
  // A model without kept parts has nothing to decode: no scratch, and the threshold reads 0.
  const bool blocks = weights_.block_max_cols() > 0;
  if (options_.quant_decode_then_cublas || !blocks) {
    options_.quant_cublas_min_tokens = options_.quant_decode_then_cublas && blocks ? 1 : 0;
  }
  const int cublas_min = options_.quant_cublas_min_tokens;
  products.cublas_min_tokens = std::max(cublas_min, 0);
  products.gemm_kernel = options_.quant_gemm_kernel;
  // Split-K: the wgmma kernel's, for models with parts that may take it (kept blocks not all
  // decoded ahead of cuBLAS, FP8 not all on cuBLASLt); none until PickSplitK times it
  // (kGemvAuto).
  const bool tensor_core_parts =
      (blocks && cublas_min != 1) ||
      (weights_.fp8_max_rows() > 0 && options_.fp8_cublaslt_min_tokens != 1);
  if (options_.split_k_max_tokens == 0 || !tensor_core_parts || !WgmmaAvailable() ||
      options_.quant_gemm_kernel == QuantGemmKernel::kMmaSync) {
    options_.split_k_max_tokens = 0;
  } else {
    products.num_sms = multiprocessors_;
    products.forced_k_splits = options_.forced_k_splits;
  }
  products.split_k_max_tokens = std::max(options_.split_k_max_tokens, 0);
  if (cublas_min != 0) {
    products.scratch_bytes =
        std::min(options_.max_decode_scratch_bytes, weights_.largest_quantized_part_dense_bytes());
  }
  ASSIGN_OR_RETURN(products_, WeightProducts::Create(stream_, dtype_, products));
  const int T = options_.max_batch_tokens;
  limits_.max_tokens = T;
  limits_.max_seqs = std::min(T, 1024);
  limits_.max_logit_rows = std::min(T, 512);
  limits_.max_decode_units = std::max<int64_t>(kDecodeUnits, DecodePartitions(c.context_length));
  const int R = limits_.max_logit_rows, S = limits_.max_seqs;
  const size_t e = DTypeSize(dtype_), t = static_cast<size_t>(T);
  const size_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
  struct Piece {
    DeviceBuffer* buffer;
    size_t bytes;
    const char* what;
  };
  const int max_pages_per_seq =
      std::max((c.context_length + options_.page_size - 1) / options_.page_size,
               GraphPartitionBucket(std::min(options_.max_graph_context, c.context_length)) *
                       kDecodePartitionTokens / options_.page_size +
                   1);
  const size_t ints = 3 * t + 3 * size_t(S) + size_t(S) * max_pages_per_seq + size_t(R);
  samples_offset_ = (ints * 4 + 63) / 64 * 64;
  const size_t input_bytes = samples_offset_ + size_t(R) * sizeof(SampleRowParams);
  const size_t decode_ws = std::max(
      DecodeAttentionWorkspaceBytes(int(limits_.max_decode_units), c.n_heads, c.head_dim, 1),
      DecodeAttentionWorkspaceBytes(1, c.n_heads, c.head_dim, int(limits_.max_decode_units)));
  const Piece pieces[] = {
      {&x_, t * dim * 4, "the residual stream"},
      {&xn_, t * dim * e, "normalized activations"},
      {&qkv_, t * (q + 2 * kv) * 4, "QKV activations"},
      {&q_, t * q * e, "queries"},
      {&attn_, t * q * e, "attention output"},
      {&gate_up_, t * 2 * ffn * 4, "gate/up activations"},
      {&h_, t * ffn * e, "FFN activations"},
      {&rope_, t * (c.head_dim / 2) * 8, "the RoPE table"},
      {&logits_, size_t(R) * c.vocab_size * 4, "logits"},
      {&tokens_, size_t(R) * 4, "sampled tokens"},
      {&decode_ws_, decode_ws, "decode attention partials"},
      {&decode_counters_, size_t(limits_.max_decode_units) * c.n_kv_heads * 4,
       "decode attention counters"},
      {&sample_ws_, SampleWorkspaceBytes(R, c.vocab_size), "sampling"},
      {&logprobs_, LogprobsBytes(R), "logprobs"},
      {&inputs_, input_bytes, "step inputs"},
  };
  device_bytes_ = weights_.bytes() + products_->workspace_bytes();
  PAGODA_LOG(kInfo, "cuda", "weights: %.1f MiB on the device (%s), %.1f MiB read per step",
             weights_.bytes() / 1048576.0, weights_.FormatSummary(),
             weights_.bytes_read_per_step() / 1048576.0);
  for (const Piece& p : pieces) {
    ASSIGN_OR_RETURN(*p.buffer, DeviceBuffer::Allocate(p.bytes, p.what));
    device_bytes_ += p.bytes;
  }
  ASSIGN_OR_RETURN(staging_, PinnedBuffer::Allocate(input_bytes, "step inputs"));
  ASSIGN_OR_RETURN(tokens_host_, PinnedBuffer::Allocate(size_t(R) * 4, "sampled tokens"));
  ASSIGN_OR_RETURN(logprobs_host_, PinnedBuffer::Allocate(LogprobsBytes(R), "logprobs"));

  layout_ = {c.n_layers, 0, options_.page_size, c.n_kv_heads, c.head_dim, e};
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  MemoryBudget budget;
  budget.device_total = total_bytes;
  budget.device_free = free_bytes;
  budget.fraction = options_.gpu_memory_fraction;
  budget.requested_pages = options_.num_pages;
  ASSIGN_OR_RETURN(layout_.num_pages, PlanKvPages(budget, layout_.bytes_per_pool_page()));
  // The kernels number KV slots (page * page_size + offset) with 32-bit integers.
  if (int64_t{layout_.num_pages} * options_.page_size > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d KV pages of %d tokens are more than the 2^31 slots the kernels can index; lower "
        "--kv-pages, --gpu-memory-fraction or --page-size",
        layout_.num_pages, options_.page_size));
  }
  ASSIGN_OR_RETURN(arena_, DeviceBuffer::Allocate(layout_.total_bytes(), "the KV arena"));
  device_bytes_ += arena_.bytes();
  // Padding rows of a graph replay read attention outputs no kernel writes: make them zeros.
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(attn_.get(), 0, attn_.bytes(), stream_), "workspace init"));
  // Decode attention's counters start at zero, and each launch leaves them there.
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(decode_counters_.get(), 0, decode_counters_.bytes(), stream_),
                 "workspace init"));
  // Poison: KV a plan never wrote reads as NaN, not as plausible zeros.
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(arena_.get(), 0xff, arena_.bytes(), stream_), "KV arena init"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "KV arena init"));
  RETURN_IF_ERROR(CheckProgrammaticLaunch());
  RETURN_IF_ERROR(PickPrefillKernel());
  RETURN_IF_ERROR(CheckFp8Products());
  RETURN_IF_ERROR(PickGemvTokens());
  RETURN_IF_ERROR(PickSplitK());
  RETURN_IF_ERROR(PickBlockProducts());
  return PickFp8Products();
}

absl::Status CudaBackend::FillKvRandom(uint64_t seed) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  RETURN_IF_ERROR(LaunchFillRandom(arena_.get(), arena_.bytes() / DTypeSize(dtype_), dtype_, 1.0f,
                                   seed, stream_));
  return CudaStatus(cudaStreamSynchronize(stream_), "FillKvRandom");
}

absl::Status CudaBackend::EnqueueLayer(int l, const StepInputs& s, int partitions,
                                       int partition_tokens) {
  const common::ModelConfig& c = config();
  const DeviceLayer& w = weights_.layer(l);
  const int T = s.num_tokens;
  const int32_t* in = inputs_.get<int32_t>();
  const StepOffsets& o = s.offsets;
  char* arena = arena_.get<char>();
  void* k_cache = arena + layout_.k_offset(l);
  void* v_cache = arena + layout_.v_offset(l);

  RETURN_IF_ERROR(LaunchRmsNormCast(
      {x_.get<float>(), nullptr, w.attn_norm, xn_.get(), T, c.dim, c.rms_eps, dtype_}, stream_));
  Mark(PhaseTimer::kNorm);
  RETURN_IF_ERROR(products_->Run(xn_.get(), w.wqkv, qkv_.get<float>(), T, false));
  Mark(PhaseTimer::kQkv);
  RETURN_IF_ERROR(LaunchQkvHooks({qkv_.get<float>(), w.bqkv, w.q_norm, w.k_norm, T, c.n_heads,
                                  c.n_kv_heads, c.head_dim, c.rms_eps},
                                 stream_));
  RopeKvWriteParams rope{};
  rope.qkv = qkv_.get<float>();
  rope.rope = rope_.get<float2>();
  rope.positions = in + o.positions;
  rope.token_seq = in + o.token_seq;
  rope.page_table = in + o.page_table;
  rope.page_table_stride = s.page_table_stride;
  rope.q_out = q_.get();
  rope.k_cache = k_cache;
  rope.v_cache = v_cache;
  rope.num_tokens = T;
  rope.n_heads = c.n_heads;
  rope.n_kv_heads = c.n_kv_heads;
  rope.head_dim = c.head_dim;
  rope.page_size = options_.page_size;
  rope.dtype = dtype_;
  RETURN_IF_ERROR(LaunchRopeKvWrite(rope, stream_));
  Mark(PhaseTimer::kRope);

  AttentionShape shape;
  shape.n_heads = c.n_heads;
  shape.n_kv_heads = c.n_kv_heads;
  shape.head_dim = c.head_dim;
  shape.page_size = options_.page_size;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  shape.dtype = dtype_;
  auto batch_slice = [&](int first, int count) {
    AttentionBatch b;
    b.token_start = in + o.seq_token_start + first;
    b.num_tokens = in + o.seq_num_tokens + first;
    b.start_pos = in + o.seq_start_pos + first;
    b.page_table = in + o.page_table + static_cast<size_t>(first) * s.page_table_stride;
    b.page_table_stride = s.page_table_stride;
    b.num_seqs = count;
    return b;
  };
  if (s.num_decodes > 0) {
    DecodeAttentionParams d{};
    d.batch = batch_slice(0, s.num_decodes);
    d.shape = shape;
    d.q = q_.get();
    d.k_cache = k_cache;
    d.v_cache = v_cache;
    d.out = attn_.get();
    d.max_partitions = partitions;
    d.partition_tokens = partition_tokens;
    d.workspace = decode_ws_.get();
    d.counters = decode_counters_.get<uint32_t>();
    RETURN_IF_ERROR(LaunchDecodeAttention(d, stream_));
  }
  if (s.num_prefills > 0) {
    PrefillAttentionParams p{};
    p.batch = batch_slice(s.num_decodes, s.num_prefills);
    p.shape = shape;
    p.q = q_.get();
    p.k_cache = k_cache;
    p.v_cache = v_cache;
    p.out = attn_.get();
    p.max_chunk_tokens = s.max_prefill_tokens;
    p.kernel = options_.prefill_kernel;
    RETURN_IF_ERROR(LaunchPrefillAttention(p, stream_));
  }
  Mark(PhaseTimer::kAttention);
  RETURN_IF_ERROR(products_->Run(attn_.get(), w.wo, x_.get<float>(), T, true));
  Mark(PhaseTimer::kOutput);
  RETURN_IF_ERROR(LaunchRmsNormCast(
      {x_.get<float>(), nullptr, w.ffn_norm, xn_.get(), T, c.dim, c.rms_eps, dtype_}, stream_));
  Mark(PhaseTimer::kNorm);
  RETURN_IF_ERROR(GateUpSilu(w, T, /*marks=*/true));
  RETURN_IF_ERROR(products_->Run(h_.get(), w.w_down, x_.get<float>(), T, true));
  Mark(PhaseTimer::kDown);
  return absl::OkStatus();
}

absl::Status CudaBackend::GateUpSilu(const DeviceLayer& w, int num_tokens, bool marks) {
  ASSIGN_OR_RETURN(const bool fused,
                   products_->RunGlu(xn_.get(), w.w_gate_up, h_.get(), num_tokens));
  if (fused) {
    if (marks) Mark(PhaseTimer::kGateUp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(products_->Run(xn_.get(), w.w_gate_up, gate_up_.get<float>(), num_tokens, false));
  if (marks) Mark(PhaseTimer::kGateUp);
  RETURN_IF_ERROR(LaunchSiluMul(
      {gate_up_.get<float>(), h_.get(), num_tokens, config().ffn_dim, dtype_}, stream_));
  if (marks) Mark(PhaseTimer::kSiluMul);
  return absl::OkStatus();
}

absl::Status CudaBackend::Enqueue(const StepInputs& s, int partitions, bool sample) {
  const common::ModelConfig& c = config();
  const int32_t* in = inputs_.get<int32_t>();
  const StepOffsets& o = s.offsets;
  const DeviceMatrix& embedding = weights_.token_embedding();
  if (embedding.format == WeightFormat::kDense) {
    RETURN_IF_ERROR(LaunchEmbed(
        {in + o.tokens, embedding.data, x_.get<float>(), s.num_tokens, c.dim, dtype_}, stream_));
  } else if (s.num_tokens > 0) {
    DequantizeRowsParams d;
    d.w = embedding;
    d.rows = in + o.tokens;
    d.num_rows = s.num_tokens;
    d.out = x_.get();
    d.out_f32 = true;
    RETURN_IF_ERROR(LaunchDequantizeRows(d, stream_));
  }
  RETURN_IF_ERROR(LaunchRopeTable({in + o.positions, rope_.get<float2>(), s.num_tokens, c.head_dim,
                                   c.rope_base, weights_.rope_inv_freq()},
                                  stream_));
  Mark(PhaseTimer::kEmbed);
  // Decode attention's grid, the same for every layer: partitions of 512 positions, cut shorter
  // when that fills the GPU's waves better (DecodePartitionSplit).
  const int split = DecodePartitionSplit(s.num_decodes, c.n_kv_heads, partitions, multiprocessors_,
                                         limits_.max_decode_units, decode_blocks_per_sm_);
  for (int l = 0; l < c.n_layers; ++l) {
    RETURN_IF_ERROR(EnqueueLayer(l, s, partitions * split, kDecodePartitionTokens / split));
  }
  const int R = s.num_logit_rows;
  RETURN_IF_ERROR(LaunchRmsNormCast({x_.get<float>(), in + o.logit_rows, weights_.output_norm(),
                                     xn_.get(), R, c.dim, c.rms_eps, dtype_},
                                    stream_));
  RETURN_IF_ERROR(products_->Run(xn_.get(), weights_.output(), logits_.get<float>(), R, false));
  Mark(PhaseTimer::kHead);
  if (!sample || R == 0) return absl::OkStatus();
  const auto* row_params =
      reinterpret_cast<const SampleRowParams*>(inputs_.get<char>() + samples_offset_);
  if (mask_rows_ > 0) {
    const auto* rows = mask_.get<int32_t>();
    RETURN_IF_ERROR(LaunchMaskLogits(
        {logits_.get<float>(), rows, reinterpret_cast<const uint32_t*>(rows + mask_rows_),
         mask_rows_, c.vocab_size, MaskWords(c.vocab_size)},
        stream_));
  }
  if (!adjust_host_.empty()) {
    RETURN_IF_ERROR(LaunchAdjustLogits({logits_.get<float>(), adjust_.get<AdjustLogitsEntry>(),
                                        static_cast<int>(adjust_host_.size()), c.vocab_size},
                                       stream_));
  }
  const int max_rows = limits_.max_logit_rows;
  float* lp = logprobs_.get<float>();  // the layout of LogprobsBytes
  if (step_logprobs_) {
    LogprobsParams p{};
    p.logits = logits_.get<float>();
    p.params = row_params;
    p.log_norm = lp;
    p.top_ids = reinterpret_cast<int32_t*>(lp + 2 * max_rows);
    p.top_logprobs = lp + 2 * max_rows + max_rows * kMaxLogprobsTop;
    p.rows = R;
    p.vocab = c.vocab_size;
    RETURN_IF_ERROR(LaunchLogprobs(p, stream_));
  }
  SampleParams sp;
  sp.logits = logits_.get<float>();
  sp.params = row_params;
  sp.out_tokens = tokens_.get<int32_t>();
  sp.out_logprob_unnormalized = step_logprobs_ ? lp + max_rows : nullptr;
  sp.rows = R;
  sp.vocab = c.vocab_size;
  sp.workspace = sample_ws_.get();
  RETURN_IF_ERROR(LaunchSample(sp, stream_));
  Mark(PhaseTimer::kSample);
  return absl::OkStatus();
}

absl::StatusOr<cudaGraphExec_t> CudaBackend::GraphFor(const GraphShape& shape,
                                                      const StepInputs& s) {
  const auto key = std::make_pair(shape.seqs, shape.partitions);
  if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
  RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                             "graph capture"));
  const absl::Status enqueued = Enqueue(s, shape.partitions, /*sample=*/true);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!enqueued.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the (non-sticky) error a failed capture leaves
    RETURN_IF_ERROR(enqueued);
    return CudaStatus(ended, "graph capture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) cudaGetLastError();
  RETURN_IF_ERROR(CudaStatus(inst, "graph instantiate"));
  graphs_[key] = exec;
  return exec;
}

bool CudaBackend::StageSamplingExtras(std::span<const SampleInput> samples) {
  adjust_host_.clear();
  mask_host_.clear();
  mask_rows_ = 0;
  step_logprobs_ = false;
  const size_t words = static_cast<size_t>(MaskWords(config().vocab_size));
  for (size_t r = 0; r < samples.size(); ++r) {
    for (const LogitAdjustment& a : samples[r].adjustments) {
      adjust_host_.push_back({static_cast<int32_t>(r), a});
    }
    step_logprobs_ = step_logprobs_ || samples[r].params.top_logprobs >= 0;
    if (!samples[r].allowed.empty()) {
      mask_host_.push_back(static_cast<uint32_t>(r));
      ++mask_rows_;
    }
  }
  // The masks after the row ids; a mask narrower than the vocabulary allows no token past it.
  for (const SampleInput& s : samples) {
    if (s.allowed.empty()) continue;
    const size_t begin = mask_host_.size();
    mask_host_.resize(begin + words, 0u);
    std::copy_n(s.allowed.begin(), std::min(words, s.allowed.size()), mask_host_.begin() + begin);
  }
  return step_logprobs_ || !adjust_host_.empty() || mask_rows_ > 0;
}

absl::Status CudaBackend::RunMicroBatch(std::span<const SeqInput> batch,
                                        std::span<const SampleInput> samples, bool sample,
                                        std::vector<int32_t>* tokens, std::vector<float>* logits,
                                        std::vector<SampledLogprobs>* logprobs) {
  const bool extras = sample && StageSamplingExtras(samples);
  if (!sample) StageSamplingExtras({});
  const size_t adjust_bytes = adjust_host_.size() * sizeof(AdjustLogitsEntry);
  if (adjust_bytes > adjust_.bytes()) {  // grown outside any capture: eager steps only use it
    ASSIGN_OR_RETURN(adjust_, DeviceBuffer::Allocate(adjust_bytes * 2, "logit adjustments"));
  }
  const size_t mask_bytes = mask_host_.size() * sizeof(uint32_t);
  if (mask_bytes > mask_.bytes()) {
    ASSIGN_OR_RETURN(mask_, DeviceBuffer::Allocate(mask_bytes * 2, "token masks"));
  }
  GraphShape graph;
  if (sample && options_.cuda_graphs && !extras && timer_ == nullptr) {
    graph = ChooseGraph(batch, options_.page_size, options_.max_graph_seqs,
                        std::min(options_.max_graph_context, config().context_length));
    if (int64_t{graph.seqs} * graph.partitions > limits_.max_decode_units ||
        graph.seqs > limits_.max_logit_rows) {
      graph = {};
    }
  }
  BuildStepInputs(batch, samples, options_.page_size, graph.seqs > 0 ? &graph : nullptr, &step_);
  const StepInputs& s = step_;
  const int partitions =
      graph.seqs > 0 ? graph.partitions : DecodePartitions(std::max(1, s.max_decode_context));
  if (int64_t{s.num_decodes} * partitions > limits_.max_decode_units) {
    return absl::InternalError("a micro-batch exceeds the decode attention workspace");
  }
  // Stage every input in pinned memory; the copies out of it are enqueued in Launch().
  char* staging = staging_.get<char>();
  std::memcpy(staging, s.ints.data(), s.ints.size() * 4);
  std::memcpy(staging + samples_offset_, s.samples.data(),
              s.samples.size() * sizeof(SampleRowParams));
  absl::Status status = Launch(graph, partitions, sample, tokens, logits, logprobs);
  if (status.ok() && timer_ != nullptr) status = timer_->Collect();  // the pass has synchronized
  if (!status.ok()) {
    // Work may still be queued (a copy out of staging_ among it): let it drain before the next
    // step rewrites staging_.
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
  }
  return status;
}

absl::Status CudaBackend::Launch(const GraphShape& graph, int partitions, bool sample,
                                 std::vector<int32_t>* tokens, std::vector<float>* logits,
                                 std::vector<SampledLogprobs>* logprobs) {
  const StepInputs& s = step_;
  const char* staging = staging_.get<char>();
  if (!mask_host_.empty()) {  // pageable, like the adjustments below
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(mask_.get(), mask_host_.data(), mask_host_.size() * sizeof(uint32_t),
                        cudaMemcpyHostToDevice, stream_),
        "token mask copy"));
  }
  if (!adjust_host_.empty()) {  // pageable: the copy is done when cudaMemcpyAsync returns
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(adjust_.get(), adjust_host_.data(),
                                               adjust_host_.size() * sizeof(AdjustLogitsEntry),
                                               cudaMemcpyHostToDevice, stream_),
                               "adjustment copy"));
  }
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(inputs_.get(), staging, s.ints.size() * 4, cudaMemcpyHostToDevice, stream_),
      "input copy"));
  if (!s.samples.empty()) {
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(inputs_.get<char>() + samples_offset_, staging + samples_offset_,
                                   s.samples.size() * sizeof(SampleRowParams),
                                   cudaMemcpyHostToDevice, stream_),
                   "input copy"));
  }
  bool replayed = false;
  if (graph.seqs > 0) {
    absl::StatusOr<cudaGraphExec_t> exec = GraphFor(graph, s);
    if (exec.ok()) {
      RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(*exec, stream_), "graph launch"));
      ++graph_replays_;
      replayed = true;
    } else {
      // The padded step runs as well without a graph; stop trying to capture.
      PAGODA_LOG(kWarning, "cuda", "CUDA graphs turned off: %s", exec.status().message());
      options_.cuda_graphs = false;
    }
  }
  if (!replayed) {
    if (timer_ != nullptr) RETURN_IF_ERROR(timer_->Begin(stream_));
    const absl::Status enqueued = Enqueue(s, partitions, sample);
    if (timer_ != nullptr) timer_->Release();
    RETURN_IF_ERROR(enqueued);
  }
  const int rows = s.real_logit_rows;
  if (sample) {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(tokens_host_.get(), tokens_.get(), size_t(rows) * 4,
                                               cudaMemcpyDeviceToHost, stream_),
                               "token copy"));
    if (step_logprobs_) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(logprobs_host_.get(), logprobs_.get(),
                          LogprobsBytes(limits_.max_logit_rows), cudaMemcpyDeviceToHost, stream_),
          "logprobs copy"));
    }
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "forward pass"));
    const int32_t* t = tokens_host_.get<int32_t>();
    tokens->insert(tokens->end(), t, t + rows);
    if (logprobs != nullptr) CollectLogprobs(rows, logprobs);
    return absl::OkStatus();
  }
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  const size_t at = logits->size();
  logits->resize(at + size_t(rows) * vocab);
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(logits->data() + at, logits_.get(), size_t(rows) * vocab * 4,
                                 cudaMemcpyDeviceToHost, stream_),
                 "logits copy"));
  return CudaStatus(cudaStreamSynchronize(stream_), "forward pass");
}

void CudaBackend::CollectLogprobs(int rows, std::vector<SampledLogprobs>* logprobs) {
  const int max_rows = limits_.max_logit_rows;
  const size_t at = logprobs->size();
  logprobs->resize(at + static_cast<size_t>(rows));
  if (!step_logprobs_) return;
  const float* lp = logprobs_host_.get<float>();
  const auto* ids = reinterpret_cast<const int32_t*>(lp + 2 * max_rows);
  const float* top = lp + 2 * max_rows + max_rows * kMaxLogprobsTop;
  const auto* params =
      reinterpret_cast<const SampleRowParams*>(staging_.get<char>() + samples_offset_);
  for (int r = 0; r < rows; ++r) {
    if (params[r].top_logprobs < 0) continue;
    SampledLogprobs& out = (*logprobs)[at + static_cast<size_t>(r)];
    out.logprob = lp[max_rows + r] - lp[r];
    out.num_top = std::min({params[r].top_logprobs, kMaxLogprobsTop, config().vocab_size});
    for (int k = 0; k < out.num_top; ++k) {
      out.top_ids[k] = ids[r * kMaxLogprobsTop + k];
      out.top_logprobs[k] = top[r * kMaxLogprobsTop + k];
    }
  }
}

absl::Status CudaBackend::Forward(std::span<const SeqInput> batch, std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("Forward needs a logits vector");
  RETURN_IF_ERROR(ValidateBatch(batch, config(), options_.page_size, layout_.num_pages));
  logits->clear();
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(std::vector<MicroBatch> parts, SplitBatch(batch, limits_));
  for (const MicroBatch& mb : parts) {
    RETURN_IF_ERROR(RunMicroBatch(batch.subspan(mb.begin, mb.end - mb.begin), {}, false, nullptr,
                                  logits, nullptr));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardSample(std::span<const SeqInput> batch,
                                        std::span<const SampleInput> samples,
                                        std::vector<int32_t>* tokens,
                                        std::vector<SampledLogprobs>* logprobs) {
  RETURN_IF_ERROR(ValidateBatch(batch, config(), options_.page_size, layout_.num_pages));
  size_t wanted = 0;
  for (const SeqInput& in : batch) wanted += in.want_logits ? 1 : 0;
  if (wanted != samples.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d sampling entries for %d sequences that want logits", samples.size(), wanted));
  }
  if (tokens == nullptr) return absl::InvalidArgumentError("ForwardSample needs a tokens vector");
  tokens->clear();
  if (logprobs != nullptr) logprobs->clear();
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(std::vector<MicroBatch> parts, SplitBatch(batch, limits_));
  size_t row = 0;
  for (const MicroBatch& mb : parts) {
    std::span<const SeqInput> part = batch.subspan(mb.begin, mb.end - mb.begin);
    size_t rows = 0;
    for (const SeqInput& in : part) rows += in.want_logits ? 1 : 0;
    RETURN_IF_ERROR(
        RunMicroBatch(part, samples.subspan(row, rows), true, tokens, nullptr, logprobs));
    row += rows;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyPages(std::span<const PageCopy> copies) {
  char* arena = arena_.get<char>();
  const size_t page = layout_.page_bytes();
  for (const PageCopy& c : copies) {
    for (int layer = 0; layer < layout_.n_layers; ++layer) {
      for (size_t base : {layout_.k_offset(layer), layout_.v_offset(layer)}) {
        RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(arena + base + page * size_t(c.dst),
                                                   arena + base + page * size_t(c.src), page,
                                                   cudaMemcpyDeviceToDevice, stream_),
                                   "KV page copy"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::InitSwapSpace(int64_t num_slots) {
  if (num_swap_pages_ > 0) {
    return absl::FailedPreconditionError("the cuda backend's swap space exists already");
  }
  if (num_slots <= 0 || num_slots > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("swap space of %d slots: must be in [1, 2^31)", num_slots));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(swap_, PinnedBuffer::Allocate(size_t(num_slots) * layout_.bytes_per_pool_page(),
                                                 "the swap space"));
  num_swap_pages_ = static_cast<int>(num_slots);
  return absl::OkStatus();
}

std::span<const std::byte> CudaBackend::swap_slot(int slot) const {
  const size_t bytes = layout_.bytes_per_pool_page();
  return {swap_.get<std::byte>() + bytes * size_t(slot), bytes};
}

absl::Status CudaBackend::EnqueueSwapCopy(const SwapCopy& c, bool out) {
  // The page's rows are each layer's K and V: layer_bytes apart in the arena, back to back in
  // the slot.
  const size_t page = layout_.page_bytes(), pitch = layout_.layer_bytes();
  const size_t rows = 2 * size_t(layout_.n_layers);
  char* device = arena_.get<char>() + page * size_t(c.page);
  char* host = swap_.get<char>() + layout_.bytes_per_pool_page() * size_t(c.slot);
  const cudaMemcpyKind kind = out ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  if (pitch <= max_pitch_) {
    const cudaError_t err =
        out ? cudaMemcpy2DAsync(host, page, device, pitch, page, rows, kind, swap_stream_)
            : cudaMemcpy2DAsync(device, pitch, host, page, page, rows, kind, swap_stream_);
    return CudaStatus(err, "KV page swap");
  }
  for (size_t r = 0; r < rows; ++r) {
    char* d = device + r * pitch;
    char* h = host + r * page;
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(out ? h : d, out ? d : h, page, kind, swap_stream_),
                               "KV page swap"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Swap(std::span<const SwapCopy> copies, bool out) {
  if (copies.empty()) return absl::OkStatus();
  if (num_swap_pages_ == 0) return out ? Backend::SwapOut(copies) : Backend::SwapIn(copies);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  // Page copies may still be queued on the compute stream: they read or write pages first.
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "KV page swap"));
  absl::Status status;
  for (const SwapCopy& c : copies) {
    status = EnqueueSwapCopy(c, out);
    if (!status.ok()) break;
  }
  // Drained even after a failed enqueue: no copy outlives the call.
  const absl::Status synced = CudaStatus(cudaStreamSynchronize(swap_stream_), "KV page swap");
  if (!status.ok() || !synced.ok()) cudaGetLastError();
  return status.ok() ? synced : status;
}

absl::Status CudaBackend::SwapOut(std::span<const SwapCopy> copies) {
  return Swap(copies, /*out=*/true);
}

absl::Status CudaBackend::SwapIn(std::span<const SwapCopy> copies) {
  return Swap(copies, /*out=*/false);
}

}  // namespace pagoda::worker::cuda
