// modelgen/quantize writes blocks that the loader's dequantization (checked against llama.cpp's
// own values in quantized_model_test) reads back close to the input.
#include "modelgen/quantize.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::worker {
namespace {

using common::GgmlType;

// Relative RMS error of a quantize/dequantize round trip of normal values in rows of 512.
double RoundTripError(GgmlType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  constexpr int kRow = 512, kRows = 6;
  std::vector<float> x(kRow * kRows);
  for (float& v : x) v = normal(rng);
  x[7] = 0.9f;                                              // an outlier in the first block
  std::fill(x.begin() + kRow, x.begin() + 2 * kRow, 0.0f);  // an all-zero row
  auto bytes = modelgen::QuantizeRows(type, x, kRow);
  EXPECT_OK(bytes);
  if (!bytes.ok()) return 1e9;
  const size_t row_bytes = RowBytes(type, kRow);
  EXPECT_EQ(bytes->size(), row_bytes * kRows);
  std::vector<float> y(x.size());
  for (int r = 0; r < kRows; ++r) {
    DequantizeRowPortable(type, reinterpret_cast<const uint8_t*>(bytes->data()) + r * row_bytes,
                          kRow, y.data() + r * kRow);
  }
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - y[i]) * (x[i] - y[i]);
    norm += x[i] * x[i];
  }
  for (int i = kRow; i < 2 * kRow; ++i) EXPECT_EQ(y[i], 0.0f);
  return std::sqrt(err / norm);
}

TEST(Quantize, RoundTripsWithinTheTypesPrecision) {
  const std::pair<GgmlType, double> cases[] = {{GgmlType::Q8_0, 0.01},
                                               {GgmlType::Q6_K, 0.04},
                                               {GgmlType::Q5_K, 0.06},
                                               {GgmlType::Q4_K, 0.12},
                                               {GgmlType::Q4_0, 0.15}};
  for (const auto& [type, bound] : cases) {
    const double e = RoundTripError(type, 11);
    EXPECT_LT(e, bound) << common::GgmlTypeName(type);
    std::printf("%s relative RMS error %.4f\n", common::GgmlTypeName(type).c_str(), e);
    EXPECT_GT(e, 0.0) << common::GgmlTypeName(type);
  }
}

TEST(Quantize, RefusesWhatItCannotWrite) {
  std::vector<float> x(256, 1.0f);
  EXPECT_FALSE(modelgen::QuantizeRows(GgmlType::Q3_K, x, 256).ok());
  EXPECT_FALSE(modelgen::QuantizeRows(GgmlType::Q4_K, x, 128).ok());  // not whole blocks
  EXPECT_FALSE(modelgen::QuantizeRows(GgmlType::Q8_0, x, 48).ok());
  EXPECT_OK(modelgen::QuantizeRows(GgmlType::Q8_0, x, 32));
}

}  // namespace
}  // namespace pagoda::worker
