// Products of quantized weights with quantized activations on AVX-512 VNNI (the avx512vnni
// table: kAvx512Kernels with this quant_gemm_panel, and the packing of Q4_K/Q5_K/Q6_K
// activations). Compiled with VNNI for this file only (CMakeLists.txt); called only where the
// CPU has it (kernel_table.cc).
//
// Q8_0 / Q4_0 (kBlock32): a tile of RB weight rows x TB tokens walks the row 64 elements (two
// blocks) at a time. The weight bytes of a chunk are unpacked once per tile into one register
// per row and multiplied with every token's 64 activation bytes by vpdpbusd: 16 int32 lanes,
// each the exact sum of 4 byte products. The weights are signed and the activations offset by
// 128 (vpdpbusd multiplies unsigned by signed bytes), so each lane starts from -128 x its
// weights' sum; lanes are scaled by d_w * d_x of their block into float lanes, which are
// reduced in ReduceAdd's fixed tree. Every output's operations are the same in every tile
// shape, so results are batch-invariant.
//
// Q4_K / Q5_K / Q6_K (kSuper256): each (row, token) sums a super-block's products exactly into
// the integers of super_blocks_avx512.inc and folds them there: one token at a time
// (OneTokenSuperRows), or 16 tokens to a register's lanes (SuperPanel, below).
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

using common::GgmlType;

#include "worker/backend/cpu/avx512_common.inc"

// Asks for the bytes of this block position `kLeadRows` rows further down, into L2: the rows
// the tiles after this one read (rows are short, a few hundred bytes, so the hardware
// prefetcher sees no stream long enough to follow). Into L2 (prefetcht1) rather than L1
// measured Q8_0 decode steps of batch 1 1.6-2x as fast and Q4_K/Q5_K/Q6_K GEMV 15-35% faster on
// an AMD EPYC (Zen 4) VM in alternating runs, batches of 16 within noise.
constexpr int kLeadRows = 8;
template <size_t kBytes>
inline void PrefetchAhead(const uint8_t* p, size_t row_stride) {
  const uint8_t* ahead = p + kLeadRows * row_stride;
  for (size_t o = 0; o < kBytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T1);
}

// ---- kBlock32: Q8_0, Q4_0 ----

// The signed weights of blocks b and b+1 (`two`) or of block b alone (upper half zero), and
// their scales d in lanes 0-7 and 8-15.
template <GgmlType kType>
inline void LoadBlockPair(const uint8_t* p, bool two, __m512i* w, __m512* scale) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const float d0 = LoadHalf(p), d1 = two ? LoadHalf(p + kBytes) : 0.0f;
  *scale = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
  if constexpr (kType == GgmlType::Q8_0) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i b1 = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2))
                           : _mm256_setzero_si256();
    *w = _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1);
  } else {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i q1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBytes + 2))
                           : _mm_setzero_si128();
    const __m256i v = _mm256_set_m128i(q1, q0);
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(v, nib);                        // elements 0-15
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);  // elements 16-31
    // 128-bit lanes [b0 lo, b1 lo, b0 hi, b1 hi] -> [b0 lo, b0 hi, b1 lo, b1 hi].
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i ordered = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    const __m512i eight = two ? _mm512_set1_epi8(8)
                              : _mm512_inserti64x4(_mm512_set1_epi8(8), _mm256_setzero_si256(), 1);
    *w = _mm512_sub_epi8(ordered, eight);
  }
}

template <GgmlType kType, int RB, int TB>
void TileBlock32(const QuantGemmArgs& a, int r0, int t0) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  __m512 acc[RB][TB];
  for (int r = 0; r < RB; ++r) {
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int nb = a.k / 32;
  const size_t scale_offset = Block32ScaleOffset(a.k);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    __m512i w[RB], start[RB];
    __m512 ws[RB];
    for (int r = 0; r < RB; ++r) {
      const uint8_t* p = a.w + static_cast<size_t>(r0 + r) * a.w_stride + b * kBytes;
      PrefetchAhead<2 * kBytes>(p, a.w_stride);
      LoadBlockPair<kType>(p, two, &w[r], &ws[r]);
      // Lanes start at -128 x their weights' sum, undoing the activations' offset.
      start[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, w[r]));
    }
    const __mmask64 bytes_mask = two ? ~__mmask64{0} : __mmask64{0xFFFFFFFF};
    const __mmask16 lanes_mask = two ? __mmask16{0xFFFF} : __mmask16{0x00FF};
    for (int t = 0; t < TB; ++t) {
      const uint8_t* rec = a.x + static_cast<size_t>(t0 + t) * a.x_stride;
      const __m512i xv = _mm512_maskz_loadu_epi8(bytes_mask, rec + 32 * b);
      const __m512 xs = _mm512_maskz_loadu_ps(
          lanes_mask, reinterpret_cast<const float*>(rec + scale_offset) + 8 * b);
      for (int r = 0; r < RB; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(start[r], xv, w[r]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws[r], xs), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < TB; ++t) {
    float* out = a.out + static_cast<size_t>(t0 + t) * a.ldo + r0;
    for (int r = 0; r < RB; ++r) out[r] = ReduceAdd(acc[r][t]);
  }
}

// ---- kSuper256: Q4_K, Q5_K, Q6_K ----

#include "worker/backend/cpu/super_blocks_avx512.inc"

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
// broadcast load, and per sub-block a vpmulld and a vpaddd; tiles whose lanes held 16 positions
// of one token took a vpdpbusd, a vpdpwssd and about two instructions of fold per 64. Q4_K,
// Q5_K and Q6_K GEMM of 64 tokens measured 2.7-3.2x as fast, decode steps of 16 sequences of
// the Q4_K_M model 1.5-1.9x, on an AMD EPYC (Zen 4) VM.

// A slab of 8 rows' weights (kSuperSlab super-blocks, 2,048 elements: 16 KiB of bytes), with
// each row's scales, correction and folds.
struct SuperSlab {
  alignas(64) int8_t q[kSuperSlab][kSuperRows][256];
  int32_t scale[kSuperSlab][kSuperRows][16];  // Q4_K/Q5_K: 8 sub-blocks of 32; Q6_K: 16 of 16
  int32_t correction[kSuperSlab][kSuperRows];
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
  for (int r = 0; r < kSuperRows; ++r) {
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
  __m512i s[kSuperRows];
  for (int r = 0; r < kSuperRows; ++r) s[r] = _mm512_setzero_si512();
  for (int sub = 0; sub < 64 / kDwords; ++sub) {
    __m512i x[kDwords];  // dword kDwords * sub + i of the 16 tokens (Q6_K: + 128 per byte)
    for (int i = 0; i < kDwords; ++i) {
      x[i] = _mm512_load_si512(packed + 64 * (kDwords * sub + i));
      if constexpr (kType == GgmlType::Q6_K) x[i] = _mm512_xor_si512(x[i], flip);
    }
    for (int r = 0; r < kSuperRows; ++r) {
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
  for (int r = 0; r < kSuperRows; ++r) {
    s[r] = _mm512_sub_epi32(s[r], _mm512_set1_epi32(slab.correction[j][r]));
  }
  FoldGroup<kType>(slab.folds, j, packed, s, acc);
}

// Fewest tokens a group multiplies: fewer (a product of a few tokens, or the last few of a
// larger one) go one token at a time, rereading the panel's rows from the cache.
constexpr int kMinGroupTokens = 5;

template <GgmlType kType>
void SuperPanel(const QuantGemmArgs& a) {
  int grouped = 0;
  if (a.x_packed != nullptr) {
    const int rest = a.num_tokens % kPackTokens;
    grouped = a.num_tokens - rest + (rest >= kMinGroupTokens ? rest : 0);
  }
  SuperSlab slab;
  ForSuperGroups(
      a, grouped,
      [&](int r0, int rows, int s0, int count) {
        UnpackSuperSlab<kType>(a, r0, rows, s0, count, &slab);
      },
      [&](int j, const uint8_t* packed, __m512* acc) {
        SuperBlockOnGroup<kType>(slab, j, packed, acc);
      },
      [&](int r0, int rows) {
        for (int t = grouped; t < a.num_tokens; ++t) {
          QuantGemmArgs one = a;
          one.x = a.x + static_cast<size_t>(t) * a.x_stride;
          OneTokenSuperRows<kType, _MM_HINT_T1>(one, r0, rows,
                                                a.out + static_cast<size_t>(t) * a.ldo + r0);
        }
      });
}

// ---- Q8_0 / Q4_0 tile tables and the panel driver ----

// Tiles of up to kRowBlock rows x kTokenBlock tokens: a batch's tiles take kTokenBlock tokens
// and kWideRows rows (each row's unpacked chunk then serves 8 tokens); short batches (one or
// two tokens: decode of one or two sequences) take kRowBlock rows.
constexpr int kRowBlock = 4;
constexpr int kWideRows = 2;
constexpr int kTokenBlock = 8;
using TileFn = void (*)(const QuantGemmArgs&, int, int);
using TileGrid = std::array<std::array<TileFn, kTokenBlock>, kRowBlock>;

template <GgmlType kType, int RB, int... T>
constexpr std::array<TileFn, kTokenBlock> GridRow(std::integer_sequence<int, T...>) {
  return {&TileBlock32<kType, RB, T + 1>...};
}
template <GgmlType kType, int... R>
constexpr TileGrid Grid(std::integer_sequence<int, R...>) {
  return {GridRow<kType, R + 1>(std::make_integer_sequence<int, kTokenBlock>{})...};
}
template <GgmlType kType>
constexpr TileGrid kGrid = Grid<kType>(std::make_integer_sequence<int, kRowBlock>{});

}  // namespace

void QuantGemmPanelAvx512Vnni(const QuantGemmArgs& a) {
  switch (a.type) {
    case GgmlType::Q4_K:
      SuperPanel<GgmlType::Q4_K>(a);
      return;
    case GgmlType::Q5_K:
      SuperPanel<GgmlType::Q5_K>(a);
      return;
    case GgmlType::Q6_K:
      SuperPanel<GgmlType::Q6_K>(a);
      return;
    default:
      break;
  }
  const TileGrid& grid = a.type == GgmlType::Q8_0 ? kGrid<GgmlType::Q8_0> : kGrid<GgmlType::Q4_0>;
  for (int t0 = 0; t0 < a.num_tokens; t0 += kTokenBlock) {
    const int tb = a.num_tokens - t0 < kTokenBlock ? a.num_tokens - t0 : kTokenBlock;
    const int row_block = tb <= 2 ? kRowBlock : kWideRows;
    for (int r0 = 0; r0 < a.rows; r0 += row_block) {
      const int rb = a.rows - r0 < row_block ? a.rows - r0 : row_block;
      grid[rb - 1][tb - 1](a, r0, t0);
    }
  }
}

size_t PackedGroupBytesAvx512Vnni(GgmlType type, int k) {
  return ActivationFormatFor(type) == ActivationFormat::kSuper256
             ? static_cast<size_t>(k / 256) * kSuperPackedBytes
             : 0;
}

void PackActivationsAvx512Vnni(GgmlType type, const uint8_t* records, size_t record_bytes,
                               int tokens, int k, uint8_t* out) {
  if (ActivationFormatFor(type) == ActivationFormat::kSuper256) {
    PackSuperActivations(records, record_bytes, tokens, k, out);
  }
}

}  // namespace pagoda::worker::cpu
