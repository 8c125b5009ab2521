#include "worker/backend/cuda/device_weights.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "absl/strings/str_format.h"
#include "common/fp16.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/quant/fp8_kernels.h"
#include "worker/backend/cuda/quant/quant_kernels.h"
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
                                                      const WeightFormats& formats, bool tied,
                                                      bool scaled_rope) {
  const ArchitectureTraits traits = TraitsOf(c);
  const int dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim, vocab = c.vocab_size;
  DeviceWeights w;
  w.config_ = c;
  w.dtype_ = dtype;
  // Two passes over the same carving: sizes first, then pointers into the allocation.
  Carver carver;
  auto matrix = [&](WeightFormat f, int rows, int cols) {
    DeviceMatrix m{nullptr, f, rows, cols, FormatRowBytes(f, cols)};
    m.data = carver.Take(m.bytes());
    return m;
  };
  // A projection of (format, rows) pieces over `cols` inputs, neighbours of one format merged.
  auto projection = [&](std::initializer_list<std::pair<WeightFormat, int>> pieces, int cols) {
    Projection p;
    p.n_in = cols;
    for (const auto& [format, rows] : pieces) {
      if (p.num_parts > 0 && p.parts[static_cast<size_t>(p.num_parts - 1)].format == format) {
        p.parts[static_cast<size_t>(p.num_parts - 1)].rows += rows;
      } else {
        p.parts[static_cast<size_t>(p.num_parts++)] = {nullptr, format, rows, cols,
                                                       FormatRowBytes(format, cols)};
      }
      p.n_out += rows;
    }
    for (int i = 0; i < p.num_parts; ++i) {
      DeviceMatrix& m = p.parts[static_cast<size_t>(i)];
      m.data = carver.Take(m.bytes());
      if (m.format == WeightFormat::kFp8) {
        m.row_scales = static_cast<const float*>(carver.Take(size_t(m.rows) * 4));
      }
    }
    return p;
  };
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      ASSIGN_OR_RETURN(w.buffer_, DeviceBuffer::Allocate(carver.used(), "the model weights"));
      carver.Reset(w.buffer_.get<char>());
    }
    w.layers_.assign(static_cast<size_t>(c.n_layers), DeviceLayer{});
    w.token_embd_ = matrix(formats.embedding, vocab, dim);
    w.output_norm_ = static_cast<const float*>(carver.Take(dim * 4));
    if (tied) {
      w.output_ = Projection{{w.token_embd_}, 1, vocab, dim};
    } else {
      w.output_ = projection({{formats.output, vocab}}, dim);
    }
    for (size_t i = 0; i < w.layers_.size(); ++i) {
      DeviceLayer& l = w.layers_[i];
      const std::array<WeightFormat, 7> f =
          formats.layers.empty() ? std::array<WeightFormat, 7>{} : formats.layers[i];
      l.attn_norm = static_cast<const float*>(carver.Take(dim * 4));
      l.wqkv = projection({{f[0], q}, {f[1], kv}, {f[2], kv}}, dim);
      l.wo = projection({{f[3], dim}}, q);
      l.ffn_norm = static_cast<const float*>(carver.Take(dim * 4));
      l.w_gate_up = projection({{f[4], ffn}, {f[5], ffn}}, dim);
      l.w_down = projection({{f[6], dim}}, ffn);
      if (traits.qkv_bias) l.bqkv = static_cast<const float*>(carver.Take((q + 2 * kv) * 4));
      if (traits.qk_norm) {
        l.q_norm = static_cast<const float*>(carver.Take(c.head_dim * 4));
        l.k_norm = static_cast<const float*>(carver.Take(c.head_dim * 4));
      }
    }
    w.rope_inv_freq_ =
        scaled_rope ? static_cast<const float*>(carver.Take(c.head_dim / 2 * 4)) : nullptr;
  }
  std::vector<const Projection*> all = {&w.output_};
  const Projection embedding{{w.token_embd_}, 1, vocab, dim};
  for (const Projection* p : {&embedding}) all.push_back(p);
  for (const DeviceLayer& l : w.layers_) {
    for (const Projection* p : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) all.push_back(p);
  }
  for (const Projection* p : all) {
    if (p != &embedding) w.step_bytes_ += p->bytes();
    for (int i = 0; i < p->num_parts; ++i) {
      const DeviceMatrix& m = p->parts[static_cast<size_t>(i)];
      if (p != &w.output_ || !tied) {
        w.bytes_by_format_[m.format] +=
            m.bytes() + (m.format == WeightFormat::kFp8 ? size_t(m.rows) * 4 : 0);
      }
      if (m.format == WeightFormat::kFp8) {
        w.fp8_max_rows_ = std::max(w.fp8_max_rows_, m.rows);
        w.fp8_max_cols_ = std::max(w.fp8_max_cols_, m.cols);
      }
      if (!IsBlockFormat(m.format)) continue;
      w.block_max_cols_ = std::max(w.block_max_cols_, m.cols);
      w.largest_quantized_dense_ =
          std::max(w.largest_quantized_dense_, size_t(m.rows) * size_t(m.cols) * DTypeSize(dtype));
    }
  }
  return w;
}

std::string DeviceWeights::FormatSummary() const {
  std::string out;
  for (const auto& [format, bytes] : bytes_by_format_) {
    absl::StrAppendFormat(
        &out, "%s%s %.1f MiB", out.empty() ? "" : ", ",
        format == WeightFormat::kDense ? DTypeName(dtype_) : WeightFormatName(format),
        static_cast<double>(bytes) / (1 << 20));
  }
  return out;
}

namespace {

// Rows of float32 values as E4M3 bytes with a scale per row: max|row| / 448 (1 for zeros).
absl::Status CopyFp8(char* dst, float* scales_dst, std::span<const float> values, int cols,
                     cudaStream_t stream) {
  const size_t rows = values.size() / static_cast<size_t>(cols);
  std::vector<uint8_t> bytes(values.size());
  std::vector<float> scales(rows);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = values.data() + r * cols;
    float amax = 0.0f;
    for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(row[i]));
    scales[r] = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    for (int i = 0; i < cols; ++i) {
      bytes[r * cols + i] = __nv_cvt_float_to_fp8(row[i] / scales[r], __NV_SATFINITE, __NV_E4M3);
    }
  }
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream), "upload"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(scales_dst, scales.data(), rows * 4, cudaMemcpyHostToDevice, stream),
      "upload"));
  return CudaStatus(cudaStreamSynchronize(stream), "upload");  // the vectors die here
}

// Copies `sources` (stacked along the output) into the projection's parts: kept blocks byte for
// byte, FP8 parts converted row by row, anything else as float32 converted to the dtype.
absl::Status UploadProjection(const Projection& p,
                              std::initializer_list<const WeightMatrix*> sources, DType dtype,
                              cudaStream_t stream) {
  int part = 0, row = 0;
  for (const WeightMatrix* m : sources) {
    const DeviceMatrix& d = p.parts[static_cast<size_t>(part)];
    char* dst = static_cast<char*>(const_cast<void*>(d.data)) + size_t(row) * d.row_bytes;
    if (d.format == WeightFormat::kDense) {
      RETURN_IF_ERROR(Copy(dst, m->ToFloat(), dtype, stream));
    } else if (d.format == WeightFormat::kFp8) {
      RETURN_IF_ERROR(
          CopyFp8(dst, const_cast<float*>(d.row_scales) + row, m->ToFloat(), m->cols, stream));
    } else {
      if (m->row_bytes != d.row_bytes) {
        return absl::InternalError(
            absl::StrFormat("a %s row of %d columns is %d bytes in the file, %d on the device",
                            WeightFormatName(d.format), m->cols, static_cast<int64_t>(m->row_bytes),
                            static_cast<int64_t>(d.row_bytes)));
      }
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(dst, m->bytes.data(), m->num_bytes(), cudaMemcpyHostToDevice, stream),
          "upload"));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "upload"));
    }
    row += m->rows;
    if (row == d.rows) {
      ++part;
      row = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceWeights> DeviceWeights::Upload(const LlamaModel& model, DType dtype,
                                                    bool keep_quantized, bool fp8,
                                                    cudaStream_t stream) {
  const common::ModelConfig& c = model.config();
  // `projection`: a layer's matrix, which fp8 converts (the embedding and classifier stay in
  // the dtype, as vLLM keeps its lm_head) when both its sizes are multiples of 16, as cuBLASLt's
  // FP8 kernels need (every real model's are).
  auto format = [&](const WeightMatrix& m, bool projection) {
    const std::optional<WeightFormat> f = QuantizedFormatOf(m.type);
    if (keep_quantized && f) return *f;
    const bool fp8_shape = m.rows % 16 == 0 && m.cols % 16 == 0;
    return fp8 && projection && fp8_shape ? WeightFormat::kFp8 : WeightFormat::kDense;
  };
  WeightFormats formats;
  formats.embedding = format(model.token_embedding(), false);
  formats.output = model.tied_output() ? formats.embedding : format(model.output(), false);
  for (int i = 0; i < c.n_layers; ++i) {
    const LlamaLayerWeights& l = model.layer(i);
    formats.layers.push_back({format(l.wq, true), format(l.wk, true), format(l.wv, true),
                              format(l.wo, true), format(l.w_gate, true), format(l.w_up, true),
                              format(l.w_down, true)});
  }
  ASSIGN_OR_RETURN(DeviceWeights w, Allocate(c, dtype, formats, model.tied_output(),
                                             !model.rope_inv_freq().empty()));
  if (w.rope_inv_freq_ != nullptr) {
    RETURN_IF_ERROR(CopyF32(w.rope_inv_freq_, model.rope_inv_freq(), stream));
  }
  const Projection embedding{{w.token_embd_}, 1, c.vocab_size, c.dim};
  RETURN_IF_ERROR(UploadProjection(embedding, {&model.token_embedding()}, dtype, stream));
  RETURN_IF_ERROR(CopyF32(w.output_norm_, model.output_norm(), stream));
  if (!model.tied_output()) {
    RETURN_IF_ERROR(UploadProjection(w.output_, {&model.output()}, dtype, stream));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const LlamaLayerWeights& src = model.layer(i);
    const DeviceLayer& dst = w.layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(CopyF32(dst.attn_norm, src.attn_norm, stream));
    RETURN_IF_ERROR(UploadProjection(dst.wqkv, {&src.wq, &src.wk, &src.wv}, dtype, stream));
    RETURN_IF_ERROR(UploadProjection(dst.wo, {&src.wo}, dtype, stream));
    RETURN_IF_ERROR(CopyF32(dst.ffn_norm, src.ffn_norm, stream));
    RETURN_IF_ERROR(UploadProjection(dst.w_gate_up, {&src.w_gate, &src.w_up}, dtype, stream));
    RETURN_IF_ERROR(UploadProjection(dst.w_down, {&src.w_down}, dtype, stream));
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
                                                    const WeightFormats& formats, uint64_t seed,
                                                    cudaStream_t stream) {
  if (!formats.layers.empty() && formats.layers.size() != static_cast<size_t>(c.n_layers)) {
    return absl::InvalidArgumentError("random weights: one format list per layer");
  }
  const std::vector<float> inv_freq = ScaledRopeInvFrequencies(c);
  ASSIGN_OR_RETURN(DeviceWeights w, Allocate(c, dtype, formats, /*tied=*/false, !inv_freq.empty()));
  if (w.rope_inv_freq_ != nullptr) RETURN_IF_ERROR(CopyF32(w.rope_inv_freq_, inv_freq, stream));
  const size_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim();
  uint64_t s = seed;
  // Uniform in [-a, a] (dense) or about as large (blocks), a^2 / 3 = 1 / n_in: unit-scale
  // activations through every projection.
  auto fill = [&](const DeviceMatrix& m, float amplitude) -> absl::Status {
    if (m.format == WeightFormat::kDense) {
      return LaunchFillRandom(const_cast<void*>(m.data), size_t(m.rows) * m.cols, dtype, amplitude,
                              ++s, stream);
    }
    if (m.format == WeightFormat::kFp8) {
      return LaunchFillRandomFp8(static_cast<uint8_t*>(const_cast<void*>(m.data)),
                                 const_cast<float*>(m.row_scales), m.rows, m.cols, amplitude, ++s,
                                 stream);
    }
    return LaunchFillRandomBlocks(m, amplitude, ++s, stream);
  };
  auto matrix = [&](const Projection& p) -> absl::Status {
    for (int i = 0; i < p.num_parts; ++i) {
      RETURN_IF_ERROR(
          fill(p.parts[static_cast<size_t>(i)], std::sqrt(3.0f / static_cast<float>(p.n_in))));
    }
    return absl::OkStatus();
  };
  auto norm = [&](const float* p) {
    return LaunchFillRandomF32(const_cast<float*>(p), dim, 0.1f, 1.0f, ++s, stream);
  };
  RETURN_IF_ERROR(fill(w.token_embd_, 1.0f));
  RETURN_IF_ERROR(norm(w.output_norm_));
  RETURN_IF_ERROR(matrix(w.output_));
  for (const DeviceLayer& l : w.layers_) {
    RETURN_IF_ERROR(norm(l.attn_norm));
    RETURN_IF_ERROR(matrix(l.wqkv));
    RETURN_IF_ERROR(matrix(l.wo));
    RETURN_IF_ERROR(norm(l.ffn_norm));
    RETURN_IF_ERROR(matrix(l.w_gate_up));
    RETURN_IF_ERROR(matrix(l.w_down));
    auto fill_f32 = [&](const float* p, size_t n, float scale, float offset) {
      return LaunchFillRandomF32(const_cast<float*>(p), n, scale, offset, ++s, stream);
    };
    if (l.bqkv != nullptr) RETURN_IF_ERROR(fill_f32(l.bqkv, q + 2 * kv, 0.1f, 0.0f));
    if (l.q_norm != nullptr) {
      RETURN_IF_ERROR(fill_f32(l.q_norm, c.head_dim, 0.1f, 1.0f));
      RETURN_IF_ERROR(fill_f32(l.k_norm, c.head_dim, 0.1f, 1.0f));
    }
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "random weights"));
  return w;
}

}  // namespace pagoda::worker::cuda
