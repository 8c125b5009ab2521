// The kernels over GGUF blocks kept on the device (quant/quant_kernels.h) against the CPU's
// dequantization (DequantizeRowPortable, itself checked against llama.cpp's values in
// quantized_model_test): the fused product for 1-8 tokens and the tensor-core product, plain and
// accumulating into a column range of a wider output, and the row decoder to float32 (with a
// gather) and to the dtype. Blocks are random bytes with finite random scales, so every bit of
// every field is exercised. Then the FP8 path (quant/fp8_kernels.h, fp8_gemm.h) against
// cuda_fp8.h's conversions on the host. Outputs are poisoned (NaN) first: a slot a kernel must
// not write stays NaN.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "common/gguf_reader.h"
#include "common/status_macros.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/status_assertions.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/fp8_gemm.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/backend/cuda/quant/fp8_kernels.h"
#include "worker/backend/cuda/quant/quant_kernels.h"
#include "worker/backend/cuda/weight_format.h"
#include "worker/backend/cuda/weight_products.h"
#include "worker/model/weight_matrix.h"

namespace pagoda::common {
void PrintTo(GgmlType type, std::ostream* os) { *os << GgmlTypeName(type); }
}  // namespace pagoda::common

namespace pagoda::worker::cuda {
namespace {

using common::GgmlType;

constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K,
                               GgmlType::Q6_K};

// Offsets of the half-precision scales inside one block of `type`.
std::vector<int> HalfOffsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {0};
  }
}

// A quantized [rows][cols] matrix of random bytes whose half scales are finite, in [-s, s].
struct HostMatrix {
  GgmlType type;
  WeightFormat format;
  int rows, cols;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // the CPU's dequantization, [rows][cols]
};

HostMatrix RandomMatrix(GgmlType type, int rows, int cols, std::mt19937& rng) {
  HostMatrix m{type, *QuantizedFormatOf(type), rows, cols, RowBytes(type, cols), {}, {}};
  const int block_bytes = BlockBytes(m.format);
  m.bytes.resize(size_t(rows) * m.row_bytes);
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (size_t at = 0; at < m.bytes.size(); at += static_cast<size_t>(block_bytes)) {
    for (int off : HalfOffsets(type)) {
      const uint16_t h = common::FloatToF16(scale(rng));
      std::memcpy(&m.bytes[at + static_cast<size_t>(off)], &h, 2);
    }
  }
  m.values.resize(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    DequantizeRowPortable(type, m.bytes.data() + size_t(r) * m.row_bytes, cols,
                          m.values.data() + size_t(r) * cols);
  }
  return m;
}

// Relative precision of one rounding to the dtype (half an ulp at 1.0).
double Eps(DType d) { return d == DType::kBf16 ? 1.0 / 256 : 1.0 / 2048; }

DeviceMatrix OnDevice(const HostMatrix& m, const DeviceArray& d) {
  return {d.get(), m.format, m.rows, m.cols, m.row_bytes};
}

class QuantKernelsTest : public ::testing::TestWithParam<std::tuple<GgmlType, DType>> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
};

// A product's output: `tokens` rows of ld floats, NaN (poison) but for columns [first,
// first + rows), which hold values from `normal` when the product accumulates onto them.
std::vector<float> PoisonedOutput(int tokens, int ld, int first, int rows, bool accumulate,
                                  std::normal_distribution<float>& normal, std::mt19937& rng) {
  std::vector<float> out(size_t(tokens) * ld, NAN);
  for (int t = 0; t < tokens && accumulate; ++t) {
    for (int o = 0; o < rows; ++o) out[size_t(t) * ld + first + o] = normal(rng);
  }
  return out;
}

std::string Mismatch(float got, double want) {
  return (::testing::Message() << got << ", expected " << want).GetString();
}

// Walks a product's output (`tokens` rows of ld floats): each column of [first, first + rows)
// goes to check(t, o, value), o its row of the product, which returns "" or what is wrong;
// every other column must still be NaN. Reports the first five failures.
template <typename Check>
void CheckOutputs(const std::vector<float>& out, int tokens, int ld, int first, int rows,
                  Check check) {
  int bad = 0;
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < ld; ++c) {
      const float got = out[size_t(t) * ld + c];
      const int o = c - first;
      if (o < 0 || o >= rows) {
        if (!std::isnan(got) && bad++ < 5) {
          ADD_FAILURE() << "token " << t << " column " << c << " was written";
        }
        continue;
      }
      const std::string wrong = check(t, o, got);
      if (!wrong.empty() && bad++ < 5)
        ADD_FAILURE() << "token " << t << " row " << o << ": " << wrong;
    }
  }
}

using Launcher = absl::Status (*)(const QuantGemvParams&, cudaStream_t);

// LaunchQuantGemm with each of its tensor-core kernels pinned.
absl::Status QuantGemmMmaSync(const QuantGemvParams& p, cudaStream_t stream) {
  QuantGemvParams pinned = p;
  pinned.gemm_kernel = QuantGemmKernel::kMmaSync;
  return LaunchQuantGemm(pinned, stream);
}
absl::Status QuantGemmWgmma(const QuantGemvParams& p, cudaStream_t stream) {
  QuantGemvParams pinned = p;
  pinned.gemm_kernel = QuantGemmKernel::kWgmma;
  return LaunchQuantGemm(pinned, stream);
}

// LaunchQuantGemm's wgmma kernel in 3 splits of the columns (2 where a row has 4 steps or fewer;
// a width that would not split is an error), with a workspace of its own: counters at zero,
// partials poisoned. It runs twice from the same output and must give the same bits both times
// (the emulator shuffles the blocks' order anew each launch, so the block that finishes a tile
// changes) and leave every counter at zero.
absl::Status QuantGemmWgmmaSplit(const QuantGemvParams& p, cudaStream_t stream) {
  constexpr int kSplits = 3;
  if (QuantGemmSplits(p.w.cols, kSplits) < 2) {
    return absl::InternalError(absl::StrCat(p.w.cols, " columns do not split"));
  }
  QuantGemvParams split = p;
  split.gemm_kernel = QuantGemmKernel::kWgmma;
  split.k_splits = kSplits;
  const int tiles = QuantGemmTiles(p.w.rows, p.num_tokens);
  const size_t floats = QuantGemmSplitFloats(p.w.rows, p.num_tokens, kSplits);
  DeviceArray partials(floats * 4), counters(size_t(tiles) * 4);
  split.split = {partials.as<float>(), floats, counters.as<uint32_t>(), tiles};
  const std::vector<uint32_t> zeros(size_t(tiles), 0);
  if (counters.Upload(zeros) != cudaSuccess) return absl::InternalError("counters upload");
  const size_t span = size_t(p.num_tokens - 1) * p.ld_out + p.w.rows;
  std::vector<float> before(span), runs[2];
  auto copy = [](void* to, const void* from, size_t bytes, cudaMemcpyKind kind) {
    return cudaMemcpy(to, from, bytes, kind) == cudaSuccess ? absl::OkStatus()
                                                            : absl::InternalError("cudaMemcpy");
  };
  RETURN_IF_ERROR(copy(before.data(), p.out, span * 4, cudaMemcpyDeviceToHost));
  for (std::vector<float>& run : runs) {
    RETURN_IF_ERROR(copy(p.out, before.data(), span * 4, cudaMemcpyHostToDevice));
    if (partials.Poison() != cudaSuccess) return absl::InternalError("poison");
    RETURN_IF_ERROR(LaunchQuantGemm(split, stream));
    run.resize(span);
    RETURN_IF_ERROR(copy(run.data(), p.out, span * 4, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> left(zeros.size());
    if (counters.Download(left) != cudaSuccess) return absl::InternalError("counters download");
    if (left != zeros) return absl::InternalError("a tile's counter was left above zero");
  }
  if (std::memcmp(runs[0].data(), runs[1].data(), span * 4) != 0) {
    return absl::InternalError("two runs of the split product differ");
  }
  return absl::OkStatus();
}

// WeightProducts::Run on one part, as the backend runs a step past the small-batch products:
// on tensor cores, in the splits QuantGemmAutoSplits asks for on 132 SMs (an H100's, and what the
// emulator reports). The projection's n_out is the output's row stride (ld_out).
absl::Status AutoSplitProducts(const QuantGemvParams& p, cudaStream_t stream) {
  WeightProducts::Options o;
  o.gemv_max_tokens = 0;
  o.fp8_gemv_max_tokens = 0;
  o.fp8_cublaslt_min_tokens = 0;
  o.num_sms = 132;
  o.split_k_max_tokens = 4096;
  ASSIGN_OR_RETURN(std::unique_ptr<WeightProducts> products,
                   WeightProducts::Create(stream, p.dtype, o));
  Projection w;
  w.parts[0] = p.w;
  w.num_parts = 1;
  w.n_out = p.ld_out;
  w.n_in = p.w.cols;
  RETURN_IF_ERROR(products->Run(p.x, w, p.out, p.num_tokens, p.accumulate));
  return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                : absl::InternalError("synchronize");
}

// x in 8-bit blocks of 32, as LaunchQuantizeQ8Blocks writes them: d = max|x| / 127, q =
// round(x * 127 / max|x|); the values q * d.
std::vector<float> Q8BlocksOnHost(const std::vector<float>& x, std::vector<int8_t>* q,
                                  std::vector<float>* d) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::rint(x[b * 32 + i] * inv));
      if (q != nullptr) q->push_back(static_cast<int8_t>(v));
      out[b * 32 + i] = static_cast<float>(v) * scale;
    }
    if (d != nullptr) d->push_back(scale);
  }
  return out;
}

// The fused product with 8-bit activations, as WeightProducts runs it: quantize, then multiply
// (in GLU mode too, when p sets glu_out).
absl::Status QuantizeThenGemvInt8(const QuantGemvParams& p, cudaStream_t stream) {
  const size_t n = size_t(p.num_tokens) * p.w.cols;
  DeviceArray q(n), ds(n / 32 * 8);
  RETURN_IF_ERROR(LaunchQuantizeQ8Blocks(
      {p.x, q.as<int8_t>(), ds.as<float2>(), p.num_tokens, p.w.cols, p.dtype}, stream));
  QuantGemvInt8Params int8{q.as<int8_t>(), ds.as<float2>(), p.w,         p.out,
                           p.ld_out,       p.num_tokens,    p.accumulate};
  int8.glu_out = p.glu_out;
  int8.dtype = p.dtype;
  RETURN_IF_ERROR(LaunchQuantGemvInt8(int8, stream));
  return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                : absl::InternalError("synchronize");
}

// One run of `launch` for n tokens of random x into columns [5, 5 + w.rows) of a wider output
// (ld = w.rows + 11) left poisoned elsewhere, plain or accumulating, against the product of
// w_values ([rows][cols]) with x's values (rounded to 8-bit blocks first when q8_x): each output
// within rel_tol of the sum of |terms| (plus 1e-5), every other column untouched.
void CheckOneProduct(Launcher launch, const DeviceMatrix& w, const std::vector<float>& w_values,
                     int n, bool accumulate, DType dtype, bool q8_x, double rel_tol,
                     std::mt19937& rng) {
  const int rows = w.rows, cols = w.cols, first = 5, ld = rows + 11;
  SCOPED_TRACE(::testing::Message()
               << cols << " columns, " << n << " tokens" << (accumulate ? ", accumulating" : ""));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(n) * cols);
  for (uint16_t& v : x) v = ToBits(normal(rng), dtype);
  std::vector<float> out = PoisonedOutput(n, ld, first, rows, accumulate, normal, rng);
  const std::vector<float> before = out;
  std::vector<float> x_ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_ref[i] = FromBits(x[i], dtype);
  if (q8_x) x_ref = Q8BlocksOnHost(x_ref, nullptr, nullptr);
  DeviceArray d_x(x.size() * 2), d_out(out.size() * 4);
  ASSERT_EQ(d_x.Upload(x), cudaSuccess);
  ASSERT_EQ(d_out.Upload(out), cudaSuccess);
  ASSERT_OK(launch({d_x.get(), w, d_out.as<float>() + first, ld, n, accumulate, dtype}, nullptr));
  ASSERT_EQ(d_out.Download(out), cudaSuccess);
  CheckOutputs(out, n, ld, first, rows, [&](int t, int o, float got) {
    double ref = accumulate ? before[size_t(t) * ld + first + o] : 0.0, magnitude = 0;
    for (int i = 0; i < cols; ++i) {
      const double p = double(w_values[size_t(o) * cols + i]) * x_ref[size_t(t) * cols + i];
      ref += p;
      magnitude += std::fabs(p);
    }
    return std::fabs(got - ref) <= rel_tol * magnitude + 1e-5 ? std::string() : Mismatch(got, ref);
  });
}

// `launch` against the product of the CPU's dequantized rows, for each token count of `tokens`,
// plain and accumulating (CheckOneProduct); with x rounded to 8-bit blocks first for the
// launchers that quantize it (q8_x).
// Column counts below, at and across the kernels' chunks (1024 and 64 elements); `rows` leaves
// partial tiles (of 16 and 64 rows).
void CheckProduct(GgmlType type, DType dtype, Launcher launch, std::initializer_list<int> tokens,
                  std::mt19937& rng, bool q8_x = false, int rows = 37, bool all_widths = true) {
  const int block = BlockElements(*QuantizedFormatOf(type));
  const std::vector<int> widths = all_widths
                                      ? std::vector<int>{block == 32 ? 224 : 256, 1024, 1280, 2304}
                                      : std::vector<int>{block == 32 ? 224 : 256, 1280};
  // The tensor-core product rounds each weight to the dtype first.
  const double rel_tol = launch == QuantGemmMmaSync || launch == QuantGemmWgmma ||
                                 launch == QuantGemmWgmmaSplit || launch == AutoSplitProducts
                             ? 2 * Eps(dtype)
                             : 1e-5;
  for (int cols : widths) {
    const HostMatrix m = RandomMatrix(type, rows, cols, rng);
    DeviceArray d_w(m.bytes.size());
    ASSERT_EQ(d_w.Upload(m.bytes), cudaSuccess);
    for (int n : tokens) {
      for (bool accumulate : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckOneProduct(launch, OnDevice(m, d_w), m.values, n, accumulate,
                                                dtype, q8_x, rel_tol, rng));
      }
    }
  }
}

TEST_P(QuantKernelsTest, GemvMatchesTheDequantizedProduct) {
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 31 + (dtype == DType::kBf16 ? 1 : 2));
  CheckProduct(type, dtype, LaunchQuantGemv, {1, 3, 8}, rng);
}

TEST_P(QuantKernelsTest, Int8GemvMatchesTheProductWith8BitActivations) {
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 29 + (dtype == DType::kBf16 ? 7 : 8));
  CheckProduct(type, dtype, QuantizeThenGemvInt8, {1, 3, 8}, rng, /*q8_x=*/true);
}

// A GEMV in GLU mode over w = [Wgate; Wup] (F = w.rows / 2) for 1, 3 and 8 tokens of random x,
// against the same launcher's plain product into float32 followed by LaunchSiluMul: h equal bit
// for bit (not mostly zeros), and a row of poison after h untouched.
void CheckGluMode(Launcher launch, const DeviceMatrix& w, DType dtype, std::mt19937& rng) {
  const int half = w.rows / 2, cols = w.cols;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {1, 3, 8}) {
    SCOPED_TRACE(::testing::Message()
                 << half << " gate/up pairs of " << cols << " columns, " << n << " tokens");
    std::vector<uint16_t> x(size_t(n) * cols);
    for (uint16_t& v : x) v = ToBits(normal(rng), dtype);
    const size_t outputs = size_t(n) * half;
    DeviceArray d_x(x.size() * 2), d_gate_up(size_t(n) * w.rows * 4), d_ref(outputs * 2),
        d_h((outputs + half) * 2);
    ASSERT_EQ(d_x.Upload(x), cudaSuccess);
    ASSERT_EQ(d_gate_up.Poison(), cudaSuccess);
    ASSERT_EQ(d_ref.Poison(), cudaSuccess);
    ASSERT_EQ(d_h.Poison(), cudaSuccess);
    ASSERT_OK(launch({d_x.get(), w, d_gate_up.as<float>(), w.rows, n, false, dtype}, nullptr));
    ASSERT_OK(LaunchSiluMul({d_gate_up.as<float>(), d_ref.get(), n, half, dtype}, nullptr));
    QuantGemvParams glu{d_x.get(), w, nullptr, 0, n, false, dtype};
    glu.glu_out = d_h.get();
    ASSERT_OK(launch(glu, nullptr));
    std::vector<uint16_t> want(outputs), got(outputs + half);
    ASSERT_EQ(d_ref.Download(want), cudaSuccess);
    ASSERT_EQ(d_h.Download(got), cudaSuccess);
    int bad = 0, nonzero = 0;
    for (size_t i = 0; i < outputs; ++i) {
      nonzero += FromBits(want[i], dtype) != 0.0f;
      if (got[i] != want[i] && bad++ < 5) {
        ADD_FAILURE() << "token " << i / half << " output " << i % half << ": "
                      << FromBits(got[i], dtype) << ", expected " << FromBits(want[i], dtype);
      }
    }
    EXPECT_GT(nonzero, static_cast<int>(outputs / 4));  // silu of a negative gate may be 0
    for (size_t i = outputs; i < got.size(); ++i) {
      ASSERT_EQ(got[i], kPoison) << "past h: element " << i - outputs << " was written";
    }
  }
}

// Gate/up pairs: a partial block of 8 (37), and a multiple of 4 (40, SiluMul's vector path).
constexpr int kGluPairs[] = {37, 40};

TEST_P(QuantKernelsTest, GluModeEqualsTheProductThenSiluMul) {
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 37 + (dtype == DType::kBf16 ? 3 : 4));
  const int cols = 1280;  // the fused product's chunks of 1024 columns: one and part of another
  for (int half : kGluPairs) {
    const HostMatrix m = RandomMatrix(type, 2 * half, cols, rng);
    DeviceArray d_w(m.bytes.size());
    ASSERT_EQ(d_w.Upload(m.bytes), cudaSuccess);
    for (Launcher launch : {LaunchQuantGemv, QuantizeThenGemvInt8}) {
      SCOPED_TRACE(launch == LaunchQuantGemv ? "LaunchQuantGemv" : "LaunchQuantGemvInt8");
      ASSERT_NO_FATAL_FAILURE(CheckGluMode(launch, OnDevice(m, d_w), dtype, rng));
    }
  }
}

class Q8BlocksTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
};

TEST_P(Q8BlocksTest, MatchTheHostRounding) {
  const DType dtype = GetParam();
  std::mt19937 rng(61);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int tokens = 3, cols = 320;
  std::vector<uint16_t> x(size_t(tokens) * cols);
  for (uint16_t& v : x) v = ToBits(normal(rng), dtype);
  for (int i = 0; i < 32; ++i) x[64 + i] = ToBits(0.0f, dtype);  // a block of zeros
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = FromBits(x[i], dtype);
  std::vector<int8_t> q_ref;
  std::vector<float> d_ref;
  Q8BlocksOnHost(xf, &q_ref, &d_ref);
  DeviceArray d_x(x.size() * 2), d_q(x.size()), d_ds(x.size() / 32 * 8);
  ASSERT_EQ(d_x.Upload(x), cudaSuccess);
  ASSERT_OK(LaunchQuantizeQ8Blocks(
      {d_x.get(), d_q.as<int8_t>(), d_ds.as<float2>(), tokens, cols, dtype}, nullptr));
  std::vector<int8_t> q(x.size());
  std::vector<float> ds(x.size() / 32 * 2);
  ASSERT_EQ(d_q.Download(q), cudaSuccess);
  ASSERT_EQ(d_ds.Download(ds), cudaSuccess);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], q_ref[i]) << i;
  for (size_t b = 0; b < d_ref.size(); ++b) {
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += q_ref[b * 32 + i];
    EXPECT_EQ(ds[2 * b], d_ref[b]) << "block " << b;
    EXPECT_EQ(ds[2 * b + 1], d_ref[b] * static_cast<float>(sum)) << "block " << b;
  }
}

TEST_P(QuantKernelsTest, TensorCoreGemmMatchesTheDequantizedProduct) {
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 37 + (dtype == DType::kBf16 ? 5 : 6));
  // A partial tile of tokens, and three tiles with a partial last; two tiles of rows, the second
  // partial.
  CheckProduct(type, dtype, QuantGemmMmaSync, {9, 150}, rng, /*q8_x=*/false, /*rows=*/100,
               /*all_widths=*/false);
}

// The wgmma kernel: tiles of 32 tokens (9), of 64 (33, and 64 exactly) and of 128 (150: two, the
// second partial); rows in a full and a partial tile of 64; widths of an odd count of 32-column
// units (Q8_0, Q4_0: 224), of one 256-column block and of five. On the emulator the wgmma
// operations run at their waits, so a fragment or stage overwritten before its wait fails here
// too.
TEST_P(QuantKernelsTest, WgmmaGemmMatchesTheDequantizedProduct) {
  if (!WgmmaAvailable()) GTEST_SKIP() << "the device has no wgmma (compute capability 9.0 only)";
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 41 + (dtype == DType::kBf16 ? 5 : 6));
  CheckProduct(type, dtype, QuantGemmWgmma, {9, 33, 64, 150}, rng, /*q8_x=*/false, /*rows=*/100,
               /*all_widths=*/false);
}

// The same kernel in splits of the columns (QuantGemmWgmmaSplit: 2 splits of the narrow widths,
// 3 of 1280 columns' 20 steps, the last shorter), for a tile of 32 tokens and two of 128: within
// the same tolerance, the same bits on a second run, every counter back at zero.
TEST_P(QuantKernelsTest, SplitWgmmaGemmMatchesAndRepeats) {
  if (!WgmmaAvailable()) GTEST_SKIP() << "the device has no wgmma (compute capability 9.0 only)";
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 43 + (dtype == DType::kBf16 ? 5 : 6));
  CheckProduct(type, dtype, QuantGemmWgmmaSplit, {9, 150}, rng, /*q8_x=*/false, /*rows=*/100,
               /*all_widths=*/false);
}

// The products a step past the small-batch ones runs (WeightProducts, split-K on): at 16 and 40
// tokens over 100 rows, the widths of 4 to 36 steps split 1, 2, 2 and 4 ways by
// QuantGemmAutoSplits, against the dequantized product; Q4_K (whose 256-column blocks a split of
// 10 steps starts inside) and Q8_0.
TEST(QuantGemmSplitsTest, WeightProductsSplitAsAsked) {
  if (!WgmmaAvailable()) GTEST_SKIP() << "the device has no wgmma (compute capability 9.0 only)";
  EXPECT_EQ(QuantGemmAutoSplits(100, 256, 16, 132), 1);
  EXPECT_EQ(QuantGemmAutoSplits(100, 1024, 16, 132), 2);
  EXPECT_EQ(QuantGemmAutoSplits(100, 1280, 40, 132), 2);
  EXPECT_EQ(QuantGemmAutoSplits(100, 2304, 40, 132), 4);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0}) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::mt19937 rng(static_cast<unsigned>(type) * 53);
    CheckProduct(type, DType::kBf16, AutoSplitProducts, {16, 40}, rng, /*q8_x=*/false,
                 /*rows=*/100, /*all_widths=*/true);
  }
}

// The splits asked for the Llama-3-8B shape's products on 132 SMs: none where the tiles fill the
// SMs (gate/up, 448 tiles), about two blocks an SM where they do not, never under 8 steps a
// split or over kMaxKSplits.
TEST(QuantGemmSplitsTest, AutoSplitsFillTheSms) {
  EXPECT_EQ(QuantGemmTiles(4096, 16), 64);
  EXPECT_EQ(QuantGemmTiles(4096, 33), 64);
  EXPECT_EQ(QuantGemmTiles(4096, 256), 128);
  EXPECT_EQ(QuantGemmTiles(100, 150), 4);
  EXPECT_EQ(QuantGemmAutoSplits(4096, 4096, 16, 132), 4);    // o: 64 tiles
  EXPECT_EQ(QuantGemmAutoSplits(6144, 4096, 64, 132), 2);    // qkv: 96 tiles
  EXPECT_EQ(QuantGemmAutoSplits(28672, 4096, 16, 132), 1);   // gate/up: 448 tiles
  EXPECT_EQ(QuantGemmAutoSplits(4096, 14336, 256, 132), 2);  // down: 128 tiles
  EXPECT_EQ(QuantGemmAutoSplits(4096, 14336, 16, 132), 4);
  EXPECT_EQ(QuantGemmAutoSplits(4096, 1024, 16, 132), 2);  // 16 steps: two of 8
  EXPECT_EQ(QuantGemmAutoSplits(4096, 512, 16, 132), 1);   // 8 steps
  EXPECT_EQ(QuantGemmAutoSplits(256, 4096, 16, 132), kMaxKSplits);
  EXPECT_EQ(QuantGemmSplitFloats(4096, 16, 1), 0u);
  EXPECT_EQ(QuantGemmSplitFloats(4096, 16, 4), size_t{64} * 4 * 64 * 32);
}

TEST_P(QuantKernelsTest, DequantizeRowsMatchesTheCpu) {
  const auto [type, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 17 + (dtype == DType::kBf16 ? 3 : 4));
  const int block = BlockElements(*QuantizedFormatOf(type));
  const int rows = 23, cols = 3 * std::max(block, 256);
  const HostMatrix m = RandomMatrix(type, rows, cols, rng);
  DeviceArray d_w(m.bytes.size());
  ASSERT_EQ(d_w.Upload(m.bytes), cudaSuccess);
  // The embedding gather: float32, rows out of order and repeated.
  const std::vector<int32_t> ids = {22, 0, 7, 7, 13, 1};
  DeviceArray d_ids(ids.size() * 4), d_f32((ids.size() + 1) * cols * 4);
  ASSERT_EQ(d_ids.Upload(ids), cudaSuccess);
  ASSERT_EQ(d_f32.Poison(), cudaSuccess);
  DequantizeRowsParams gather;
  gather.w = OnDevice(m, d_w);
  gather.rows = d_ids.as<int32_t>();
  gather.num_rows = static_cast<int>(ids.size());
  gather.out = d_f32.get();
  gather.out_f32 = true;
  ASSERT_OK(LaunchDequantizeRows(gather, nullptr));
  std::vector<float> f32((ids.size() + 1) * cols);
  ASSERT_EQ(d_f32.Download(f32), cudaSuccess);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int i = 0; i < cols; ++i) {
      const float ref = m.values[size_t(ids[r]) * cols + i];
      ASSERT_NEAR(f32[r * cols + i], ref, 1e-6f * std::fabs(ref) + 1e-9f)
          << "gathered row " << r << " element " << i;
    }
  }
  for (int i = 0; i < cols; ++i) ASSERT_TRUE(std::isnan(f32[ids.size() * cols + i]));
  // A slice of rows in the dtype, as ahead of a cuBLAS product.
  const int first = 4, count = 9;
  DeviceArray d_16((count + 1) * size_t(cols) * 2);
  ASSERT_EQ(d_16.Poison(), cudaSuccess);
  DequantizeRowsParams slice;
  slice.w = OnDevice(m, d_w);
  slice.first_row = first;
  slice.num_rows = count;
  slice.out = d_16.get();
  slice.dtype = dtype;
  ASSERT_OK(LaunchDequantizeRows(slice, nullptr));
  std::vector<uint16_t> h16((count + 1) * size_t(cols));
  ASSERT_EQ(d_16.Download(h16), cudaSuccess);
  for (int r = 0; r < count; ++r) {
    for (int i = 0; i < cols; ++i) {
      const float ref = m.values[size_t(first + r) * cols + i];
      const float got = FromBits(h16[size_t(r) * cols + i], dtype);
      // One rounding to the dtype (the device may fuse the block's multiply-subtract).
      const float ulp = dtype == DType::kBf16 ? 1.0f / 128 : 1.0f / 1024;
      ASSERT_NEAR(got, ref, ulp * std::fabs(ref) + 1e-7f) << "row " << r << " element " << i;
    }
  }
  for (int i = 0; i < cols; ++i) ASSERT_EQ(h16[size_t(count) * cols + i], kPoison);
}

// Benchmark weights: random blocks decode to finite values within 1.5x the asked amplitude,
// centred on zero.
class RandomBlocksTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
};

TEST_P(RandomBlocksTest, DecodeWithinTheirAmplitude) {
  const GgmlType type = GetParam();
  const WeightFormat f = *QuantizedFormatOf(type);
  const int rows = 19, cols = 512;
  const size_t row_bytes = FormatRowBytes(f, cols);
  DeviceArray d(rows * row_bytes);
  const float amplitude = 0.25f;
  ASSERT_OK(LaunchFillRandomBlocks({d.get(), f, rows, cols, row_bytes}, amplitude, 9, nullptr));
  std::vector<uint8_t> bytes(rows * row_bytes);
  ASSERT_EQ(d.Download(bytes), cudaSuccess);
  std::vector<float> v(cols);
  double sum = 0, sum_abs = 0, max_abs = 0;
  for (int r = 0; r < rows; ++r) {
    DequantizeRowPortable(type, bytes.data() + r * row_bytes, cols, v.data());
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sum_abs += std::fabs(x);
      max_abs = std::max(max_abs, double(std::fabs(x)));
    }
  }
  const double n = double(rows) * cols;
  EXPECT_LE(max_abs, 1.51 * amplitude);
  EXPECT_GT(sum_abs / n, 0.05 * amplitude);
  // Centred: the mean is a small part of the typical magnitude (unit-scale activations).
  EXPECT_LT(std::fabs(sum / n), 0.25 * sum_abs / n) << "mean " << sum / n;
  std::printf("%s random blocks: mean %.4f, mean |w| %.4f, max |w| %.4f (amplitude %.2f)\n",
              common::GgmlTypeName(type).c_str(), sum / n, sum_abs / n, max_abs, amplitude);
}

INSTANTIATE_TEST_SUITE_P(QuantKernelsGpuTest, Q8BlocksTest,
                         ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return DTypeTestName(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(QuantKernelsGpuTest, RandomBlocksTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return common::GgmlTypeName(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(QuantKernelsGpuTest, QuantKernelsTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes),
                                            ::testing::Values(DType::kBf16, DType::kFp16)),
                         [](const ::testing::TestParamInfo<QuantKernelsTest::ParamType>& info) {
                           return absl::StrCat(common::GgmlTypeName(std::get<0>(info.param)), "_",
                                               DTypeTestName(std::get<1>(info.param)));
                         });

// ---- FP8 (--dtype fp8): activations quantized per token, the scaling epilogue, and the whole
// product through cuBLASLt (fp8_gemm.h) against the same arithmetic on the host.

float E4M3ToFloat(uint8_t b) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3))); }

struct HostFp8 {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

// cuda_fp8.h's conversion of each row scaled by max|row| / 448 (what the kernel must write).
HostFp8 QuantizeRowsOnHost(const std::vector<float>& x, int rows, int cols) {
  HostFp8 h{std::vector<uint8_t>(x.size()), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[size_t(r) * cols + i]));
    h.scales[r] = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    for (int i = 0; i < cols; ++i) {
      h.q[size_t(r) * cols + i] =
          __nv_cvt_float_to_fp8(x[size_t(r) * cols + i] / h.scales[r], __NV_SATFINITE, __NV_E4M3);
    }
  }
  return h;
}

// A random [rows][cols] FP8 matrix on the device (weights N(0, 0.05^2) quantized per row as the
// loader does) and its values on the host, E4M3 x row scale.
struct Fp8Matrix {
  Fp8Matrix(int rows, int cols, std::mt19937& rng) : q(size_t(rows) * cols), scales(rows * 4) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(size_t(rows) * cols);
    for (float& v : w) v = normal(rng) * 0.05f;
    const HostFp8 wq = QuantizeRowsOnHost(w, rows, cols);
    values.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) values[i] = E4M3ToFloat(wq.q[i]) * wq.scales[i / cols];
    EXPECT_EQ(q.Upload(wq.q), cudaSuccess);
    EXPECT_EQ(scales.Upload(wq.scales), cudaSuccess);
    m = {q.get(), WeightFormat::kFp8, rows, cols, size_t(cols), scales.as<float>()};
  }
  DeviceArray q, scales;
  DeviceMatrix m;
  std::vector<float> values;
};

class Fp8Test : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
};

TEST_P(Fp8Test, QuantizeRowsMatchesCudaFp8OnTheHost) {
  const DType dtype = GetParam();
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int rows = 5, padded = 16, cols = 300;
  std::vector<uint16_t> x(size_t(rows) * cols);
  for (uint16_t& v : x) v = ToBits(normal(rng), dtype);
  for (int i = 0; i < cols; ++i) x[size_t(2) * cols + i] = ToBits(0.0f, dtype);  // a zero row
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = FromBits(x[i], dtype);
  const HostFp8 ref = QuantizeRowsOnHost(xf, rows, cols);
  DeviceArray d_x(x.size() * 2), d_q(size_t(padded) * cols), d_s(size_t(rows + 1) * 4);
  ASSERT_EQ(d_x.Upload(x), cudaSuccess);
  ASSERT_EQ(d_q.Poison(), cudaSuccess);
  ASSERT_EQ(d_s.Poison(), cudaSuccess);
  ASSERT_OK(LaunchQuantizeFp8(
      {d_x.get(), d_q.as<uint8_t>(), d_s.as<float>(), rows, padded, cols, dtype}, nullptr));
  std::vector<uint8_t> q(size_t(padded) * cols);
  std::vector<float> scales(rows + 1);
  ASSERT_EQ(d_q.Download(q), cudaSuccess);
  ASSERT_EQ(d_s.Download(scales), cudaSuccess);
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(scales[r], ref.scales[r]) << "row " << r;
    for (int i = 0; i < cols; ++i) {
      ASSERT_EQ(q[size_t(r) * cols + i], ref.q[size_t(r) * cols + i]) << r << ", " << i;
    }
  }
  EXPECT_EQ(scales[2], 1.0f);
  EXPECT_TRUE(std::isnan(scales[rows]));  // one per row, no more
  for (size_t i = size_t(rows) * cols; i < q.size(); ++i) ASSERT_EQ(q[i], 0) << "padding " << i;
}

// The product through cuBLASLt against the host's arithmetic on the same E4M3 values and scales
// (to float32 rounding), and against the exact float product of the unquantized inputs (within
// what E4M3's 3-bit mantissa leaves: measured 0.035 relative here, asserted under 0.06).
TEST_P(Fp8Test, GemmMatchesTheScaledFp8Product) {
  const DType dtype = GetParam();
  std::mt19937 rng(43);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int rows = 48, cols = 256, first = 3, ld = rows + 7;
  std::vector<float> w(size_t(rows) * cols);
  for (float& v : w) v = normal(rng) * 0.05f;
  const HostFp8 wq = QuantizeRowsOnHost(w, rows, cols);
  DeviceArray d_w(wq.q.size()), d_ws(wq.scales.size() * 4);
  ASSERT_EQ(d_w.Upload(wq.q), cudaSuccess);
  ASSERT_EQ(d_ws.Upload(wq.scales), cudaSuccess);
  const DeviceMatrix m{d_w.get(), WeightFormat::kFp8, rows, cols, size_t(cols), d_ws.as<float>()};
  auto gemm = Fp8Gemm::Create(nullptr, dtype, cols, rows);
  ASSERT_OK(gemm);
  for (int tokens : {1, 21, kFp8SliceTokens + 44}) {  // the last in two slices
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(::testing::Message() << tokens << " tokens" << (accumulate ? ", adding" : ""));
      std::vector<uint16_t> x(size_t(tokens) * cols);
      for (uint16_t& v : x) v = ToBits(normal(rng), dtype);
      std::vector<float> xf(x.size());
      for (size_t i = 0; i < x.size(); ++i) xf[i] = FromBits(x[i], dtype);
      const HostFp8 xq = QuantizeRowsOnHost(xf, tokens, cols);
      std::vector<float> out = PoisonedOutput(tokens, ld, first, rows, accumulate, normal, rng);
      const std::vector<float> before = out;
      DeviceArray d_x(x.size() * 2), d_out(out.size() * 4);
      ASSERT_EQ(d_x.Upload(x), cudaSuccess);
      ASSERT_EQ(d_out.Upload(out), cudaSuccess);
      ASSERT_OK((*gemm)->Run(d_x.get(), m, d_out.as<float>() + first, ld, tokens, accumulate));
      ASSERT_EQ(d_out.Download(out), cudaSuccess);
      double err = 0, norm = 0;
      CheckOutputs(out, tokens, ld, first, rows, [&](int t, int o, float got) {
        double fp8 = 0, exact = 0, magnitude = 0;
        for (int i = 0; i < cols; ++i) {
          fp8 += double(E4M3ToFloat(wq.q[size_t(o) * cols + i])) *
                 E4M3ToFloat(xq.q[size_t(t) * cols + i]);
          exact += double(w[size_t(o) * cols + i]) * xf[size_t(t) * cols + i];
          magnitude += std::fabs(double(w[size_t(o) * cols + i]) * xf[size_t(t) * cols + i]);
        }
        const double base = accumulate ? before[size_t(t) * ld + first + o] : 0.0;
        const double ref = base + fp8 * wq.scales[o] * xq.scales[t];
        err += (got - base - exact) * (got - base - exact);
        norm += exact * exact;
        return std::fabs(got - ref) <= 1e-5 * (magnitude + std::fabs(base)) + 1e-6
                   ? std::string()
                   : Mismatch(got, ref);
      });
      const double rel = std::sqrt(err / norm);
      EXPECT_LT(rel, 0.06) << "FP8 against the float product";
      if (tokens == 21 && !accumulate) std::printf("FP8 product: %.4f relative error\n", rel);
    }
  }
}

// LaunchFp8Gemv against the host's product of the same E4M3 values and row scales with x in
// its dtype, for 1, 3 and 8 tokens, plain and accumulating, into a column range of a wider
// output left poisoned elsewhere; widths below, at and across its pass of 2048 columns and its
// steps of 512.
TEST_P(Fp8Test, GemvMatchesTheScaledFp8Product) {
  const DType dtype = GetParam();
  std::mt19937 rng(dtype == DType::kBf16 ? 47 : 48);
  for (int cols : {16, 496, 2048, 2064, 4608}) {
    const Fp8Matrix w(37, cols, rng);
    for (int n : {1, 3, 8}) {
      for (bool accumulate : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckOneProduct(LaunchFp8Gemv, w.m, w.values, n, accumulate, dtype,
                                                /*q8_x=*/false, 1e-5, rng));
      }
    }
  }
}

// LaunchQuantGemm on FP8 rows, each tensor-core kernel pinned, against the host's product of
// the same E4M3 values and row scales with x in its dtype: tiles of 64 and 128 tokens with a
// partial last, rows in a full and a partial tile of 64, widths of an odd count of 32-column
// units (480: steps of two, the last half empty; and 2080), and 2048; plain and accumulating
// into a column range of a wider output left poisoned elsewhere. Within 1e-3 of the sum of
// |terms| (the products are exact in FP32; only the tensor cores' order of summation differs).
TEST_P(Fp8Test, TensorCoreGemmMatchesTheScaledFp8Product) {
  const DType dtype = GetParam();
  std::mt19937 rng(dtype == DType::kBf16 ? 51 : 52);
  for (int cols : {480, 2048, 2080}) {
    const Fp8Matrix w(100, cols, rng);
    ASSERT_TRUE(Fp8TensorCoresFit(w.m));
    for (Launcher launch : {QuantGemmMmaSync, QuantGemmWgmma, QuantGemmWgmmaSplit}) {
      if (launch != QuantGemmMmaSync && !WgmmaAvailable()) continue;
      SCOPED_TRACE(launch == QuantGemmMmaSync ? "mma.sync"
                   : launch == QuantGemmWgmma ? "wgmma"
                                              : "wgmma, split");
      for (int n : {9, 64, 150}) {
        for (bool accumulate : {false, true}) {
          ASSERT_NO_FATAL_FAILURE(CheckOneProduct(launch, w.m, w.values, n, accumulate, dtype,
                                                  /*q8_x=*/false, 1e-3, rng));
        }
      }
    }
  }
}

TEST_P(Fp8Test, GemvGluModeEqualsTheProductThenSiluMul) {
  const DType dtype = GetParam();
  std::mt19937 rng(dtype == DType::kBf16 ? 49 : 50);
  for (int half : kGluPairs) {
    const Fp8Matrix w(2 * half, 2064, rng);  // a pass of 2048 columns and part of the next
    ASSERT_NO_FATAL_FAILURE(CheckGluMode(LaunchFp8Gemv, w.m, dtype, rng));
  }
}

INSTANTIATE_TEST_SUITE_P(QuantKernelsGpuTest, Fp8Test,
                         ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return DTypeTestName(info.param);
                         });

// LaunchDenseGemv against the exact product of random dtype weights and activations, for 1, 3
// and 8 tokens, plain and accumulating, into a column range of a wider output left poisoned
// elsewhere; widths below, at and across its pass of 1024 columns and its steps of 256.
class DenseGemvTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
};

TEST_P(DenseGemvTest, MatchesTheHostProduct) {
  const DType dtype = GetParam();
  std::mt19937 rng(dtype == DType::kBf16 ? 41 : 42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int rows = 37;
  for (int cols : {8, 248, 1024, 1032, 3000}) {
    std::vector<uint16_t> w(size_t(rows) * cols);
    std::vector<float> values(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = ToBits(normal(rng) * 0.05f, dtype);
      values[i] = FromBits(w[i], dtype);
    }
    DeviceArray d_w(w.size() * 2);
    ASSERT_EQ(d_w.Upload(w), cudaSuccess);
    const DeviceMatrix m{d_w.get(), WeightFormat::kDense, rows, cols, size_t(cols) * 2};
    for (int n : {1, 3, 8}) {
      for (bool accumulate : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckOneProduct(LaunchDenseGemv, m, values, n, accumulate, dtype,
                                                /*q8_x=*/false, 1e-5, rng));
      }
    }
  }
}

TEST_P(DenseGemvTest, GluModeEqualsTheProductThenSiluMul) {
  const DType dtype = GetParam();
  std::mt19937 rng(dtype == DType::kBf16 ? 43 : 44);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int cols = 1032;  // a pass of 1024 columns and part of the next
  for (int half : kGluPairs) {
    std::vector<uint16_t> w(size_t(2 * half) * cols);
    for (uint16_t& v : w) v = ToBits(normal(rng) * 0.05f, dtype);
    DeviceArray d_w(w.size() * 2);
    ASSERT_EQ(d_w.Upload(w), cudaSuccess);
    const DeviceMatrix m{d_w.get(), WeightFormat::kDense, 2 * half, cols, size_t(cols) * 2};
    ASSERT_NO_FATAL_FAILURE(CheckGluMode(LaunchDenseGemv, m, dtype, rng));
  }
}

INSTANTIATE_TEST_SUITE_P(QuantKernelsGpuTest, DenseGemvTest,
                         ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return DTypeTestName(info.param);
                         });

TEST(QuantKernelsGpuTest, BadArgumentsAreRejected) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  DeviceArray w(4096), x(4096), out(4096);
  const DeviceMatrix q4{w.get(), WeightFormat::kQ4_0, 4, 64, 36};
  const QuantGemvParams good{x.get(), q4, out.as<float>(), 4, 1, false, DType::kBf16};
  auto code = [](const absl::Status& s) { return s.code(); };
  QuantGemvParams p = good;
  p.num_tokens = kQuantGemvMaxTokens + 1;
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p = good;
  p.w.format = WeightFormat::kDense;
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p = good;
  p.ld_out = 3;
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p = good;
  p.w.cols = 48;  // not whole blocks of 32
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p = good;
  p.w.row_bytes = 34;  // not 64 Q4_0 columns
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  const DeviceMatrix dense{w.get(), WeightFormat::kDense, 4, 64, 128};
  p = {x.get(), dense, out.as<float>(), 4, 1, false, DType::kBf16};
  EXPECT_OK(LaunchDenseGemv(p, nullptr));
  p.w.cols = 60, p.w.row_bytes = 120;  // not a multiple of 8 columns
  EXPECT_EQ(code(LaunchDenseGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.w = q4;
  EXPECT_EQ(code(LaunchDenseGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  DeviceArray scales(64);
  const DeviceMatrix fp8{w.get(), WeightFormat::kFp8, 4, 64, 64, scales.as<float>()};
  p = {x.get(), fp8, out.as<float>(), 4, 1, false, DType::kBf16};
  EXPECT_OK(LaunchFp8Gemv(p, nullptr));
  p.w.row_scales = nullptr;
  EXPECT_EQ(code(LaunchFp8Gemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.w = fp8;
  p.w.cols = 56, p.w.row_bytes = 56;  // not a multiple of 16 columns
  EXPECT_EQ(code(LaunchFp8Gemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.w = dense;
  EXPECT_EQ(code(LaunchFp8Gemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.w = fp8;
  p.num_tokens = kQuantGemvMaxTokens + 1;
  EXPECT_EQ(code(LaunchFp8Gemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  // The tensor-core product takes FP8 rows of whole 32-column units, with their scales.
  EXPECT_OK(LaunchQuantGemm(p, nullptr));
  p.w.cols = 48, p.w.row_bytes = 48;
  EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.w = fp8;
  p.w.row_scales = nullptr;
  EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
  // GLU mode: an even number of rows, no accumulation, and the GEMVs only.
  p = good;
  p.glu_out = out.get();
  EXPECT_OK(LaunchQuantGemv(p, nullptr));
  p.accumulate = true;
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.accumulate = false;
  p.w.rows = 3;
  EXPECT_EQ(code(LaunchQuantGemv(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p = good;
  p.glu_out = out.get();
  EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
  // Splits: at least 1; more than one that the steps fill needs the workspace.
  p = good;
  p.k_splits = 0;
  EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
  p.k_splits = 2;  // 64 columns: one step pair, so one split and no workspace
  EXPECT_OK(LaunchQuantGemm(p, nullptr));
  if (WgmmaAvailable()) {
    p.w.cols = 256, p.w.row_bytes = 144;  // four steps: two splits
    EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
    DeviceArray partials(QuantGemmSplitFloats(4, 1, 2) * 4), counters(16);
    p.split = {partials.as<float>(), QuantGemmSplitFloats(4, 1, 2) - 1, counters.as<uint32_t>(), 1};
    EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
    p.split.partial_floats += 1;
    p.split.num_counters = 0;
    EXPECT_EQ(code(LaunchQuantGemm(p, nullptr)), absl::StatusCode::kInvalidArgument);
  }
  DequantizeRowsParams d;
  d.w = q4;
  d.first_row = 2;
  d.num_rows = 3;  // rows [2, 5) of 4
  d.out = out.get();
  EXPECT_EQ(code(LaunchDequantizeRows(d, nullptr)), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker::cuda
