// Float32 -> ggml block formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), for writing quantized GGUF files
// (pagoda-make-model, tests).
//
// Contract: QuantizeRows encodes `values` as rows of `row_len` elements (row_len a multiple of the
// type's block: 32 for Q8_0/Q4_0, 256 for the K types) in exactly the byte layout llama.cpp reads.
// The scales are chosen simply (block min/max or max-abs, no search), so files are valid and
// close to the input, not bit-identical to llama-quantize's output. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"

namespace pagoda::modelgen {

// True for the types QuantizeRows can write.
bool CanQuantize(common::GgmlType type);

// InvalidArgument when the type cannot be written or row_len does not fit its blocks.
absl::StatusOr<std::vector<std::byte>> QuantizeRows(common::GgmlType type,
                                                    std::span<const float> values, int64_t row_len);

}  // namespace pagoda::modelgen
