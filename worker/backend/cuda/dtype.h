// Element types of the CUDA backend's weights, activations and KV pages.
//
// Contract: host-visible (no CUDA headers), so plain C++ code and tests can name a dtype.
// Kernels map a DType to its CUDA type through dtype.cuh.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace pagoda::worker::cuda {

enum class DType { kBf16, kFp16 };

inline constexpr size_t DTypeSize(DType) { return 2; }
inline constexpr const char* DTypeName(DType d) { return d == DType::kBf16 ? "bf16" : "fp16"; }
// "bf16"/"bfloat16" or "fp16"/"float16"/"f16"; nullopt otherwise.
std::optional<DType> ParseDType(std::string_view name);

}  // namespace pagoda::worker::cuda
