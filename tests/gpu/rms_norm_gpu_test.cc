// CUDA RMSNorm against the CPU backend's twin on fresh random inputs (outputs poisoned first).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "worker/backend/cpu/cpu_kernels.h"
#include "worker/backend/cuda/device.h"
#include "worker/backend/cuda/norm/rms_norm.h"

namespace pagoda::worker::cuda {
namespace {

TEST(RmsNormGpuTest, MatchesCpuOnRandomInputs) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU kernel test not run";
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int dim : {8, 64, 100, 4096}) {
    for (int tokens : {1, 7, 64}) {
      std::vector<float> x(size_t(tokens) * dim), w(dim), ref(x.size()), got(x.size());
      for (float& v : x) v = normal(rng);
      for (float& v : w) v = normal(rng);
      cpu::RmsNorm(cpu::LocalContext().get(), {x.data(), w.data(), ref.data(), tokens, dim, 1e-5f});
      float *dx, *dw, *dout;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dout, x.size() * 4), cudaSuccess);
      cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dout, 0xff, x.size() * 4);  // NaN poison
      ASSERT_EQ(LaunchRmsNorm({dx, dw, dout, tokens, dim, 1e-5f}, nullptr), cudaSuccess);
      cudaMemcpy(got.data(), dout, x.size() * 4, cudaMemcpyDeviceToHost);
      cudaFree(dx);
      cudaFree(dw);
      cudaFree(dout);
      double err = 0, norm = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        err += double(got[i] - ref[i]) * (got[i] - ref[i]);
        norm += double(ref[i]) * ref[i];
      }
      EXPECT_LT(std::sqrt(err / norm), 1e-5) << "dim " << dim << " tokens " << tokens;
    }
  }
}

}  // namespace
}  // namespace pagoda::worker::cuda
