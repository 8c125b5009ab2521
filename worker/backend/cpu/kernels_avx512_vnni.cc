// The avx512vnni table's products of quantized weights with quantized activations on AVX-512
// VNNI (kAvx512Kernels with this quant_gemm_panel, and the packing of the activations of
// products of several tokens; kernel_table.cc builds the table). Compiled with VNNI for this
// file only (CMakeLists.txt); called only where the CPU has it (kernel_table.cc).
//
// Per weight type (QuantGemmPanelAvx512Vnni, at the end):
//   Q8_0, Q4_0        several tokens: GemmQx_0_Q8_0Group16; one token, and the last few of a
//                     call: GemvQx_0_Q8_0 (quant_products_avx512.inc)
//   Q4_K, Q5_K, Q6_K  several tokens: GemmQx_K_Q8_KGroup16; one token, and the last few of a
//                     call: GemvQx_K_Q8_K (quant_products_avx512.inc)
// The portable references are GemmQx_0_Q8_0Portable and GemmQx_K_Q8_KPortable
// (kernels_body.inc).
//
// Every (row, token) sums a block's (Q8_0, Q4_0) or super-block's (Q4_K, Q5_K, Q6_K) products
// exactly into the integers of quant_products_avx512.inc and folds them there, so the results
// are batch-invariant, and the bits of the AMX table's: one token at a time by GemvQx_0_Q8_0 /
// GemvQx_K_Q8_K (a register's lanes hold 64 positions of the token's row), or 16 tokens at a
// time with one token per lane (GemmQx_0_Q8_0Group16, GemmQx_K_Q8_KGroup16, below): each
// vpdpbusd then multiplies 4 weight bytes, broadcast to every lane, with 4 bytes of each of the
// 16 tokens, so nothing is summed across lanes and each block's sums are folded for 16 tokens at
// once.
#include <immintrin.h>

#include <cstring>

#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

using common::GgmlType;

#include "worker/backend/cpu/avx512_common.inc"
#include "worker/backend/cpu/quant_products_avx512.inc"

// Asks for the bytes of this block position `kLeadRows` rows further down: the rows the next
// slab unpacks (rows are short, a few hundred bytes, so the hardware prefetcher sees no stream
// long enough to follow). Into L2 (prefetcht1), where the next slab's unpacking reads them from,
// as do this table's one-token kernels: into L1 ran slower for one token and no faster for 16
// (bench/journal/cpu-kernel-notes.md).
constexpr int kLeadRows = 8;
template <size_t kBytes>
inline void PrefetchAhead(const uint8_t* p, size_t row_stride) {
  const uint8_t* ahead = p + kLeadRows * row_stride;
  for (size_t o = 0; o < kBytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T1);
}

// Fewest tokens a group multiplies: fewer (a product of a few tokens, or the last few of a
// larger one) go one token at a time, rereading the panel's rows from the cache, which runs as
// fast as a group at those counts (bench/journal/cpu-kernel-notes.md).
constexpr int kMinGroupTokens = 5;

// A call's products: its full groups of tokens, and the last one if it has at least
// kMinGroupTokens, by ForGroups (none without packed activations: a call of one token); then
// each other token by one_token(its args, r0, rows, out) per 8 rows.
template <typename Unpack, typename Block>
void GroupsThenSingles(const QuantGemmArgs& a, int units, int slab_units, size_t unit_bytes,
                       Unpack unpack, Block block,
                       void (*one_token)(const QuantGemmArgs&, int, int, float*)) {
  int grouped = 0;
  if (a.x_packed != nullptr) {
    const int rest = a.num_tokens % kPackTokens;
    grouped = a.num_tokens - rest + (rest >= kMinGroupTokens ? rest : 0);
  }
  ForGroups(a, grouped, units, slab_units, unit_bytes, unpack, block, [&](int r0, int rows) {
    for (int t = grouped; t < a.num_tokens; ++t) {
      QuantGemmArgs one = a;
      one.x = a.x + static_cast<size_t>(t) * a.x_stride;
      one_token(one, r0, rows, a.out + static_cast<size_t>(t) * a.ldo + r0);
    }
  });
}

// ---- Q4_K, Q5_K, Q6_K: GemmQx_K_Q8_KGroup16 ----

// Groups of kPackTokens tokens (activations packed by PackSuperActivations, one token per
// lane) multiply 8 rows at a time, with a slab of super-blocks unpacked ahead per 8 rows: each
// row's weights as bytes in the records' order, its sub-blocks' scales as int32. One vpdpbusd
// multiplies 4 weight bytes, broadcast from the slab, with 4 bytes of each of the 16 tokens, so
// every lane is one token's sum and nothing is summed across lanes; each sub-block's sums are
// then multiplied by its scale (vpmulld) into S. Q4_K/Q5_K weights are unsigned (vpdpbusd's
// first operand) and meet the signed activations as they are. Q6_K's are stored signed (q - 32)
// and meet the activations + 128, so S gains 128 x (sum of scale x weight), which the slab
// keeps per row and super-block (`correction`) and takes off. M comes from vpdpwssd on the
// packed sub-block sums, and both fold as above. Per 64 products: one vpdpbusd and one
// broadcast load, and per sub-block a vpmulld and a vpaddd (lanes holding 16 positions of one
// token would need a vpdpwssd and the fold's instructions per 64 products besides).

// A slab of 8 rows' weights (kSuperSlab super-blocks, 2,048 elements: 16 KiB of bytes), with
// each row's scales, correction and folds.
struct SuperSlab {
  alignas(64) int8_t q[kSuperSlab][kKernelRows][256];
  int32_t scale[kSuperSlab][kKernelRows][16];  // Q4_K/Q5_K: 8 sub-blocks of 32; Q6_K: 16 of 16
  int32_t correction[kSuperSlab][kKernelRows];
  SuperFolds folds;
};

// Dwords (4 elements) per sub-block, in the records' order.
template <GgmlType kType>
constexpr int kSubDwords = kType == GgmlType::Q6_K ? 4 : 8;

// Unpacks one row's super-block (at p) into row r of slot j of the slab.
template <GgmlType kType>
inline void UnpackSuperRow(const uint8_t* p, int r, int j, SuperSlab* slab) {
  SuperScales s;
  LoadSuperScales<kType>(p, &s);
  alignas(64) int32_t lanes[4][16];
  __m512i correction = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    __m512i q = LoadSuperChunk<kType>(p, c);
    if constexpr (kType == GgmlType::Q6_K) {
      q = _mm512_sub_epi8(q, _mm512_set1_epi8(32));
      // Each lane's 4 weights summed, times the lane's scale (low 16 bits of s.chunk[c]).
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), q);
      correction = _mm512_dpwssd_epi32(correction, sums, s.chunk[c]);
    }
    _mm512_store_si512(slab->q[j][r] + 64 * c, q);
    _mm512_store_si512(lanes[c], s.chunk[c]);
  }
  slab->correction[j][r] = kType == GgmlType::Q6_K ? 128 * _mm512_reduce_add_epi32(correction) : 0;
  constexpr int kSubs = 64 / kSubDwords<kType>;
  for (int sub = 0; sub < kSubs; ++sub) {
    const int dword = kSubDwords<kType> * sub;
    slab->scale[j][r][sub] = static_cast<int16_t>(lanes[dword / 16][dword % 16]);
  }
  slab->folds.Set<kType>(s, j, r);
}

// Super-blocks [sb0, sb0 + count) of rows [r0, r0 + rows) into the slab (missing rows zero).
template <GgmlType kType>
void UnpackSuperSlab(const QuantGemmArgs& a, int r0, int rows, int sb0, int count,
                     SuperSlab* slab) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  for (int r = 0; r < kKernelRows; ++r) {
    if (r >= rows) {
      for (int j = 0; j < count; ++j) {
        std::memset(slab->q[j][r], 0, sizeof(slab->q[j][r]));
        std::memset(slab->scale[j][r], 0, sizeof(slab->scale[j][r]));
        slab->correction[j][r] = 0;
        slab->folds.Clear(j, r);
      }
      continue;
    }
    const uint8_t* row = a.w + static_cast<size_t>(r0 + r) * a.w_stride;
    for (int j = 0; j < count; ++j) {
      const uint8_t* p = row + static_cast<size_t>(sb0 + j) * kBytes;
      PrefetchAhead<kBytes>(p, a.w_stride);
      UnpackSuperRow<kType>(p, r, j, slab);
    }
  }
}

// One super-block (slab slot j) of a group of 16 tokens into acc (lanes: the tokens).
template <GgmlType kType>
inline void SuperBlockOnGroup(const SuperSlab& slab, int j, const uint8_t* packed, __m512* acc) {
  constexpr int kDwords = kSubDwords<kType>;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i s[kKernelRows];
  for (int r = 0; r < kKernelRows; ++r) s[r] = _mm512_setzero_si512();
  for (int sub = 0; sub < 64 / kDwords; ++sub) {
    __m512i x[kDwords];  // dword kDwords * sub + i of the 16 tokens (Q6_K: + 128 per byte)
    for (int i = 0; i < kDwords; ++i) {
      x[i] = _mm512_load_si512(packed + 64 * (kDwords * sub + i));
      if constexpr (kType == GgmlType::Q6_K) x[i] = _mm512_xor_si512(x[i], flip);
    }
    for (int r = 0; r < kKernelRows; ++r) {
      const int8_t* w = slab.q[j][r] + 4 * kDwords * sub;
      __m512i dot = _mm512_setzero_si512();
      for (int i = 0; i < kDwords; ++i) {
        int32_t word;
        std::memcpy(&word, w + 4 * i, sizeof(word));
        if constexpr (kType == GgmlType::Q6_K) {
          dot = _mm512_dpbusd_epi32(dot, x[i], _mm512_set1_epi32(word));
        } else {
          dot = _mm512_dpbusd_epi32(dot, _mm512_set1_epi32(word), x[i]);
        }
      }
      s[r] =
          _mm512_add_epi32(s[r], _mm512_mullo_epi32(dot, _mm512_set1_epi32(slab.scale[j][r][sub])));
    }
  }
  for (int r = 0; r < kKernelRows; ++r) {
    s[r] = _mm512_sub_epi32(s[r], _mm512_set1_epi32(slab.correction[j][r]));
  }
  FoldGroup<kType>(slab.folds, j, packed, s, acc);
}

// Q4_K / Q5_K / Q6_K weights x Q8_K activations: groups of 16 tokens as above, the rest of the
// call's tokens by GemvQx_K_Q8_K. Reference: GemmQx_K_Q8_KPortable (kernels_body.inc).
template <GgmlType kType>
void GemmQx_K_Q8_KGroup16(const QuantGemmArgs& a) {
  SuperSlab slab;
  GroupsThenSingles(
      a, a.k / 256, kSuperSlab, kSuperPackedBytes,
      [&](int r0, int rows, int s0, int count) {
        UnpackSuperSlab<kType>(a, r0, rows, s0, count, &slab);
      },
      [&](int j, const uint8_t* packed, __m512* acc) {
        SuperBlockOnGroup<kType>(slab, j, packed, acc);
      },
      GemvQx_K_Q8_K<kType, _MM_HINT_T1>);
}

// ---- Q8_0 / Q4_0: GemmQx_0_Q8_0Group16 ----
//
// Groups of kPackTokens tokens (activations packed by PackBlock32Activations, one token per
// lane) multiply 8 rows at a time, with a slab of blocks unpacked ahead per 8 rows: each row's
// weights as signed bytes (Q4_0: q - 8), its d as float, and 128 x the sum of its weights per
// block. One vpdpbusd multiplies 4 weight bytes, broadcast from the slab, with the activations
// + 128 of 16 tokens; the block's sums, less the correction, are its exact int32 sums, folded
// as quant_products_avx512.inc describes (the bits of GemvQx_0_Q8_0 and of the AMX tiles).

// Blocks per unpacked slab of 8 rows (2,048 elements: 16 KiB of weight bytes).
constexpr int kBlockSlab = 64;

struct BlockSlab {
  alignas(64) int8_t q[kBlockSlab][kKernelRows][32];
  alignas(64) int32_t correction[kBlockSlab][kKernelRows];
  alignas(64) float d[kBlockSlab][kKernelRows];
};

// Blocks [b0, b0 + count) of rows [r0, r0 + rows) into the slab (missing rows zero), two
// blocks of the 8 rows at a time.
template <GgmlType kType>
void UnpackBlockSlab(const QuantGemmArgs& a, int r0, int rows, int b0, int count, BlockSlab* slab) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i scale_offsets = _mm512_add_epi32(
      _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(a.w_stride))),
      _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(static_cast<int>(kBytes)), 1));
  const __mmask8 valid = static_cast<__mmask8>((1u << rows) - 1);
  const uint8_t* w0 = a.w + static_cast<size_t>(r0) * a.w_stride;
  for (int j = 0; j < count; j += 2) {
    const bool two = j + 1 < count;
    const size_t at = static_cast<size_t>(b0 + j) * kBytes;
    __m512i sums[kKernelRows];
    for (int r = 0; r < kKernelRows; ++r) {
      __m512i w = _mm512_setzero_si512();
      if (r < rows) {
        const uint8_t* p = w0 + static_cast<size_t>(r) * a.w_stride + at;
        PrefetchAhead<2 * kBytes>(p, a.w_stride);
        if constexpr (kType == GgmlType::Q8_0) {
          const __m256i q1 =
              two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2))
                  : _mm256_setzero_si256();
          w = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
              q1, 1);
        } else {
          const __m512i eight =
              two ? _mm512_set1_epi8(8)
                  : _mm512_inserti64x4(_mm512_set1_epi8(8), _mm256_setzero_si256(), 1);
          w = _mm512_sub_epi8(Q4PairNibbles(p + 2, two ? p + kBytes + 2 : nullptr), eight);
        }
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(slab->q[j][r]), _mm512_castsi512_si256(w));
      if (two) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(slab->q[j + 1][r]),
                           _mm512_extracti64x4_epi64(w, 1));
      }
      sums[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), w);
    }
    // Lanes 0-7: block j's rows, 8-15: block j + 1's; correction[j] and [j + 1] are adjacent.
    const __mmask16 m = two ? __mmask16{0xFFFF} : __mmask16{0x00FF};
    _mm512_mask_store_epi32(slab->correction[j], m, _mm512_slli_epi32(ReduceRowPairs(sums), 7));
    const __mmask16 gather = static_cast<__mmask16>(valid | (two ? unsigned{valid} << 8 : 0u));
    const __m512i words =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), gather, scale_offsets, w0 + at, 1);
    _mm512_mask_store_ps(slab->d[j], m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
  }
}

// Block j of the slab times a group of 16 tokens into acc (lanes: the tokens).
inline void BlockOnGroup(const BlockSlab& slab, int j, const uint8_t* packed, __m512* acc) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i x[8];  // dword i of the block's 16 tokens, + 128 per byte
  for (int i = 0; i < 8; ++i) x[i] = _mm512_xor_si512(_mm512_load_si512(packed + 64 * i), flip);
  const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(packed + kBTileBytes));
  for (int r = 0; r < kKernelRows; ++r) {
    const int8_t* w = slab.q[j][r];
    __m512i dot = _mm512_setzero_si512();
    for (int i = 0; i < 8; ++i) {
      int32_t word;
      std::memcpy(&word, w + 4 * i, sizeof(word));
      dot = _mm512_dpbusd_epi32(dot, x[i], _mm512_set1_epi32(word));
    }
    const __m512i sum = _mm512_sub_epi32(dot, _mm512_set1_epi32(slab.correction[j][r]));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                             _mm512_mul_ps(_mm512_set1_ps(slab.d[j][r]), dx), acc[r]);
  }
}

// Q8_0 / Q4_0 weights x Q8_0 activations: groups of 16 tokens as above, the rest of the call's
// tokens by GemvQx_0_Q8_0. Reference: GemmQx_0_Q8_0Portable (kernels_body.inc).
template <GgmlType kType>
void GemmQx_0_Q8_0Group16(const QuantGemmArgs& a) {
  BlockSlab slab;
  GroupsThenSingles(
      a, a.k / 32, kBlockSlab, kPackedBlockBytes,
      [&](int r0, int rows, int b0, int count) {
        UnpackBlockSlab<kType>(a, r0, rows, b0, count, &slab);
      },
      [&](int j, const uint8_t* packed, __m512* acc) { BlockOnGroup(slab, j, packed, acc); },
      GemvQx_0_Q8_0<kType, _MM_HINT_T1>);
}

}  // namespace

void QuantGemmPanelAvx512Vnni(const QuantGemmArgs& a) {
  switch (a.type) {
    case GgmlType::Q8_0:
      return GemmQx_0_Q8_0Group16<GgmlType::Q8_0>(a);
    case GgmlType::Q4_0:
      return GemmQx_0_Q8_0Group16<GgmlType::Q4_0>(a);
    case GgmlType::Q4_K:
      return GemmQx_K_Q8_KGroup16<GgmlType::Q4_K>(a);
    case GgmlType::Q5_K:
      return GemmQx_K_Q8_KGroup16<GgmlType::Q5_K>(a);
    case GgmlType::Q6_K:
      return GemmQx_K_Q8_KGroup16<GgmlType::Q6_K>(a);
    default:
      return;  // MatMul quantizes activations for these types only
  }
}

size_t PackedGroupBytesAvx512Vnni(GgmlType type, int k) {
  switch (ActivationFormatFor(type)) {
    case ActivationFormat::kSuper256:
      return static_cast<size_t>(k / 256) * kSuperPackedBytes;
    case ActivationFormat::kBlock32:
      return static_cast<size_t>(k / 32) * kPackedBlockBytes;
    default:
      return 0;
  }
}

void PackActivationsAvx512Vnni(GgmlType type, const uint8_t* records, size_t record_bytes,
                               int tokens, int k, uint8_t* out) {
  if (ActivationFormatFor(type) == ActivationFormat::kSuper256) {
    PackSuperActivations(records, record_bytes, tokens, k, out);
  } else {
    PackBlock32Activations(records, record_bytes, tokens, k, out);
  }
}

}  // namespace pagoda::worker::cpu
