// The CUDA backend's per-token kernels (kernels/layer_kernels.h: embedding gather, RMSNorm with
// row gather and cast, RoPE table, architecture QKV hooks, RoPE fused with the KV page write,
// SiLU·mul, random fill) against their CPU twins (worker/backend/cpu/cpu_kernels.h,
// worker/model/architecture.h) on fresh random inputs, in bf16 and fp16. Outputs and KV pages are
// poisoned (NaN) first: a slot a kernel must not write stays NaN, one it must write cannot pass by
// keeping stale values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/status_assertions.h"
#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/kernels/layer_kernels.h"
#include "worker/model/architecture.h"

namespace pagoda::worker::cuda {
namespace {

// Relative precision of one rounding to the dtype (half an ulp at 1.0).
float Eps(DType d) { return d == DType::kBf16 ? 1.0f / 256 : 1.0f / 2048; }

std::vector<float> Normal(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<uint16_t> ToDType(const std::vector<float>& v, DType d) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = ToBits(v[i], d);
  return out;
}

// got (dtype bits) against ref (float, before rounding): within two roundings of the dtype
// relative to the row scale, which covers the kernels' different reduction order.
void ExpectNear(const std::vector<uint16_t>& got, const std::vector<float>& ref, DType d,
                float scale, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size() && bad < 5; ++i) {
    const float g = FromBits(got[i], d);
    const float tol = 2 * Eps(d) * std::max(std::fabs(ref[i]), scale) + 1e-6f;
    if (!(std::fabs(g - ref[i]) <= tol)) {
      ADD_FAILURE() << what << " " << DTypeName(d) << ": element " << i << " is " << g
                    << ", the CPU twin gives " << ref[i];
      ++bad;
    }
  }
}

class LayerKernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  }
  std::mt19937 rng_{20261124};
  cpu::LocalContext cpu_{};  // portable kernels, one thread: the CPU twins' reference
};

// The tests that run for each dtype.
class LayerKernelsDTypeTest : public LayerKernelsGpuTest,
                              public ::testing::WithParamInterface<DType> {};

TEST_P(LayerKernelsDTypeTest, EmbedGathersRowsExactly) {
  const DType d = GetParam();
  for (int dim : {8, 100, 300}) {
    const int vocab = 37, tokens = 19;
    const std::vector<uint16_t> table = ToDType(Normal(size_t(vocab) * dim, rng_), d);
    std::vector<int32_t> ids(tokens);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % vocab);
    DeviceArray d_table(table.size() * 2), d_ids(ids.size() * 4), d_x(size_t(tokens) * dim * 4);
    ASSERT_EQ(d_table.Upload(table), cudaSuccess);
    ASSERT_EQ(d_ids.Upload(ids), cudaSuccess);
    ASSERT_EQ(d_x.Poison(), cudaSuccess);
    ASSERT_OK(LaunchEmbed({d_ids.as<int32_t>(), d_table.get(), d_x.as<float>(), tokens, dim, d},
                          nullptr));
    std::vector<float> x(size_t(tokens) * dim);
    ASSERT_EQ(d_x.Download(x), cudaSuccess);
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < dim; ++i) {
        ASSERT_EQ(x[size_t(t) * dim + i], FromBits(table[size_t(ids[t]) * dim + i], d))
            << DTypeName(d) << " dim " << dim << " token " << t << " element " << i;
      }
    }
  }
}

TEST_P(LayerKernelsDTypeTest, RmsNormCastMatchesCpuWithAndWithoutRowGather) {
  const DType d = GetParam();
  // Rows of 4 k floats up to 16384 take the kernel of 16-byte pieces (one warp, at most one
  // piece a thread, at 64 and 100; four pieces a thread at 4096 and 16384); 6 and 20000 the
  // strided one.
  for (int dim : {6, 8, 64, 100, 4096, 16384, 20000}) {
    const int src_rows = 13;
    const std::vector<float> x = Normal(size_t(src_rows) * dim, rng_, 3.0f);
    const std::vector<float> w = Normal(dim, rng_);
    // A third run reads x one float past a 16-byte boundary: the strided kernel's case.
    for (int variant = 0; variant < 3; ++variant) {
      const bool gather = variant == 1, misaligned = variant == 2;
      // Gather: rows in shuffled order, one repeated, some left out.
      std::vector<int32_t> rows(src_rows);
      std::iota(rows.begin(), rows.end(), 0);
      if (gather) {
        std::shuffle(rows.begin(), rows.end(), rng_);
        rows.resize(7);
        rows.push_back(rows.front());
      }
      const int n = static_cast<int>(rows.size());
      std::vector<float> gathered(size_t(n) * dim), ref(size_t(n) * dim);
      for (int r = 0; r < n; ++r) {
        std::copy_n(x.begin() + size_t(rows[r]) * dim, dim, gathered.begin() + size_t(r) * dim);
      }
      cpu::RmsNorm(cpu_.get(), {gathered.data(), w.data(), ref.data(), n, dim, 1e-5f});

      DeviceArray d_x(x.size() * 4 + 4), d_w(w.size() * 4), d_rows(rows.size() * 4),
          d_out(ref.size() * 2);
      std::vector<float> x_up = x;
      if (misaligned) x_up.insert(x_up.begin(), NAN);
      ASSERT_EQ(d_x.Upload(x_up), cudaSuccess);
      ASSERT_EQ(d_w.Upload(w), cudaSuccess);
      ASSERT_EQ(d_rows.Upload(rows), cudaSuccess);
      ASSERT_EQ(d_out.Poison(), cudaSuccess);
      RmsNormCastParams p{d_x.as<float>() + (misaligned ? 1 : 0),
                          gather ? d_rows.as<int32_t>() : nullptr,
                          d_w.as<float>(),
                          d_out.get(),
                          n,
                          dim,
                          1e-5f,
                          d};
      ASSERT_OK(LaunchRmsNormCast(p, nullptr));
      std::vector<uint16_t> got(ref.size());
      ASSERT_EQ(d_out.Download(got), cudaSuccess);
      ExpectNear(got, ref, d, 1e-3f,
                 "RMSNorm dim " + std::to_string(dim) + (gather ? " gathered" : "") +
                     (misaligned ? " misaligned" : ""));
    }
  }
}

TEST_F(LayerKernelsGpuTest, RopeTableMatchesCpu) {
  for (int head_dim : {8, 64, 128, 256}) {
    std::vector<int32_t> positions = {0, 1, 7, -1, 511, 4095, 32767, 131071};
    for (int i = 0; i < 8; ++i) positions.push_back(static_cast<int32_t>(rng_() % 100000));
    const int n = static_cast<int>(positions.size()), half = head_dim / 2;
    std::vector<float> cos(size_t(n) * half), sin(cos.size());
    // The CPU twin has no padding rule: a padding token (position -1) gets angle 0.
    std::vector<int32_t> cpu_positions = positions;
    for (int32_t& p : cpu_positions) p = std::max(p, 0);
    cpu::BuildRopeTables({cpu_positions.data(), cos.data(), sin.data(), n, head_dim, 500000.0f});

    DeviceArray d_pos(positions.size() * 4), d_rope(cos.size() * 8);
    ASSERT_EQ(d_pos.Upload(positions), cudaSuccess);
    ASSERT_EQ(d_rope.Poison(), cudaSuccess);
    ASSERT_OK(LaunchRopeTable({d_pos.as<int32_t>(), d_rope.as<float2>(), n, head_dim, 500000.0f},
                              nullptr));
    std::vector<float> rope(cos.size() * 2);
    ASSERT_EQ(d_rope.Download(rope), cudaSuccess);
    for (size_t i = 0; i < cos.size(); ++i) {
      ASSERT_NEAR(rope[2 * i], cos[i], 1e-6f) << "head_dim " << head_dim << " entry " << i;
      ASSERT_NEAR(rope[2 * i + 1], sin[i], 1e-6f) << "head_dim " << head_dim << " entry " << i;
    }
  }
}

struct RopeShape {
  int n_heads, n_kv_heads, head_dim, page_size;
};

// Three sequences over shuffled pages and one padding token: Q comes back rotated, K rotated and
// V as is land in their page slots, and every other slot stays poisoned.
void CheckRopeKvWrite(DType d, const RopeShape& s, std::mt19937& rng) {
  const int hd = s.head_dim, q_dim = s.n_heads * hd, kv_dim = s.n_kv_heads * hd;
  const std::vector<std::pair<int, int>> seqs = {{0, 5}, {13, 1}, {3, 9}};  // start, tokens
  const int stride = 4, num_pages = 16;
  std::vector<int32_t> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> page_table(seqs.size() * stride);
  for (size_t i = 0; i < page_table.size(); ++i) page_table[i] = pages[i];
  std::vector<int32_t> positions, token_seq;
  for (size_t q = 0; q < seqs.size(); ++q) {
    for (int t = 0; t < seqs[q].second; ++t) {
      positions.push_back(seqs[q].first + t);
      token_seq.push_back(static_cast<int32_t>(q));
    }
  }
  positions.push_back(-1);  // padding
  token_seq.push_back(0);
  const int n = static_cast<int>(positions.size());
  const std::vector<float> qkv = Normal(size_t(n) * (q_dim + 2 * kv_dim), rng);

  // The CPU twins: tables, then Q and K split out, rotated, and K/V written to F16 pages.
  std::vector<int32_t> table_pos = positions;
  for (int32_t& p : table_pos) p = std::max(p, 0);
  std::vector<float> cos(size_t(n) * hd / 2), sin(cos.size());
  cpu::BuildRopeTables({table_pos.data(), cos.data(), sin.data(), n, hd, 10000.0f});
  std::vector<float> q(size_t(n) * q_dim), k(size_t(n) * kv_dim), v(k.size());
  for (int t = 0; t < n; ++t) {
    const float* row = qkv.data() + size_t(t) * (q_dim + 2 * kv_dim);
    std::copy_n(row, q_dim, q.begin() + size_t(t) * q_dim);
    std::copy_n(row + q_dim, kv_dim, k.begin() + size_t(t) * kv_dim);
    std::copy_n(row + q_dim + kv_dim, kv_dim, v.begin() + size_t(t) * kv_dim);
  }
  cpu::ApplyRope({q.data(), cos.data(), sin.data(), n, s.n_heads, hd});
  cpu::ApplyRope({k.data(), cos.data(), sin.data(), n, s.n_kv_heads, hd});
  const size_t cache_len = size_t(num_pages) * s.page_size * kv_dim;
  std::vector<uint16_t> k_half(cache_len, common::FloatToF16(NAN)), v_half = k_half;
  std::vector<const int32_t*> tables;
  for (int t = 0; t < n - 1; ++t) tables.push_back(page_table.data() + token_seq[t] * stride);
  cpu::WriteKv(cpu::LocalContext(cpu::CpuIsa::kPortable, 1).get(),
               {k.data(), v.data(), positions.data(), tables.data(), k_half.data(), v_half.data(),
                n - 1, kv_dim, s.page_size});
  // The CPU pages hold F16 (kv_arena.h): within both dtypes' tolerance of the float rows.
  std::vector<float> k_ref(cache_len), v_ref(cache_len);
  for (size_t i = 0; i < cache_len; ++i) {
    k_ref[i] = common::F16ToFloat(k_half[i]);
    v_ref[i] = common::F16ToFloat(v_half[i]);
  }

  std::vector<float2> rope(cos.size());
  for (size_t i = 0; i < cos.size(); ++i) rope[i] = {cos[i], sin[i]};
  DeviceArray d_qkv(qkv.size() * 4), d_rope(rope.size() * 8), d_pos(positions.size() * 4),
      d_seq(token_seq.size() * 4), d_table(page_table.size() * 4), d_q(q.size() * 2),
      d_k(cache_len * 2), d_v(cache_len * 2);
  ASSERT_EQ(d_qkv.Upload(qkv), cudaSuccess);
  ASSERT_EQ(d_rope.Upload(rope), cudaSuccess);
  ASSERT_EQ(d_pos.Upload(positions), cudaSuccess);
  ASSERT_EQ(d_seq.Upload(token_seq), cudaSuccess);
  ASSERT_EQ(d_table.Upload(page_table), cudaSuccess);
  for (DeviceArray* a : {&d_q, &d_k, &d_v}) ASSERT_EQ(a->Poison(), cudaSuccess);
  RopeKvWriteParams p{d_qkv.as<float>(),
                      d_rope.as<float2>(),
                      d_pos.as<int32_t>(),
                      d_seq.as<int32_t>(),
                      d_table.as<int32_t>(),
                      stride,
                      d_q.get(),
                      d_k.get(),
                      d_v.get(),
                      n,
                      s.n_heads,
                      s.n_kv_heads,
                      hd,
                      s.page_size,
                      d};
  ASSERT_OK(LaunchRopeKvWrite(p, nullptr));

  const std::string what = "heads " + std::to_string(s.n_heads) + "/" +
                           std::to_string(s.n_kv_heads) + " head_dim " + std::to_string(hd) +
                           " page " + std::to_string(s.page_size);
  std::vector<uint16_t> got_q(q.size()), got_k(cache_len), got_v(cache_len);
  ASSERT_EQ(d_q.Download(got_q), cudaSuccess);
  ASSERT_EQ(d_k.Download(got_k), cudaSuccess);
  ASSERT_EQ(d_v.Download(got_v), cudaSuccess);
  // The padding token's Q row is computed (with angle 0) but never read: compare the others.
  got_q.resize(size_t(n - 1) * q_dim);
  q.resize(got_q.size());
  ExpectNear(got_q, q, d, 1e-3f, "Q " + what);
  for (auto [got, ref, name] : {std::tuple{&got_k, &k_ref, "K"}, std::tuple{&got_v, &v_ref, "V"}}) {
    for (size_t i = 0; i < cache_len; ++i) {
      if (std::isnan((*ref)[i])) {
        ASSERT_EQ((*got)[i], kPoison) << name << " slot element " << i << " written " << what;
      } else {
        ASSERT_NEAR(FromBits((*got)[i], d), (*ref)[i],
                    2 * Eps(d) * std::max(std::fabs((*ref)[i]), 1e-3f) + 1e-6f)
            << name << " element " << i << " " << DTypeName(d) << " " << what;
      }
    }
  }
}

TEST_P(LayerKernelsDTypeTest, RopeKvWriteMatchesCpuRopeAndWriteKv) {
  const DType d = GetParam();
  for (const RopeShape& s :
       {RopeShape{8, 4, 8, 8}, RopeShape{4, 1, 64, 16}, RopeShape{8, 8, 128, 4},
        RopeShape{6, 2, 96, 32}, RopeShape{32, 8, 128, 16}}) {  // 3072 pairs: 12 blocks a token
    CheckRopeKvWrite(d, s, rng_);
    if (HasFatalFailure()) return;
  }
}

// qwen2's biases and qwen3's per-head Q/K RMSNorm on the fused QKV rows against the CPU
// backend's hook (ApplyQkvHooks on split Q, K, V). Rows past num_tokens are poisoned and must
// stay NaN: the kernel works in place on the first num_tokens rows only.
TEST_F(LayerKernelsGpuTest, QkvHooksMatchCpuArchitectureHooks) {
  struct Shape {
    int n_heads, n_kv_heads, head_dim, tokens;
  };
  for (const Shape& s : {Shape{4, 2, 8, 5}, Shape{8, 8, 64, 3}, Shape{6, 2, 128, 9}}) {
    for (const bool bias : {true, false}) {
      for (const bool norm : {false, true}) {
        if (!bias && !norm) continue;
        common::ModelConfig c;
        c.n_heads = s.n_heads;
        c.n_kv_heads = s.n_kv_heads;
        c.head_dim = s.head_dim;
        c.rms_eps = 1e-6f;
        const int q = c.q_dim(), kv = c.kv_dim(), width = q + 2 * kv, n = s.tokens;
        ArchitectureLayerWeights w;
        if (bias) {
          w.bq = Normal(size_t(q), rng_, 0.5f);
          w.bk = Normal(size_t(kv), rng_, 0.5f);
          w.bv = Normal(size_t(kv), rng_, 0.5f);
        }
        if (norm) {
          w.q_norm = Normal(size_t(s.head_dim), rng_);
          w.k_norm = Normal(size_t(s.head_dim), rng_);
        }
        const std::vector<float> qkv = Normal(size_t(n) * width, rng_, 2.0f);
        // The CPU twin on split arrays.
        std::vector<float> cq(size_t(n) * q), ck(size_t(n) * kv), cv(size_t(n) * kv);
        for (int t = 0; t < n; ++t) {
          const float* row = qkv.data() + size_t(t) * width;
          std::copy_n(row, q, cq.begin() + size_t(t) * q);
          std::copy_n(row + q, kv, ck.begin() + size_t(t) * kv);
          std::copy_n(row + q + kv, kv, cv.begin() + size_t(t) * kv);
        }
        ApplyQkvHooks(c, w, n, cq.data(), ck.data(), cv.data());

        std::vector<float> fused_bias;
        for (const std::vector<float>* b : {&w.bq, &w.bk, &w.bv}) {
          fused_bias.insert(fused_bias.end(), b->begin(), b->end());
        }
        const int spare_rows = 2;
        DeviceArray d_qkv((qkv.size() + size_t(spare_rows) * width) * 4),
            d_bias(fused_bias.size() * 4), d_qn(w.q_norm.size() * 4), d_kn(w.k_norm.size() * 4);
        ASSERT_EQ(d_qkv.Poison(), cudaSuccess);
        ASSERT_EQ(d_qkv.Upload(qkv), cudaSuccess);
        if (bias) {
          ASSERT_EQ(d_bias.Upload(fused_bias), cudaSuccess);
        }
        if (norm) {
          ASSERT_EQ(d_qn.Upload(w.q_norm), cudaSuccess);
          ASSERT_EQ(d_kn.Upload(w.k_norm), cudaSuccess);
        }
        ASSERT_OK(
            LaunchQkvHooks({d_qkv.as<float>(), bias ? d_bias.as<float>() : nullptr,
                            norm ? d_qn.as<float>() : nullptr, norm ? d_kn.as<float>() : nullptr, n,
                            s.n_heads, s.n_kv_heads, s.head_dim, c.rms_eps},
                           nullptr));
        std::vector<float> got(qkv.size() + size_t(spare_rows) * width);
        ASSERT_EQ(d_qkv.Download(got), cudaSuccess);
        const std::string what = "heads " + std::to_string(s.n_heads) + "/" +
                                 std::to_string(s.n_kv_heads) + " head_dim " +
                                 std::to_string(s.head_dim) + (bias ? " bias" : "") +
                                 (norm ? " norm" : "");
        int bad = 0;
        for (int t = 0; t < n && bad < 5; ++t) {
          for (int i = 0; i < width && bad < 5; ++i) {
            const float ref = i < q        ? cq[size_t(t) * q + i]
                              : i < q + kv ? ck[size_t(t) * kv + i - q]
                                           : cv[size_t(t) * kv + i - q - kv];
            const float g = got[size_t(t) * width + i];
            if (!(std::fabs(g - ref) <= 1e-5f * std::max(1.0f, std::fabs(ref)))) {
              ADD_FAILURE() << what << ": token " << t << " element " << i << " is " << g
                            << ", the CPU hook gives " << ref;
              ++bad;
            }
          }
        }
        for (size_t i = qkv.size(); i < got.size(); ++i) {
          ASSERT_TRUE(std::isnan(got[i])) << what << ": spare row element " << i << " written";
        }
      }
    }
  }
}

// Widths a multiple of 4 take the kernel of 16-byte loads, the others (1, 171) the scalar one.
TEST_P(LayerKernelsDTypeTest, SiluMulMatchesCpuSwiGlu) {
  const DType d = GetParam();
  for (int ffn : {1, 171, 172, 2048}) {
    const int tokens = 9;
    const std::vector<float> gate_up = Normal(size_t(tokens) * 2 * ffn, rng_, 4.0f);
    std::vector<float> ref(size_t(tokens) * ffn);
    for (int t = 0; t < tokens; ++t) {
      std::vector<float> gate(gate_up.begin() + size_t(t) * 2 * ffn,
                              gate_up.begin() + size_t(t) * 2 * ffn + ffn);
      cpu::SwiGlu(cpu_.get(), gate.data(), gate_up.data() + size_t(t) * 2 * ffn + ffn, 1, ffn);
      std::copy(gate.begin(), gate.end(), ref.begin() + size_t(t) * ffn);
    }
    DeviceArray d_in(gate_up.size() * 4), d_out(ref.size() * 2);
    ASSERT_EQ(d_in.Upload(gate_up), cudaSuccess);
    ASSERT_EQ(d_out.Poison(), cudaSuccess);
    ASSERT_OK(LaunchSiluMul({d_in.as<float>(), d_out.get(), tokens, ffn, d}, nullptr));
    std::vector<uint16_t> got(ref.size());
    ASSERT_EQ(d_out.Download(got), cudaSuccess);
    ExpectNear(got, ref, d, 1e-3f, "SiLU·mul ffn " + std::to_string(ffn));
  }
}

// The benchmarks' fill: seeded, deterministic, within [-scale, scale], never all zeros, and the
// float32 variant adds its offset.
TEST_P(LayerKernelsDTypeTest, FillRandomIsSeededAndBounded) {
  const DType d = GetParam();
  const size_t n = 100003;
  DeviceArray a(n * 2), b(n * 2), c(n * 2);
  ASSERT_OK(LaunchFillRandom(a.get(), n, d, 0.5f, 7, nullptr));
  ASSERT_OK(LaunchFillRandom(b.get(), n, d, 0.5f, 7, nullptr));
  ASSERT_OK(LaunchFillRandom(c.get(), n, d, 0.5f, 8, nullptr));
  std::vector<uint16_t> va(n), vb(n), vc(n);
  ASSERT_EQ(a.Download(va), cudaSuccess);
  ASSERT_EQ(b.Download(vb), cudaSuccess);
  ASSERT_EQ(c.Download(vc), cudaSuccess);
  EXPECT_EQ(va, vb) << DTypeName(d) << ": same seed, other values";
  EXPECT_NE(va, vc) << DTypeName(d) << ": another seed, same values";
  double sum = 0, sum_sq = 0;
  for (uint16_t bits : va) {
    const float x = FromBits(bits, d);
    ASSERT_LE(std::fabs(x), 0.5f) << DTypeName(d);
    sum += x;
    sum_sq += double(x) * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01) << DTypeName(d);
  EXPECT_NEAR(sum_sq / n, 0.25 / 3, 0.01) << DTypeName(d) << ": not uniform on [-0.5, 0.5]";
}

// The float32 variant adds its offset to values within [-scale, scale].
TEST_F(LayerKernelsGpuTest, FillRandomF32IsOffsetAndBounded) {
  const size_t n = 100003;
  DeviceArray f(n * 4);
  ASSERT_OK(LaunchFillRandomF32(f.as<float>(), n, 0.25f, 1.0f, 3, nullptr));
  std::vector<float> vf(n);
  ASSERT_EQ(f.Download(vf), cudaSuccess);
  const auto [lo, hi] = std::minmax_element(vf.begin(), vf.end());
  EXPECT_GE(*lo, 0.75f);
  EXPECT_LE(*hi, 1.25f);
  EXPECT_LT(*lo, 0.76f);
  EXPECT_GT(*hi, 1.24f);
}

INSTANTIATE_TEST_SUITE_P(LayerKernelsGpuTest, LayerKernelsDTypeTest,
                         ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return DTypeTestName(info.param);
                         });

}  // namespace
}  // namespace pagoda::worker::cuda
