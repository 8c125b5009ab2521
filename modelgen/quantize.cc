#include "modelgen/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fp16.h"

namespace pagoda::modelgen {

using common::F16ToFloat;
using common::FloatToF16;
using common::GgmlType;
using common::GgmlTypeName;
using common::GgmlTypeSizeOf;

namespace {

// Stores `v` as a half at `p`; returns the value the reader will see.
float PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToF16(v);
  std::memcpy(p, &h, 2);
  return F16ToFloat(h);
}

int RoundClamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

// The element of largest magnitude, with its sign.
float SignedMaxAbs(const float* x, int n) {
  float best = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  }
  return best;
}

void Q8_0Block(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = PutHalf(b, amax / 127.0f);
  auto* q = reinterpret_cast<int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<int8_t>(d == 0 ? 0 : RoundClamp(x[i] / d, -127, 127));
}

void Q4_0Block(const float* x, uint8_t* b) {
  const float d = PutHalf(b, SignedMaxAbs(x, 32) / -8.0f);
  uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int lo = d == 0 ? 8 : RoundClamp(x[j] / d + 8.0f, 0, 15);
    const int hi = d == 0 ? 8 : RoundClamp(x[j + 16] / d + 8.0f, 0, 15);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each; `levels` 15 or 31.
// Fills `q` with the per-element codes and writes d, dmin and the 12 packed scale bytes.
void KScalesAndCodes(const float* x, int levels, uint8_t* b, uint8_t* q) {
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    const float lo = std::min(0.0f, *std::min_element(s, s + 32));
    const float hi = *std::max_element(s, s + 32);
    scale[j] = (hi - lo) / static_cast<float>(levels);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  const float d = PutHalf(b, max_scale / 63.0f);
  const float dmin = PutHalf(b + 2, max_min / 63.0f);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d == 0 ? 0 : RoundClamp(scale[j] / d, 0, 63);
    m[j] = dmin == 0 ? 0 : RoundClamp(min[j] / dmin, 0, 63);
  }
  uint8_t* packed = b + 4;
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step = d * static_cast<float>(sc[j]), offset = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = x[32 * j + l];
      q[32 * j + l] =
          static_cast<uint8_t>(step == 0 ? 0 : RoundClamp((v + offset) / step, 0, levels));
    }
  }
}

void Q4_KBlock(const float* x, uint8_t* b) {
  uint8_t q[256];
  KScalesAndCodes(x, 15, b, q);
  uint8_t* qs = b + 16;
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l)
      qs[32 * k + l] = static_cast<uint8_t>(q[64 * k + l] | (q[64 * k + 32 + l] << 4));
  }
}

void Q5_KBlock(const float* x, uint8_t* b) {
  uint8_t q[256];
  KScalesAndCodes(x, 31, b, q);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * k + l], hi = q[64 * k + 32 + l];
      qs[32 * k + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with an int8 scale each, codes -32..31 stored as 6 bits.
void Q6_KBlock(const float* x, uint8_t* b) {
  float scale[16], max_abs = 0;
  for (int s = 0; s < 16; ++s) {
    scale[s] = SignedMaxAbs(x + 16 * s, 16) / -32.0f;
    max_abs = std::max(max_abs, std::fabs(scale[s]));
  }
  const float d = PutHalf(b + 208, max_abs / 127.0f);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[256];
  for (int s = 0; s < 16; ++s) {
    sc[s] = static_cast<int8_t>(d == 0 ? 0 : RoundClamp(scale[s] / d, -128, 127));
    const float step = d * static_cast<float>(sc[s]);
    for (int l = 0; l < 16; ++l) {
      q[16 * s + l] =
          static_cast<uint8_t>(step == 0 ? 32 : RoundClamp(x[16 * s + l] / step, -32, 31) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = q + 128 * h + l;  // elements l, l+32, l+64, l+96 of this half
      ql[64 * h + l] = static_cast<uint8_t>((e[0] & 15) | ((e[64] & 15) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((e[32] & 15) | ((e[96] & 15) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                            ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
    }
  }
}

using BlockFn = void (*)(const float*, uint8_t*);

BlockFn BlockEncoder(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return Q8_0Block;
    case GgmlType::Q4_0:
      return Q4_0Block;
    case GgmlType::Q4_K:
      return Q4_KBlock;
    case GgmlType::Q5_K:
      return Q5_KBlock;
    case GgmlType::Q6_K:
      return Q6_KBlock;
    default:
      return nullptr;
  }
}

}  // namespace

bool CanQuantize(GgmlType type) { return BlockEncoder(type) != nullptr; }

absl::StatusOr<std::vector<std::byte>> QuantizeRows(GgmlType type, std::span<const float> values,
                                                    int64_t row_len) {
  const BlockFn encode = BlockEncoder(type);
  const auto size = GgmlTypeSizeOf(type);
  if (encode == nullptr || !size.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot quantize to ", GgmlTypeName(type),
                                                   " (supported: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"));
  }
  if (row_len <= 0 || row_len % size->block_elems != 0 ||
      static_cast<int64_t>(values.size()) % row_len != 0) {
    return absl::InvalidArgumentError(absl::StrCat(GgmlTypeName(type), " rows of ", row_len,
                                                   " elements: the row length must be a multiple "
                                                   "of ",
                                                   size->block_elems));
  }
  const size_t blocks = values.size() / static_cast<size_t>(size->block_elems);
  std::vector<std::byte> out(blocks * static_cast<size_t>(size->block_bytes));
  for (size_t i = 0; i < blocks; ++i) {
    encode(values.data() + i * size->block_elems,
           reinterpret_cast<uint8_t*>(out.data()) + i * size->block_bytes);
  }
  return out;
}

}  // namespace pagoda::modelgen
