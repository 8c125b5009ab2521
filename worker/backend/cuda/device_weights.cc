#include "worker/backend/cuda/device_weights.h"

#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/model/architecture.h"

namespace pagoda::worker::cuda {
namespace {

// Bump allocator over one buffer, 256-byte aligned pieces.
class Carver {
 public:
  void* Take(size_t bytes) {
    const size_t at = offset_;
    offset_ += (bytes + 255) / 256 * 256;
    return base_ == nullptr ? nullptr : base_ + at;
  }
  size_t used() const { return offset_; }
  void Reset(char* base) {
    base_ = base;
    offset_ = 0;
  }

 private:
  char* base_ = nullptr;
  size_t offset_ = 0;
};

// Converts float32 values to the dtype's 16-bit patterns.
std::vector<uint16_t> ToDType(std::span<const float> values, DType dtype) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = dtype == DType::kBf16 ? common::FloatToBf16(values[i]) : common::FloatToF16(values[i]);
  }
  return out;
}

absl::Status Copy(void* dst, std::span<const float> src, DType dtype, cudaStream_t stream) {
  const std::vector<uint16_t> h = ToDType(src, dtype);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice, stream), "upload"));
  return CudaStatus(cudaStreamSynchronize(stream), "upload");  // `h` dies here
}

absl::Status CopyF32(const float* dst, std::span<const float> src, cudaStream_t stream) {
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(const_cast<float*>(dst), src.data(), src.size_bytes(),
                                             cudaMemcpyHostToDevice, stream),
                             "upload"));
  return CudaStatus(cudaStreamSynchronize(stream), "upload");
}

// Concatenation of row-major matrices with the same row length.
std::vector<float> Concat(std::initializer_list<std::span<const float>> parts) {
  std::vector<float> out;
  for (std::span<const float> p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

absl::StatusOr<DeviceWeights> DeviceWeights::Allocate(const common::ModelConfig& c, DType dtype,
                                                      bool tied, bool scaled_rope) {
  const ArchitectureTraits traits = TraitsOf(c);
  const size_t e = DTypeSize(dtype);
  const size_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim, vocab = c.vocab_size;
  DeviceWeights w;
  w.config_ = c;
  w.dtype_ = dtype;
  // Two passes over the same carving: sizes first, then pointers into the allocation.
  Carver carver;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      ASSIGN_OR_RETURN(w.buffer_, DeviceBuffer::Allocate(carver.used(), "the model weights"));
      carver.Reset(w.buffer_.get<char>());
    }
    w.layers_.assign(static_cast<size_t>(c.n_layers), DeviceLayer{});
    w.token_embd_ = carver.Take(vocab * dim * e);
    w.output_norm_ = static_cast<const float*>(carver.Take(dim * 4));
    w.output_ = tied ? w.token_embd_ : carver.Take(vocab * dim * e);
    for (DeviceLayer& l : w.layers_) {
      l.attn_norm = static_cast<const float*>(carver.Take(dim * 4));
      l.wqkv = carver.Take((q + 2 * kv) * dim * e);
      l.wo = carver.Take(dim * q * e);
      l.ffn_norm = static_cast<const float*>(carver.Take(dim * 4));
      l.w_gate_up = carver.Take(2 * ffn * dim * e);
      l.w_down = carver.Take(dim * ffn * e);
      if (traits.qkv_bias) l.bqkv = static_cast<const float*>(carver.Take((q + 2 * kv) * 4));
      if (traits.qk_norm) {
        l.q_norm = static_cast<const float*>(carver.Take(c.head_dim * 4));
        l.k_norm = static_cast<const float*>(carver.Take(c.head_dim * 4));
      }
    }
    w.rope_inv_freq_ =
        scaled_rope ? static_cast<const float*>(carver.Take(c.head_dim / 2 * 4)) : nullptr;
  }
  w.step_bytes_ =
      (vocab * dim + size_t(c.n_layers) * ((q + 2 * kv) * dim + dim * q + 3 * ffn * dim)) * e;
  return w;
}

absl::StatusOr<DeviceWeights> DeviceWeights::Upload(const LlamaModel& model, DType dtype,
                                                    cudaStream_t stream) {
  const common::ModelConfig& c = model.config();
  ASSIGN_OR_RETURN(DeviceWeights w,
                   Allocate(c, dtype, model.tied_output(), !model.rope_inv_freq().empty()));
  if (w.rope_inv_freq_ != nullptr) {
    RETURN_IF_ERROR(CopyF32(w.rope_inv_freq_, model.rope_inv_freq(), stream));
  }
  RETURN_IF_ERROR(
      Copy(const_cast<void*>(w.token_embd_), model.token_embedding().ToFloat(), dtype, stream));
  RETURN_IF_ERROR(CopyF32(w.output_norm_, model.output_norm(), stream));
  if (!model.tied_output()) {
    RETURN_IF_ERROR(Copy(const_cast<void*>(w.output_), model.output().ToFloat(), dtype, stream));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const LlamaLayerWeights& src = model.layer(i);
    const DeviceLayer& dst = w.layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(CopyF32(dst.attn_norm, src.attn_norm, stream));
    RETURN_IF_ERROR(Copy(const_cast<void*>(dst.wqkv),
                         Concat({src.wq.ToFloat(), src.wk.ToFloat(), src.wv.ToFloat()}), dtype,
                         stream));
    RETURN_IF_ERROR(Copy(const_cast<void*>(dst.wo), src.wo.ToFloat(), dtype, stream));
    RETURN_IF_ERROR(CopyF32(dst.ffn_norm, src.ffn_norm, stream));
    RETURN_IF_ERROR(Copy(const_cast<void*>(dst.w_gate_up),
                         Concat({src.w_gate.ToFloat(), src.w_up.ToFloat()}), dtype, stream));
    RETURN_IF_ERROR(Copy(const_cast<void*>(dst.w_down), src.w_down.ToFloat(), dtype, stream));
    if (dst.bqkv != nullptr) {
      RETURN_IF_ERROR(CopyF32(dst.bqkv, Concat({src.arch.bq, src.arch.bk, src.arch.bv}), stream));
    }
    if (dst.q_norm != nullptr) {
      RETURN_IF_ERROR(CopyF32(dst.q_norm, src.arch.q_norm, stream));
      RETURN_IF_ERROR(CopyF32(dst.k_norm, src.arch.k_norm, stream));
    }
  }
  return w;
}

absl::StatusOr<DeviceWeights> DeviceWeights::Random(const common::ModelConfig& c, DType dtype,
                                                    uint64_t seed, cudaStream_t stream) {
  const std::vector<float> inv_freq = ScaledRopeInvFrequencies(c);
  ASSIGN_OR_RETURN(DeviceWeights w, Allocate(c, dtype, /*tied=*/false, !inv_freq.empty()));
  if (w.rope_inv_freq_ != nullptr) RETURN_IF_ERROR(CopyF32(w.rope_inv_freq_, inv_freq, stream));
  const size_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim, vocab = c.vocab_size;
  uint64_t s = seed;
  // Uniform in [-a, a] with variance 1/n_in: unit-scale activations through every projection.
  auto matrix = [&](const void* p, size_t rows, size_t n_in) {
    return LaunchFillRandom(const_cast<void*>(p), rows * n_in, dtype,
                            std::sqrt(3.0f / static_cast<float>(n_in)), ++s, stream);
  };
  auto norm = [&](const float* p) {
    return LaunchFillRandomF32(const_cast<float*>(p), dim, 0.1f, 1.0f, ++s, stream);
  };
  RETURN_IF_ERROR(
      LaunchFillRandom(const_cast<void*>(w.token_embd_), vocab * dim, dtype, 1.0f, ++s, stream));
  RETURN_IF_ERROR(norm(w.output_norm_));
  RETURN_IF_ERROR(matrix(w.output_, vocab, dim));
  for (const DeviceLayer& l : w.layers_) {
    RETURN_IF_ERROR(norm(l.attn_norm));
    RETURN_IF_ERROR(matrix(l.wqkv, q + 2 * kv, dim));
    RETURN_IF_ERROR(matrix(l.wo, dim, q));
    RETURN_IF_ERROR(norm(l.ffn_norm));
    RETURN_IF_ERROR(matrix(l.w_gate_up, 2 * ffn, dim));
    RETURN_IF_ERROR(matrix(l.w_down, dim, ffn));
    auto fill = [&](const float* p, size_t n, float scale, float offset) {
      return LaunchFillRandomF32(const_cast<float*>(p), n, scale, offset, ++s, stream);
    };
    if (l.bqkv != nullptr) RETURN_IF_ERROR(fill(l.bqkv, q + 2 * kv, 0.1f, 0.0f));
    if (l.q_norm != nullptr) {
      RETURN_IF_ERROR(fill(l.q_norm, c.head_dim, 0.1f, 1.0f));
      RETURN_IF_ERROR(fill(l.k_norm, c.head_dim, 0.1f, 1.0f));
    }
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "random weights"));
  return w;
}

}  // namespace pagoda::worker::cuda
