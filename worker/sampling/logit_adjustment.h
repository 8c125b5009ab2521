// LogitAdjustment: one token's logit_bias and penalties, applied to its logit before sampling,
// identically by the CPU sampler and the CUDA kernel (this header compiles with both).
//
// The runner builds one adjustment per token that has a bias or occurs in the sequence's
// history (see TokenHistory), with the penalties already resolved for that token, so that
// applying it is three float operations in a fixed order (C++17, for nvcc):
//   l += bias;                                              // logit_bias
//   l = l > 0 ? l / repetition : l * repetition;            // repetition penalty (1 = none)
//   l -= subtract;                                          // frequency * count + presence
// A list holds each token at most once; its order is irrelevant.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)  // nvcc; the host emulator compiles device code as plain C++
#define PAGODA_HOST_DEVICE __host__ __device__
#else
#define PAGODA_HOST_DEVICE
#endif

namespace pagoda::worker {

struct LogitAdjustment {
  int32_t token = 0;
  float bias = 0;        // logit_bias[token], 0 when none
  float repetition = 1;  // repetition_penalty when the token is in the prompt or generated, else 1
  // frequency_penalty * (times generated) + presence_penalty * (generated at all)
  float subtract = 0;
};

PAGODA_HOST_DEVICE inline float AdjustLogit(float logit, const LogitAdjustment& a) {
  float l = logit + a.bias;
  l = l > 0 ? l / a.repetition : l * a.repetition;
  return l - a.subtract;
}

}  // namespace pagoda::worker
