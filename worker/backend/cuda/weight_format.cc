#include "worker/backend/cuda/weight_format.h"

#include "common/gguf_reader.h"

namespace pagoda::worker::cuda {

std::optional<WeightFormat> QuantizedFormatOf(common::GgmlType type) {
  using common::GgmlType;
  switch (type) {
    case GgmlType::Q8_0:
      return WeightFormat::kQ8_0;
    case GgmlType::Q4_0:
      return WeightFormat::kQ4_0;
    case GgmlType::Q4_K:
      return WeightFormat::kQ4_K;
    case GgmlType::Q5_K:
      return WeightFormat::kQ5_K;
    case GgmlType::Q6_K:
      return WeightFormat::kQ6_K;
    default:
      return std::nullopt;
  }
}

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return "bf16/fp16";
    case WeightFormat::kQ8_0:
      return "Q8_0";
    case WeightFormat::kQ4_0:
      return "Q4_0";
    case WeightFormat::kQ4_K:
      return "Q4_K";
    case WeightFormat::kQ5_K:
      return "Q5_K";
    case WeightFormat::kQ6_K:
      return "Q6_K";
    case WeightFormat::kFp8:
      return "FP8 E4M3";
  }
  return "?";
}

int BlockElements(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
    case WeightFormat::kFp8:
      return 1;
    case WeightFormat::kQ8_0:
    case WeightFormat::kQ4_0:
      return 32;
    default:
      return 256;
  }
}

int BlockBytes(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return 2;
    case WeightFormat::kQ8_0:
      return 34;
    case WeightFormat::kQ4_0:
      return 18;
    case WeightFormat::kQ4_K:
      return 144;
    case WeightFormat::kQ5_K:
      return 176;
    case WeightFormat::kQ6_K:
      return 210;
    case WeightFormat::kFp8:
      return 1;
  }
  return 0;
}

size_t FormatRowBytes(WeightFormat f, int64_t cols) {
  return static_cast<size_t>(cols / BlockElements(f)) * static_cast<size_t>(BlockBytes(f));
}

}  // namespace pagoda::worker::cuda
