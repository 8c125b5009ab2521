// The portable table: baseline x86-64 (SSE2) or any other target, and the reference the SIMD
// tables are tested against. Its kernels are kernels_body.inc's, with the block decoders of
// worker/model/dequantize_blocks.inc; this file adds GemmPanelPortable.
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

// DecodeRow (worker/model/dequantize_blocks.inc, the loader's decoders): the reference of
// DequantizeRowSimd and DequantizeRowAvx512, which give the same bits.
void DequantizeRowPortable(common::GgmlType type, const uint8_t* row, int n, float* out) {
  DecodeRow(type, row, n, out);
}

// Float32 weights x float32 activations, one or several tokens, each output in kLanes lane sums
// carried between k blocks: the reference of GemmPanelTiles (GemmF32Tile<RB, TB> of
// kernels_avx2.cc and kernels_avx512.cc) and of GemvFloat<kType, RB> (kernels_avx512.cc).
void GemmPanelPortable(const GemmPanelArgs& a) {
  for (int t = 0; t < a.num_tokens; ++t) {
    const float* x = a.x + static_cast<size_t>(t) * a.ldx;
    for (int r = 0; r < a.rows; ++r) {
      float acc[kLanes] = {};
      // `lanes` (and `out` before the last block) may be null: only what is used is indexed.
      if (a.resume) std::memcpy(acc, LaneSums(a, r, t), sizeof(acc));
      AccumulateLanes(x, a.w + static_cast<size_t>(r) * a.ldw, a.k, acc);
      if (a.finish) {
        a.out[static_cast<size_t>(t) * a.ldo + r] = ReduceLanes(acc);
      } else {
        std::memcpy(LaneSums(a, r, t), acc, sizeof(acc));
      }
    }
  }
}

}  // namespace

const KernelTable kPortableKernels = {
    .isa = CpuIsa::kPortable,
    .dequantize_row = DequantizeRowPortable,
    .gemm_panel = GemmPanelPortable,
    .quant_gemm_panel = QuantGemmPanelPortable,
    .quantize_activations = QuantizeActivationsPortable,
    .attention_head = AttentionHeadPortable,
    .rms_norm_row = RmsNormRowPortable,
    .swiglu = SwiGluPortable,
    .add = AddPortable,
    .float_to_half = FloatToHalfPortable,
};

}  // namespace pagoda::worker::cpu
