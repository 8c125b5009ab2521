#include "worker/backend/cuda/dtype.h"

namespace pagoda::worker::cuda {

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  if (name == "fp16" || name == "float16" || name == "f16") return DType::kFp16;
  return std::nullopt;
}

}  // namespace pagoda::worker::cuda
