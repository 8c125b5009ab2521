// Every kernel table this CPU supports against the portable one, on fresh random inputs with
// poisoned outputs, for each weight type; and batch invariance within each table. The tests are
// parameterized by the table under test (and a weight type), named like
// CpuKernels/SimdTableAndType.MatMulMatchesPortableForEveryType/Avx512Vnni_Q4_K, and skipped
// where this CPU (or OS) lacks the table's instructions.
#include "worker/backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "gtest/gtest.h"
#include "modelgen/quantize.h"
#include "tests/support/status_assertions.h"
#include "tests/worker/param_printers.h"
#include "worker/backend/cpu/thread_pool.h"

namespace pagoda::worker::cpu {
namespace {

using common::GgmlType;

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                               GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
constexpr GgmlType kFloatTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16};
constexpr GgmlType kQuantizedTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K,
                                        GgmlType::Q5_K, GgmlType::Q6_K};
// Every kernel table, and the SIMD ones (the portable one is their reference).
constexpr CpuIsa kIsas[] = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                            CpuIsa::kAvx512Amx};
constexpr CpuIsa kSimdIsas[] = {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                                CpuIsa::kAvx512Amx};
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// An instruction set as test names spell it ("Avx512Vnni").
std::string IsaLabel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "Portable";
    case CpuIsa::kAvx2:
      return "Avx2";
    case CpuIsa::kAvx512:
      return "Avx512";
    case CpuIsa::kAvx512Vnni:
      return "Avx512Vnni";
    case CpuIsa::kAvx512Amx:
      return "Avx512Amx";
  }
  return "Unknown";
}

// The parameters' part of a test's name: "Avx512Vnni", "Avx512Vnni_Q4_K".
struct ParamName {
  std::string operator()(const ::testing::TestParamInfo<CpuIsa>& info) const {
    return IsaLabel(info.param);
  }
  std::string operator()(const ::testing::TestParamInfo<std::tuple<CpuIsa, GgmlType>>& info) const {
    return IsaLabel(std::get<0>(info.param)) + "_" + common::GgmlTypeName(std::get<1>(info.param));
  }
};

// Tests of one kernel table (the parameter), skipped where this CPU (or OS) lacks its
// instruction set. A test comparing tables takes the one under test as its parameter.
class TableTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!IsaSupported(isa())) {
      GTEST_SKIP() << "this CPU (or OS) lacks the instructions of the " << CpuIsaName(isa())
                   << " kernel table";
    }
  }
  CpuIsa isa() const { return GetParam(); }
};

// Tests of one kernel table with one weight type, skipped as TableTest.
class TableAndTypeTest : public ::testing::TestWithParam<std::tuple<CpuIsa, GgmlType>> {
 protected:
  void SetUp() override {
    if (!IsaSupported(isa())) {
      GTEST_SKIP() << "this CPU (or OS) lacks the instructions of the " << CpuIsaName(isa())
                   << " kernel table";
    }
  }
  CpuIsa isa() const { return std::get<0>(GetParam()); }
  GgmlType type() const { return std::get<1>(GetParam()); }
};

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// A rows x cols matrix of random values stored as `type`.
WeightMatrix RandomMatrix(GgmlType type, int rows, int cols, uint32_t seed) {
  const std::vector<float> values = RandomFloats(static_cast<size_t>(rows) * cols, seed, 0.1f);
  WeightMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = RowBytes(type, cols);
  m.bytes.resize(m.row_bytes * rows);
  if (type == GgmlType::F32) {
    std::memcpy(m.bytes.data(), values.data(), m.bytes.size());
  } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h =
          type == GgmlType::F16 ? common::FloatToF16(values[i]) : common::FloatToBf16(values[i]);
      std::memcpy(m.bytes.data() + 2 * i, &h, 2);
    }
  } else {
    auto q = modelgen::QuantizeRows(type, values, cols);
    EXPECT_OK(q);
    std::memcpy(m.bytes.data(), q->data(), m.bytes.size());
  }
  return m;
}

// Row length for `type`: whole blocks, and for the float types a length with a SIMD tail. Seven
// blocks of 32: the one-token Q4_0 kernel takes four blocks a step, then a pair, then one.
int ColsFor(GgmlType type) {
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) return 77;
  return common::GgmlTypeSizeOf(type)->block_elems == 256 ? 512 : 32 * 7;
}

std::vector<float> RunMatMul(CpuIsa isa, int threads, const WeightMatrix& w,
                             const std::vector<float>& x, int tokens) {
  LocalContext ctx(isa, threads);
  std::vector<float> out(static_cast<size_t>(tokens) * w.rows, kPoison);
  const MatMulParams p[] = {{x.data(), &w, out.data(), tokens}};
  MatMul(ctx.get(), p);
  return out;
}

// ---- Each SIMD table against the portable one, per weight type ----

class SimdTableAndType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, SimdTableAndType,
                         ::testing::Combine(::testing::ValuesIn(kSimdIsas),
                                            ::testing::ValuesIn(kTypes)),
                         ParamName());

TEST_P(SimdTableAndType, DequantizationIsTheSameOnEveryPath) {
  const WeightMatrix w = RandomMatrix(type(), 3, ColsFor(type()), 1);
  const std::vector<float> ref = w.ToFloat();
  std::vector<float> got(ref.size(), kPoison);
  for (int r = 0; r < w.rows; ++r) {
    Kernels(isa()).dequantize_row(type(), w.row(r), w.cols, got.data() + r * w.cols);
  }
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0);
}

TEST_P(SimdTableAndType, MatMulMatchesPortableForEveryType) {
  constexpr int kTokens = 13, kRows = 37;  // neither a multiple of any tile
  const WeightMatrix w = RandomMatrix(type(), kRows, ColsFor(type()), 2);
  const std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens) * w.cols, 3);
  const std::vector<float> ref = RunMatMul(CpuIsa::kPortable, 1, w, x, kTokens);
  const std::vector<float> dense = w.ToFloat();
  const std::vector<float> got = RunMatMul(isa(), 2, w, x, kTokens);
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) {
      double magnitude = 0;  // sum |w||x|: the scale of the rounding error
      for (int k = 0; k < w.cols; ++k) {
        magnitude += std::fabs(dense[r * w.cols + k] * x[t * w.cols + k]);
      }
      const size_t i = static_cast<size_t>(t) * kRows + r;
      ASSERT_FALSE(std::isnan(got[i])) << "output " << i << " not written";
      ASSERT_NEAR(got[i], ref[i], 1e-5 * magnitude + 1e-7) << "token " << t << " row " << r;
    }
  }
}

// Quantized weights multiply 8-bit activations: on every table the result is within the
// activations' rounding of the exact product of the decoded weights and the float activations:
// |error| <= sum_k |w_k| * d_k / 2 (d_k: the quantization step of x_k's block) plus float
// rounding. Blocks of 32 with an odd count of them (the SIMD tables pair them), rows and tokens
// that fill no tile, and one token of large activations beside small ones.
class TableAndQuantizedType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, TableAndQuantizedType,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::ValuesIn(kQuantizedTypes)),
                         ParamName());

TEST_P(TableAndQuantizedType, QuantizedProductsStayWithinTheActivationRounding) {
  constexpr int kTokens = 7, kRows = 13;
  const size_t block = common::GgmlTypeSizeOf(type())->block_elems;
  const int cols = block == 256 ? 768 : 32 * 7;
  const WeightMatrix w = RandomMatrix(type(), kRows, cols, 20);
  const std::vector<float> dense = w.ToFloat();
  std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens) * cols, 21);
  for (int k = 0; k < cols; ++k) x[3 * cols + k] *= 1000.0f;
  const std::vector<float> got = RunMatMul(isa(), 2, w, x, kTokens);
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) {
      double exact = 0, bound = 0, magnitude = 0;
      for (size_t b = 0; b < cols / block; ++b) {
        double amax = 0;
        for (size_t k = b * block; k < (b + 1) * block; ++k) {
          amax = std::max(amax, std::fabs(static_cast<double>(x[t * cols + k])));
        }
        for (size_t k = b * block; k < (b + 1) * block; ++k) {
          const double wk = dense[r * cols + k], xk = x[t * cols + k];
          exact += wk * xk;
          bound += std::fabs(wk) * amax / 127.0 / 2.0;
          magnitude += std::fabs(wk * xk);
        }
      }
      const float value = got[static_cast<size_t>(t) * kRows + r];
      ASSERT_FALSE(std::isnan(value)) << "token " << t << " row " << r << " not written";
      ASSERT_NEAR(value, exact, bound * 1.001 + 1e-5 * magnitude) << "token " << t << " row " << r;
    }
  }
}

// Every table quantizes activations to the same bytes (records of quantized_activations.h),
// blocks with a NaN or an infinity included.
class SimdTableAndQuantizedType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, SimdTableAndQuantizedType,
                         ::testing::Combine(::testing::ValuesIn(kSimdIsas),
                                            ::testing::ValuesIn(kQuantizedTypes)),
                         ParamName());

TEST_P(SimdTableAndQuantizedType, QuantizedActivationsAreTheSameBytesOnEveryPath) {
  constexpr int kCols = 1024;
  std::vector<float> x = RandomFloats(kCols, 30);
  for (int k = 0; k < 300; ++k) x[k] *= 50.0f;
  x[400] = std::numeric_limits<float>::quiet_NaN();
  x[700] = -std::numeric_limits<float>::infinity();
  std::fill(x.begin() + 800, x.begin() + 832, 0.0f);  // an all-zero block
  const size_t bytes = QuantizedActivationBytes(type(), kCols);
  std::vector<uint8_t> ref(bytes, 0xAB);
  Kernels(CpuIsa::kPortable).quantize_activations(type(), x.data(), kCols, ref.data());
  std::vector<uint8_t> got(bytes, 0xAB);
  Kernels(isa()).quantize_activations(type(), x.data(), kCols, got.data());
  // Padding bytes of a kBlock32 record are never read; compare the rest.
  for (size_t i = 0; i < bytes; ++i) {
    const bool padding = ActivationFormatFor(type()) == ActivationFormat::kBlock32 &&
                         i >= Block32ScaleOffset(kCols) + kCols;
    if (!padding) {
      ASSERT_EQ(got[i], ref[i]) << "byte " << i;
    }
  }
}

// ---- Batch invariance within each table ----

// A token's outputs are the same bits alone, in a batch, at any place in it, on any thread count.
class TableAndType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, TableAndType,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::ValuesIn(kTypes)),
                         ParamName());

TEST_P(TableAndType, MatMulIsBatchInvariantOnEveryPath) {
  constexpr int kTokens = 23, kRows = 29;
  const WeightMatrix w = RandomMatrix(type(), kRows, ColsFor(type()), 4);
  const std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens) * w.cols, 5);
  const std::vector<float> all = RunMatMul(isa(), 2, w, x, kTokens);
  for (int t : {0, 5, 17, kTokens - 1}) {
    const std::vector<float> one(x.begin() + t * w.cols, x.begin() + (t + 1) * w.cols);
    const std::vector<float> alone = RunMatMul(isa(), 1, w, one, 1);
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + t * kRows, kRows * 4), 0) << t;
    // The same token as the 3rd of a batch of 4.
    std::vector<float> four = RandomFloats(4 * static_cast<size_t>(w.cols), 6 + t);
    std::copy(one.begin(), one.end(), four.begin() + 2 * w.cols);
    const std::vector<float> in_four = RunMatMul(isa(), 2, w, four, 4);
    EXPECT_EQ(std::memcmp(in_four.data() + 2 * kRows, all.data() + t * kRows, kRows * 4), 0);
  }
}

// The VNNI and AMX tables compute the same exact integer sums of quantized products and fold
// them with the same float steps (quant_products_avx512.inc), whether on tiles or by VNNI
// groups or one token at a time: the same bits, for every quantized type and batch size. The
// table under test is the AMX one.
class AmxTableAndQuantizedType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, AmxTableAndQuantizedType,
                         ::testing::Combine(::testing::Values(CpuIsa::kAvx512Amx),
                                            ::testing::ValuesIn(kQuantizedTypes)),
                         ParamName());

TEST_P(AmxTableAndQuantizedType, QuantizedProductsAreTheSameBitsOnVnniAndAmx) {
  constexpr int kRows = 29, kCols = 2304;  // blocks and super-blocks across two slabs
  const WeightMatrix w = RandomMatrix(type(), kRows, kCols, 20);
  for (int tokens : {1, 3, 16, 21}) {
    SCOPED_TRACE(absl::StrCat("tokens ", tokens));
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * kCols, 21);
    const std::vector<float> vnni = RunMatMul(CpuIsa::kAvx512Vnni, 2, w, x, tokens);
    const std::vector<float> amx = RunMatMul(isa(), 2, w, x, tokens);
    EXPECT_EQ(std::memcmp(vnni.data(), amx.data(), vnni.size() * 4), 0);
  }
}

// Batches longer than one token chunk (64 tokens for rows of 4096) give the same bits too, and
// (BF16 on the AMX table) rows longer than one slab of weight tiles, in several groups.
class TableAndLongRowType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, TableAndLongRowType,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::Values(GgmlType::F32, GgmlType::F16,
                                                              GgmlType::BF16, GgmlType::Q8_0,
                                                              GgmlType::Q4_K)),
                         ParamName());

TEST_P(TableAndLongRowType, MatMulAcrossTokenChunksIsBatchInvariant) {
  constexpr int kTokens = 70, kRows = 9, kCols = 4096;
  const WeightMatrix w = RandomMatrix(type(), kRows, kCols, 12);
  const std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens) * kCols, 13);
  const std::vector<float> all = RunMatMul(isa(), 2, w, x, kTokens);
  for (int t : {3, 66}) {
    const std::vector<float> one(x.begin() + t * kCols, x.begin() + (t + 1) * kCols);
    const std::vector<float> alone = RunMatMul(isa(), 1, w, one, 1);
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + t * kRows, kRows * 4), 0) << t;
  }
}

// ---- Each table on its own ----

class Table : public TableTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, Table, ::testing::ValuesIn(kIsas), ParamName());

// One MatMul call of several products (a layer's Q, K and V; gate and up): those that read the
// same activations with the same weight type share one quantization and packing of them. Every
// product's outputs are the bits of a call of that product alone, whether it shares (Q8_0 after
// Q8_0, Q4_K after Q4_K) or not (another type, other activations, another token count).
TEST_P(Table, ProductsOfOneCallGiveTheBitsOfSeparateCalls) {
  constexpr int kTokens = 21, kCols = 512;
  const std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens) * kCols, 16);
  const std::vector<float> other = RandomFloats(static_cast<size_t>(kTokens) * kCols, 17);
  struct Product {
    GgmlType type;
    int rows;
    const std::vector<float>* x;
    int tokens;
  };
  const Product shapes[] = {{GgmlType::Q8_0, 24, &x, kTokens}, {GgmlType::Q8_0, 9, &x, kTokens},
                            {GgmlType::Q4_K, 16, &x, kTokens}, {GgmlType::Q6_K, 8, &x, kTokens},
                            {GgmlType::Q4_K, 11, &x, kTokens}, {GgmlType::Q8_0, 8, &other, kTokens},
                            {GgmlType::Q8_0, 7, &x, 5},        {GgmlType::F16, 10, &x, kTokens}};
  std::vector<WeightMatrix> weights;
  for (size_t j = 0; j < std::size(shapes); ++j) {
    weights.push_back(RandomMatrix(shapes[j].type, shapes[j].rows, kCols, 20 + j));
  }
  std::vector<std::vector<float>> outs;
  std::vector<MatMulParams> params;
  for (size_t j = 0; j < std::size(shapes); ++j) {
    outs.emplace_back(static_cast<size_t>(shapes[j].tokens) * shapes[j].rows, kPoison);
  }
  for (size_t j = 0; j < std::size(shapes); ++j) {
    params.push_back({shapes[j].x->data(), &weights[j], outs[j].data(), shapes[j].tokens});
  }
  LocalContext ctx(isa(), 2);
  MatMul(ctx.get(), params);
  for (size_t j = 0; j < std::size(shapes); ++j) {
    const std::vector<float> alone =
        RunMatMul(isa(), 2, weights[j], *shapes[j].x, shapes[j].tokens);
    EXPECT_EQ(std::memcmp(alone.data(), outs[j].data(), alone.size() * 4), 0)
        << "product " << j << " (" << common::GgmlTypeName(shapes[j].type) << ")";
  }
}

// MatMul splits rows longer than kKBlock (kOneTokenKBlock for one token) into column blocks,
// carrying each output's lane sums from block to block, or (tables with float_gemv, one token)
// reads the float weights in place, a cache line at a time: the bits equal one pass of the
// table's panel kernel over the whole decoded row, on every table, with a last line of one
// 16-element step and a tail that is not a multiple of the lane count.
class TableAndFloatType : public TableAndTypeTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, TableAndFloatType,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::ValuesIn(kFloatTypes)),
                         ParamName());

TEST_P(TableAndFloatType, ColumnBlocksGiveTheBitsOfOnePass) {
  constexpr int kRows = 11, kCols = 2 * kKBlock + 53;
  static_assert(kCols > 3 * kOneTokenKBlock && kCols % 32 > 16);
  if (type() == GgmlType::BF16 && Kernels(isa()).float_gemm_panel != nullptr) {
    GTEST_SKIP() << "this table multiplies BF16 weights on its own tiles (float_gemm_panel), "
                    "not by gemm_panel";
  }
  const WeightMatrix w = RandomMatrix(type(), kRows, kCols, 14);
  const std::vector<float> dense = w.ToFloat();
  for (const int tokens : {1, 7}) {
    SCOPED_TRACE(absl::StrCat(tokens, " tokens"));
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * kCols, 15);
    const std::vector<float> blocked = RunMatMul(isa(), 2, w, x, tokens);
    std::vector<float> one_pass(static_cast<size_t>(tokens) * kRows, kPoison);
    Kernels(isa()).gemm_panel({x.data(), dense.data(), one_pass.data(), nullptr, tokens, kRows,
                               kCols, kCols, kCols, kRows, /*resume=*/false, /*finish=*/true});
    EXPECT_EQ(std::memcmp(blocked.data(), one_pass.data(), blocked.size() * 4), 0);
  }
}

// The KV cache's F16 values of x (kv_arena.h).
std::vector<uint16_t> Halves(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = common::FloatToF16(x[i]);
  return h;
}

// Every table writes the KV cache's halves as common::FloatToF16 does (round to nearest even),
// bit for bit: normal values, halves' subnormals and the smallest of them, values that overflow
// to infinity, ties, infinities and signed zeros, in rows with a SIMD tail; and WriteKv puts
// each token's row in its page slot.
TEST_P(Table, KvCacheHalvesAreTheSameOnEveryPath) {
  std::vector<float> x = RandomFloats(77, 18);
  const std::vector<float> tiny = RandomFloats(77, 19, 1e-5f);  // many F16 subnormals
  x.insert(x.end(), tiny.begin(), tiny.end());
  for (float f :
       {65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1.0f + 1.0f / 2048,
        1.0f + 3.0f / 2048, 0.0f, -0.0f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()}) {
    x.push_back(f);
  }
  const std::vector<uint16_t> ref = Halves(x);
  std::vector<uint16_t> got(x.size(), 0xABCD);
  Kernels(isa()).float_to_half(x.data(), x.size(), got.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], ref[i]) << "value " << x[i];
  // Two tokens of one sequence (pages 2 then 0, slots of 3 values) at positions 4 and 1.
  constexpr int kPageSize = 2, kDim = 3;
  const std::vector<float> k = RandomFloats(2 * kDim, 20), v = RandomFloats(2 * kDim, 21);
  const int32_t positions[] = {4, 1}, pages[] = {2, 0, 1};
  const int32_t* tables[] = {pages, pages};
  std::vector<uint16_t> kc(3 * kPageSize * kDim, 0xABCD), vc = kc;
  LocalContext ctx(isa(), 1);
  WriteKv(ctx.get(),
          {k.data(), v.data(), positions, tables, kc.data(), vc.data(), 2, kDim, kPageSize});
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(kc[(1 * kPageSize + 0) * kDim + d], common::FloatToF16(k[d]));  // page 1 slot 0
    EXPECT_EQ(vc[(1 * kPageSize + 0) * kDim + d], common::FloatToF16(v[d]));
    EXPECT_EQ(kc[(2 * kPageSize + 1) * kDim + d], common::FloatToF16(k[kDim + d]));  // 2, 1
    EXPECT_EQ(vc[(2 * kPageSize + 1) * kDim + d], common::FloatToF16(v[kDim + d]));
  }
  EXPECT_EQ(kc[0], 0xABCD);  // page 0 untouched
}

// Three shapes: small pages (several per 16-position block) and a head_dim of 64; pages of 16,
// a head_dim with an AVX-512 tail (72), contexts of several 256-position passes, and larger
// scores (a peakier softmax, whose running maximum moves); a head_dim with a tail on every
// table (36: 4 past the last 8 or 16, whose F16 cache values the AVX2 kernel copies out).
class SimdTable : public TableTest {};
INSTANTIATE_TEST_SUITE_P(CpuKernels, SimdTable, ::testing::ValuesIn(kSimdIsas), ParamName());

TEST_P(SimdTable, AttentionNormsAndActivationsMatchPortable) {
  struct Shape {
    int hd, page_size;
    float scale;
    std::vector<int32_t> positions;
  };
  const Shape shapes[] = {{64, 4, 0.125f, {0, 3, 17, 30, 44}},
                          {72, 16, 0.5f, {0, 15, 16, 300, 700}},
                          {36, 8, 0.3f, {0, 9, 40}}};
  for (const Shape& shape : shapes) {
    constexpr int kHeads = 4, kKvHeads = 2;
    const int kTokens = static_cast<int>(shape.positions.size()), kHd = shape.hd;
    const int kPages = shape.positions.back() / shape.page_size + 1;
    const size_t kv = static_cast<size_t>(kKvHeads) * kHd;
    const std::vector<float> q = RandomFloats(kTokens * kHeads * kHd, 7);
    const std::vector<uint16_t> kc = Halves(RandomFloats(kPages * shape.page_size * kv, 8));
    const std::vector<uint16_t> vc = Halves(RandomFloats(kPages * shape.page_size * kv, 9));
    std::vector<int32_t> table(kPages);
    std::iota(table.rbegin(), table.rend(), 0);  // pages in reverse order
    const std::vector<const int32_t*> tables(kTokens, table.data());
    const std::vector<float> norm_w = RandomFloats(kHeads * kHd, 10);
    // Up to +-30 or so: silu's exp over a wide range.
    const std::vector<float> up = RandomFloats(kTokens * kHeads * kHd, 11, 10.0f);
    auto run = [&](CpuIsa isa) {
      LocalContext ctx(isa, 2);
      std::vector<float> att(q.size(), kPoison), norm(q.size(), kPoison), act = up, sum = q;
      PagedAttention(ctx.get(),
                     {q.data(), kc.data(), vc.data(), shape.positions.data(), tables.data(),
                      att.data(), kTokens, kHeads, kKvHeads, kHd, shape.page_size, shape.scale});
      RmsNorm(ctx.get(), {q.data(), norm_w.data(), norm.data(), kTokens, kHeads * kHd, 1e-5f});
      SwiGlu(ctx.get(), act.data(), q.data(), kTokens, kHeads * kHd);
      AddInPlace(ctx.get(), sum.data(), up.data(), kTokens, kHeads * kHd);
      return std::vector<std::vector<float>>{att, norm, act, sum};
    };
    const auto ref = run(CpuIsa::kPortable);
    const auto got = run(isa());
    for (size_t k = 0; k < ref.size(); ++k) {
      for (size_t i = 0; i < ref[k].size(); ++i) {
        ASSERT_FALSE(std::isnan(got[k][i]))
            << "head_dim " << kHd << " output " << k << "[" << i << "]";
        ASSERT_NEAR(got[k][i], ref[k][i], 2e-5 * (1 + std::fabs(ref[k][i])))
            << "head_dim " << kHd << " output " << k << "[" << i << "]";
      }
    }
  }
}

TEST(ThreadPool, CoversEveryIndexOnceEveryTime) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      const int n = round % 17;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, [&](int begin, int end, int thread) {
        EXPECT_LT(begin, end);
        EXPECT_LT(thread, threads);
        for (int i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
    }
  }
}

// A thread held up inside one part (preempted, in production) delays the loop by that part
// only: the other threads take the rest.
TEST(ThreadPool, FreeThreadsTakeTheRemainingParts) {
  ThreadPool pool(2);
  constexpr int kN = 8;  // 8 parts of 1 index
  std::atomic<int> by_caller{0};
  std::atomic<bool> stalled{false};
  pool.ParallelFor(kN, [&](int begin, int end, int thread) {
    if (thread != 0) {  // the helper's first part stalls
      if (!stalled.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return;
    }
    // The caller starts once the helper holds its part (or after 5 s, failing below).
    for (int i = 0; i < 5000 && !stalled.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    by_caller += end - begin;
  });
  ASSERT_TRUE(stalled.load()) << "the helper never ran a part";
  EXPECT_EQ(by_caller.load(), kN - 1);  // everything but the helper's stalled part
}

TEST(ThreadPool, HelpersSleepBetweenCalls) {
  ThreadPool pool(2);
  std::atomic<int> calls{0};
  pool.ParallelFor(2, [&](int, int, int) { calls++; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin window
  pool.ParallelFor(2, [&](int, int, int) { calls++; });        // a sleeping helper is woken
  EXPECT_EQ(calls.load(), 4);
}

TEST(KernelTable, ResolvesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(ResolveCpuIsa("portable").value(), CpuIsa::kPortable);
  EXPECT_EQ(ResolveCpuIsa("auto").value(), BestSupportedIsa());
  EXPECT_EQ(ResolveCpuIsa("").value(), BestSupportedIsa());
  auto bad = ResolveCpuIsa("sse9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, portable, avx2, avx512"), std::string::npos);
}

// Each table's name resolves to it where the CPU supports it, and is refused elsewhere (not
// skipped: the refusal is what is tested there).
class TableName : public ::testing::TestWithParam<CpuIsa> {};
INSTANTIATE_TEST_SUITE_P(KernelTable, TableName, ::testing::ValuesIn(kIsas), ParamName());

TEST_P(TableName, ResolvesWhereSupported) {
  const auto resolved = ResolveCpuIsa(CpuIsaName(GetParam()));
  EXPECT_EQ(resolved.ok(), IsaSupported(GetParam())) << resolved.status();
  if (resolved.ok()) {
    EXPECT_EQ(*resolved, GetParam());
  }
}

}  // namespace
}  // namespace pagoda::worker::cpu
