// Activations quantized to 8 bits for the integer dot products of quantized weights.
//
// A product with a Q8_0, Q4_0, Q4_K, Q5_K or Q6_K weight does not decode the weight to float:
// each token's activations are quantized once per MatMul call (shared by the call's products
// of one weight type that read them, such as Q, K and V; the kernel table's
// quantize_activations: the same IEEE operations on every table, so every table writes the same
// bytes, which the tests check), the kernels sum weight x activation
// bytes exactly in int32, and only the block sums meet the float scales. This is the scheme
// llama.cpp uses on CPUs (its Q8_0 and Q8_K activation blocks), and what makes a quantized
// weight cheaper to apply than a float one.
//
// Record of one token (QuantizedActivationBytes(type, k) bytes, a whole number of cache lines):
//   kBlock32 (Q8_0, Q4_0 weights): bytes [0, k): q + 128 as unsigned bytes, q = round(x / d)
//     in [-127, 127] with d = max|x| / 127 per block of 32; then from byte RoundUp64(k), k / 4
//     floats: the d of the block of each group of 4 elements (the scale of a 32-bit lane of the
//     integer dot products, whatever the vector width).
//   kSuper256 (Q4_K, Q5_K, Q6_K weights): one 320-byte record per 256 elements:
//     [0, 256): q as signed bytes, d = max|x| / 127 over the 256, in the weight type's order
//       (Q6_K: natural; Q4_K/Q5_K: sub-blocks of 32 in the order 0 2 1 3 4 6 5 7, the order in
//       which the low and high nibbles of 64 packed bytes give them);
//     [256, 260): float d;  [272, 288): int16 sum of q per sub-block of 32 (natural order);
//     [288, 320): int16 sum of q per sub-block of 16 (natural order).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/gguf_reader.h"

namespace pagoda::worker::cpu {

enum class ActivationFormat { kNone, kBlock32, kSuper256 };

constexpr ActivationFormat ActivationFormatFor(common::GgmlType type) {
  switch (type) {
    case common::GgmlType::Q8_0:
    case common::GgmlType::Q4_0:
      return ActivationFormat::kBlock32;
    case common::GgmlType::Q4_K:
    case common::GgmlType::Q5_K:
    case common::GgmlType::Q6_K:
      return ActivationFormat::kSuper256;
    default:
      return ActivationFormat::kNone;
  }
}

// Bytes of one weight block (32 elements for kBlock32 types, 256 for kSuper256 ones).
constexpr size_t QuantBlockBytes(common::GgmlType type) {
  switch (type) {
    case common::GgmlType::Q8_0:
      return 34;
    case common::GgmlType::Q4_0:
      return 18;
    case common::GgmlType::Q4_K:
      return 144;
    case common::GgmlType::Q5_K:
      return 176;
    case common::GgmlType::Q6_K:
      return 210;
    default:
      return 0;
  }
}

inline constexpr size_t kSuperRecordBytes = 320;
inline constexpr size_t kSuperScaleOffset = 256;
inline constexpr size_t kSuperSums32Offset = 272;
inline constexpr size_t kSuperSums16Offset = 288;

constexpr size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

// Where the group scales of a kBlock32 record start.
constexpr size_t Block32ScaleOffset(int k) { return RoundUp64(static_cast<size_t>(k)); }

// Bytes of one token's record for weights of `type` over rows of k elements (0 for the float
// types, which multiply float activations).
constexpr size_t QuantizedActivationBytes(common::GgmlType type, int k) {
  switch (ActivationFormatFor(type)) {
    case ActivationFormat::kBlock32:
      return Block32ScaleOffset(k) + RoundUp64(static_cast<size_t>(k));  // k / 4 floats
    case ActivationFormat::kSuper256:
      return static_cast<size_t>(k) / 256 * kSuperRecordBytes;
    default:
      return 0;
  }
}

// Position, within a Q4_K/Q5_K super-block record, of sub-block j's 32 bytes (its own inverse).
constexpr int KQuantSlot(int j) { return (j & 4) | ((j & 1) << 1) | ((j >> 1) & 1); }

}  // namespace pagoda::worker::cpu
