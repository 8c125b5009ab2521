// Portable kernels: baseline x86-64 (SSE2) or any other target; the reference the SIMD tables
// are tested against.
#include <algorithm>
#include <cstring>
#include <limits>

#include "common/fp16.h"
#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

constexpr int kLanes = 8;

// The portable F16 loaders the block decoders below expect under these names.
constexpr auto& LoadHalf = common::LoadF16;
constexpr auto& HalfRowToFloat = common::F16RowToFloat;

#include "worker/backend/cpu/kernels_body.inc"

void DequantizeRowImpl(common::GgmlType type, const uint8_t* row, int n, float* out) {
  DecodeRow(type, row, n, out);
}

void GemmPanelImpl(const GemmPanelArgs& a) {
  for (int t = 0; t < a.num_tokens; ++t) {
    const float* x = a.x + static_cast<size_t>(t) * a.ldx;
    float* out = a.out + static_cast<size_t>(t) * a.ldo;
    for (int r = 0; r < a.rows; ++r) {
      float acc[kLanes] = {};
      float* lanes = LaneSums(a, r, t);
      if (a.resume) std::memcpy(acc, lanes, sizeof(acc));
      AccumulateLanes(x, a.w + static_cast<size_t>(r) * a.ldw, a.k, acc);
      if (a.finish) {
        out[r] = ReduceLanes(acc);
      } else {
        std::memcpy(lanes, acc, sizeof(acc));
      }
    }
  }
}

}  // namespace

const KernelTable kPortableKernels = {CpuIsa::kPortable,
                                      DequantizeRowImpl,
                                      GemmPanelImpl,
                                      QuantGemmPanelImpl,
                                      QuantizeActivationsImpl,
                                      AttentionHeadImpl,
                                      RmsNormRowImpl,
                                      SwiGluImpl,
                                      AddImpl,
                                      FloatToHalfImpl};

}  // namespace pagoda::worker::cpu
