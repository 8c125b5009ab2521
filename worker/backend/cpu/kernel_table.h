// Run-time selection of the CPU kernels' instruction set, and the table of kernels built for
// each one. docs/cpu-kernels.md has the kernel families, their names per weight type and table,
// and the checklists for adding a weight type or an instruction set.
//
// Contract: one binary runs on any x86-64: the AVX2 and AVX-512 kernels live in their own
// translation units compiled with function sets for those extensions only, and are called only
// when the running CPU (and OS) supports them. Every table computes the same functions; within
// one table, the arithmetic of one output (one row of one token) never depends on how many
// tokens or rows are computed with it (batch invariance). Tables differ from each other only by
// float rounding (tests bound the difference).
//
// Names. A table entry's function is the entry's name and the table's: QuantGemmPanelAvx512Vnni,
// FloatGemvAvx512, AttentionHeadAvx2. One that several tables share is named for its file:
// ...Portable (kernels_body.inc, kernels_portable.cc: the portable code, which the SIMD tables
// compile for their own instruction sets where they have no kernel of their own, and the
// reference they are tested against), ...Simd (dequantize_simd.inc), ...Tiles (gemm_tiles.inc).
// The kernels of the products behind the entries are named as ggml names its dot products
// (ggml_vec_dot_q4_K_q8_K: weights, then activations):
//   <Gemv|Gemm><weights>[_<activations>]<how>
//   Gemv: one token x up to 8 weight rows; Gemm: one or several tokens x a panel's rows.
//   weights: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, or a family, whose template argument
//     is the type: Float (F32, F16, BF16), Qx_0 (Q8_0, Q4_0: blocks of 32 elements), Qx_K (Q4_K,
//     Q5_K, Q6_K: super-blocks of 256).
//   activations, where not float32: Q8_0 or Q8_K, the 8-bit records of quantized_activations.h
//     (kBlock32, kSuper256; ggml's block_q8_0 and block_q8_K in layouts of their own).
//   how: Tile<RB, TB> (a register tile of RB rows x TB tokens), Group16 (16 tokens, one per
//     SIMD lane), Amx (AMX tiles), Portable (the reference); none where there is one way.
// So GemmQx_K_Q8_KAmx<GgmlType::Q4_K> multiplies Q4_K weights by Q8_K activations of several
// tokens on AMX tiles. Block decoders: Decode<type> (portable, worker/model/dequantize_blocks.inc,
// shared with the loader) and Decode<type>Simd (dequantize_simd.inc).
//
// Who computes what, per weight type and table. MatMul (cpu_kernels.cc) picks the entry: float
// weights go through float_gemv (one token, where set), float_gemm_panel (where set for the
// type) or dequantize_row and gemm_panel; quantized ones through quantize_activations,
// pack_activations (several tokens, where set) and quant_gemm_panel, or, with float activations
// (--cpu-quantize-activations=false, the default on portable, avx2 and avx512), as float ones.
// Tables: portable, avx2, avx512, vnni (avx512vnni), amx (avx512amx); [ref]: the reference.
//
// F32, F16, BF16 weights, float32 activations
//   dequantize   portable: DequantizeRowPortable = DecodeRow [ref]; avx2: DequantizeRowSimd;
//                avx512, vnni, amx: DequantizeRowAvx512 (MatMul reads F32 rows in place)
//   1 token      portable: GemmPanelPortable [ref]; avx2: GemmPanelTiles -> GemmF32Tile<RB, 1>
//                on decoded rows; avx512, vnni, amx: FloatGemvAvx512 -> GemvFloat<type, RB>
//                on the stored rows; amx with AMX-BF16, BF16 only: FloatGemmPanelAmx ->
//                GemmBF16Amx
//   n tokens     portable: GemmPanelPortable [ref]; avx2, avx512, vnni, amx: GemmPanelTiles ->
//                GemmF32Tile<RB, TB> on decoded rows; amx with AMX-BF16, BF16 only:
//                FloatGemmPanelAmx -> GemmBF16Amx
// Q8_0, Q4_0 weights (Qx_0), Q8_0 activations
//   dequantize   DecodeQ8_0, DecodeQ4_0 [ref]; avx2, avx512, vnni, amx: DecodeQ8_0Simd,
//                DecodeQ4_0Simd
//   activations  portable, avx2: QuantizeActivationsPortable [ref]; avx512, vnni, amx:
//                QuantizeActivationsAvx512 (the same bytes)
//   1 token      portable, avx2, avx512: QuantGemmPanelPortable -> GemmQx_0_Q8_0Portable [ref];
//                vnni: QuantGemmPanelAvx512Vnni -> GemvQx_0_Q8_0; amx: QuantGemmPanelAmx ->
//                GemvQx_0_Q8_0
//   n tokens     portable, avx2, avx512: GemmQx_0_Q8_0Portable [ref]; vnni: GemmQx_0_Q8_0Group16
//                (activations packed by PackActivationsAvx512Vnni; the last few tokens of a call
//                by GemvQx_0_Q8_0); amx: GemmQx_0_Q8_0Amx (packed by PackActivationsAmx)
// Q4_K, Q5_K, Q6_K weights (Qx_K), Q8_K activations
//   dequantize   DecodeQ4_K, DecodeQ5_K, DecodeQ6_K [ref]; avx2, avx512, vnni, amx:
//                DecodeQ4_KOrQ5_KSimd, DecodeQ6_KSimd
//   activations  as Qx_0's
//   1 token      portable, avx2, avx512: QuantGemmPanelPortable -> GemmQx_K_Q8_KPortable [ref];
//                vnni, amx: GemvQx_K_Q8_K
//   n tokens     portable, avx2, avx512: GemmQx_K_Q8_KPortable [ref]; vnni: GemmQx_K_Q8_KGroup16
//                (the last few tokens of a call by GemvQx_K_Q8_K); amx: GemmQx_K_Q8_KAmx
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/gguf_reader.h"
#include "worker/backend/cpu/quantized_activations.h"

namespace pagoda::worker::cpu {

// kAvx512Vnni: the AVX-512 table with the products of quantized weights done by VNNI byte dot
// products (vpdpbusd / vpdpwssd), on activations packed for them (pack_activations, 16 tokens
// to a group) for products of several tokens; everything else as kAvx512.
// kAvx512Amx: kAvx512Vnni with the products of quantized weights (Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K) done by AMX tile dot products (tdpbssd / tdpbusd) on activations packed for them
// (pack_activations), and, where the CPU has AMX-BF16, those of BF16 weights by bfloat16 tile
// dot products (tdpbf16ps, float_gemm_panel); it needs the OS to grant the process the AMX tile
// state, which IsaSupported asks for.
enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Amx = 4 };

// "portable", "avx2", "avx512", "avx512vnni", "avx512amx"
std::string CpuIsaName(CpuIsa isa);
// "auto" (or empty) = the best the CPU supports; otherwise one of the names above, refused when
// the CPU lacks it.
absl::StatusOr<CpuIsa> ResolveCpuIsa(std::string_view name);
CpuIsa BestSupportedIsa();
bool IsaSupported(CpuIsa isa);
// Whether the table multiplies quantized weights by 8-bit activations with SIMD integer dot
// products (avx512vnni, avx512amx); the others' quant_gemm_panel is the portable code.
bool HasIntegerProducts(CpuIsa isa);

// out[t * ldo + r] = sum_k x[t * ldx + k] * w[r * ldw + k] for t < num_tokens, r < rows, over
// one block of k at a time: each output keeps its table's lane sums (one partial sum per SIMD
// lane, kLanes of them, lane l summing k = l mod kLanes in order) in `lanes` between the calls
// for consecutive blocks of one row range, so splitting k into blocks (every block but the last
// a multiple of 16 long) gives the same bits as one call over the whole row.
inline constexpr int kMaxLanes = 16;
struct GemmPanelArgs {
  const float* x;  // [num_tokens][ldx], at the block's first k
  const float* w;  // [rows][ldw], at the block's first k
  float* out;      // [num_tokens][ldo], columns [0, rows) written when `finish`
  float* lanes;    // [num_tokens][rows][kMaxLanes]: lane sums carried between blocks (may be
                   // null for a single block: !resume && finish)
  int num_tokens;
  int rows;
  int k;  // the block's length
  int ldx;
  int ldw;
  int ldo;
  bool resume;  // start from `lanes` (else from zero): not the first block
  bool finish;  // reduce the lanes into `out` (else store them to `lanes`): the last block
};

// Most tokens one panel call multiplies.
inline constexpr int kMaxPanelTokens = 256;

// out[t * ldo + r] = sum_k w[r][k] * x[t][k] for a quantized weight type (Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K), with the activations as the records of quantized_activations.h: the products of
// weight and activation integers are summed exactly in int32 per block (or per 4-element group),
// and only those sums meet the float scales. A row's result does not depend on num_tokens,
// rows, or where in the panel it is.
struct QuantGemmArgs {
  common::GgmlType type;
  const uint8_t* x;  // [num_tokens][x_stride]: quantize_activations(type, ...) records
  const uint8_t* w;  // [rows][w_stride]: the panel's rows in ggml's block format
  float* out;        // [num_tokens][ldo], columns [0, rows) written
  size_t x_stride;
  size_t w_stride;
  int num_tokens;  // <= kMaxPanelTokens
  int rows;
  int k;  // a multiple of the type's block
  int ldo;
  // Tables with pack_activations, products of 2 or more tokens: the same tokens' activations
  // as packed by it, the groups of kPackTokens tokens from this call's first token
  // (x_packed_stride bytes each); else null.
  const uint8_t* x_packed = nullptr;
  size_t x_packed_stride = 0;
};

// Tokens per group of packed activations (KernelTable::pack_activations).
inline constexpr int kPackTokens = 16;

// out[t * ldo + r] = sum_k w[r][k] * x[t][k] for float weights of a type the table multiplies
// on its own (float_group_columns > 0), with the activations as packed by
// pack_float_activations (the AMX table: BF16 weights, each activation split into two bfloat16
// terms, hi + lo). A row's result does not depend on num_tokens, rows, or where in the panel it
// is.
struct FloatGemmArgs {
  common::GgmlType type;
  // The groups of `columns` tokens (kPackTokens; 1 for a product of one token) from this
  // call's first token, x_packed_stride (float_group_bytes) bytes each.
  const uint8_t* x_packed;
  size_t x_packed_stride;
  int columns;
  const uint8_t* w;  // [rows][w_stride]: the panel's rows
  size_t w_stride;
  float* out;  // [num_tokens][ldo], columns [0, rows) written
  int ldo;
  int num_tokens;  // <= kMaxPanelTokens
  int rows;
  int k;
};

// out[r] = sum_k w[r][k] * x[k] for one token and float weights (F32, F16, BF16) read as they
// are: each row from k = 0 to k in one pass, in the same lanes and the same reduction as
// gemm_panel over the decoded rows of a one-token product (the lanes carry over exactly
// between gemm_panel's blocks, so the bits are those of every block size).
struct FloatGemvArgs {
  common::GgmlType type;
  const float* x;    // [k]
  const uint8_t* w;  // [rows][w_stride]
  size_t w_stride;
  float* out;  // [rows]
  int rows;    // <= kMaxGemvRows
  int k;
  const uint8_t* prefetch;  // rows read next (the next panel's), asked for as w is read; or null
};
inline constexpr int kMaxGemvRows = 8;

// Causal attention of one query head of one token over its sequence's pages, positions
// [0, last_pos], with an online softmax.
struct AttentionHeadArgs {
  const float* q;           // [head_dim]
  const uint16_t* k_cache;  // [num_pages][page_size][kv_stride] F16; head at +head_offset
  const uint16_t* v_cache;  // same layout
  const int32_t* pages;     // the sequence's page ids
  float* out;               // [head_dim]
  int32_t last_pos;
  size_t kv_stride;    // n_kv_heads * head_dim
  size_t head_offset;  // kv head * head_dim
  int head_dim;        // <= kMaxHeadDim
  int page_size;
  float scale;
};
inline constexpr int kMaxHeadDim = 256;

struct KernelTable {
  CpuIsa isa;
  // Decodes n elements (a whole number of blocks) of a row of a supported type.
  void (*dequantize_row)(common::GgmlType type, const uint8_t* row, int n, float* out);
  void (*gemm_panel)(const GemmPanelArgs& args);
  void (*quant_gemm_panel)(const QuantGemmArgs& args);
  // Writes one token's record of quantized_activations.h (x: k elements, k a multiple of the
  // type's block).
  void (*quantize_activations)(common::GgmlType type, const float* x, int k, uint8_t* out);
  void (*attention_head)(const AttentionHeadArgs& args);
  // out = x * weight / sqrt(mean(x^2) + eps) over one row; out may equal x.
  void (*rms_norm_row)(const float* x, const float* weight, float* out, int dim, float eps);
  void (*swiglu)(float* gate, const float* up, size_t n);  // gate = silu(gate) * up
  void (*add)(float* x, const float* y, size_t n);         // x += y
  // out = IEEE half of x, rounded to nearest even (the KV cache's values): the same bits on
  // every table for every value but NaNs (which stay NaNs).
  void (*float_to_half)(const float* x, size_t n, uint16_t* out);
  // Optional (null in tables that read the records as they are): bytes of one group of
  // kPackTokens tokens' packed activations for weights of `type` over rows of k elements (0:
  // this type's products read the records), and the packing of `tokens` (<= kPackTokens)
  // consecutive records of record_bytes each into one group (missing tokens packed as zeros).
  size_t (*packed_group_bytes)(common::GgmlType type, int k) = nullptr;
  void (*pack_activations)(common::GgmlType type, const uint8_t* records, size_t record_bytes,
                           int tokens, int k, uint8_t* out) = nullptr;
  // Optional (null in tables that decode every float weight type to float32 for gemm_panel):
  // the group layout for a product of `product_tokens` tokens with weights of `type` over rows
  // of k elements: tokens per group (`columns`, 0: this type's products decode to float) and
  // the bytes of a group; the packing of `tokens` (<= columns) rows of x (ldx floats apart)
  // into one group of that layout (missing tokens packed as zeros); the panel product.
  int (*float_group_columns)(common::GgmlType type, int product_tokens) = nullptr;
  size_t (*float_group_bytes)(int columns, int k) = nullptr;
  void (*pack_float_activations)(const float* x, size_t ldx, int tokens, int columns, int k,
                                 uint8_t* out) = nullptr;
  void (*float_gemm_panel)(const FloatGemmArgs& args) = nullptr;
  // Optional (null: one token's float products go through dequantize_row and gemm_panel too):
  // a product of one token with F32, F16 or BF16 weights, with gemm_panel's bits.
  void (*float_gemv)(const FloatGemvArgs& args) = nullptr;
};

// The table for `isa`; IsaSupported(isa) must hold.
const KernelTable& Kernels(CpuIsa isa);

// Per-ISA tables, defined in kernels_{portable,avx2,avx512}.cc.
extern const KernelTable kPortableKernels;
extern const KernelTable kAvx2Kernels;
extern const KernelTable kAvx512Kernels;
// kAvx512Kernels' quant_gemm_panel with VNNI, and the packing of the activations of every
// quantized type's products of several tokens (kernels_avx512_vnni.cc); Kernels() builds its
// table.
void QuantGemmPanelAvx512Vnni(const QuantGemmArgs& args);
size_t PackedGroupBytesAvx512Vnni(common::GgmlType type, int k);
void PackActivationsAvx512Vnni(common::GgmlType type, const uint8_t* records, size_t record_bytes,
                               int tokens, int k, uint8_t* out);
// The AMX table's quantized products and packing (kernels_amx.cc): every quantized type on AMX
// tiles (one token by VNNI dot products with the same integer sums and float steps).
void QuantGemmPanelAmx(const QuantGemmArgs& args);
size_t PackedGroupBytesAmx(common::GgmlType type, int k);
void PackActivationsAmx(common::GgmlType type, const uint8_t* records, size_t record_bytes,
                        int tokens, int k, uint8_t* out);
// The AMX table's BF16 products (kernels_amx.cc), used where the CPU also has AMX-BF16 and
// AVX512-BF16 (kernel_table.cc).
int FloatGroupColumnsAmx(common::GgmlType type, int product_tokens);
size_t FloatGroupBytesAmx(int columns, int k);
void PackFloatActivationsAmx(const float* x, size_t ldx, int tokens, int columns, int k,
                             uint8_t* out);
void FloatGemmPanelAmx(const FloatGemmArgs& args);

}  // namespace pagoda::worker::cpu
