// Products of quantized weights with quantized activations on AVX-512 VNNI (the avx512vnni
// table: kAvx512Kernels with this quant_gemm_panel). Compiled with VNNI for this file only
// (CMakeLists.txt); called only where the CPU has it (kernel_table.cc).
//
// A tile of RB weight rows x TB tokens walks the row 64 elements at a time. The weight bytes of
// a chunk are unpacked once per tile into one register per row and multiplied with every token's
// 64 activation bytes by vpdpbusd: 16 int32 lanes, each the exact sum of 4 byte products.
//   Q8_0 / Q4_0 (kBlock32): a chunk is two blocks; the weights are signed and the activations
//     offset by 128 (vpdpbusd multiplies unsigned by signed bytes), so each lane starts from
//     -128 x its weights' sum; lanes are scaled by d_w * d_x of their block into float lanes.
//   Q4_K / Q5_K / Q6_K (kSuper256): the unsigned weights meet signed activations; vpdpwssd
//     scales each lane by its sub-block's integer scale into int32 lane sums of the super-block
//     (Q4_K/Q5_K mins and Q6_K's offset of 32 come from the activations' sub-block sums), which
//     are scaled by d_w * d_x into the float lanes once per 256 elements.
// Every output's operations are the same in every tile shape, so results are batch-invariant;
// the 16 float lanes are reduced in ReduceAdd's fixed tree.
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

template <GgmlType kType, int RB, int TB>
void TileSuper(const QuantGemmArgs& a, int r0, int t0) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  __m512 acc[RB][TB];
  for (int r = 0; r < RB; ++r) {
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int sb = 0; sb < a.k / 256; ++sb) {
    const uint8_t* p[RB];
    SuperScales scales[RB];
    for (int r = 0; r < RB; ++r) {
      p[r] = a.w + static_cast<size_t>(r0 + r) * a.w_stride + sb * kBytes;
      PrefetchAhead<kBytes>(p[r], a.w_stride);
      LoadSuperScales<kType>(p[r], &scales[r]);
    }
    const size_t x_offset = static_cast<size_t>(sb) * kSuperRecordBytes;
    __m512i sum[RB][TB];
    for (int r = 0; r < RB; ++r) {
      for (int t = 0; t < TB; ++t) sum[r][t] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; ++c) {
      __m512i w[RB];
      for (int r = 0; r < RB; ++r) w[r] = LoadSuperChunk<kType>(p[r], c);
      for (int t = 0; t < TB; ++t) {
        const __m512i xv =
            _mm512_loadu_si512(a.x + static_cast<size_t>(t0 + t) * a.x_stride + x_offset + 64 * c);
        for (int r = 0; r < RB; ++r) {
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], xv);
          sum[r][t] = _mm512_dpwssd_epi32(sum[r][t], dot, scales[r].chunk[c]);
        }
      }
    }
    for (int t = 0; t < TB; ++t) {
      const uint8_t* rec = a.x + static_cast<size_t>(t0 + t) * a.x_stride + x_offset;
      float dx_value;
      std::memcpy(&dx_value, rec + kSuperScaleOffset, sizeof(dx_value));
      const __m512 dx = _mm512_set1_ps(dx_value);
      for (int r = 0; r < RB; ++r) {
        if constexpr (kType == GgmlType::Q6_K) {
          // The weights were stored as q + 32: take 32 x scale x the activations' sums.
          const __m256i sums16 =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kSuperSums16Offset));
          const __m256i offset =
              _mm256_dpwssd_epi32(_mm256_setzero_si256(), scales[r].words, sums16);
          sum[r][t] = _mm512_sub_epi32(sum[r][t], _mm512_zextsi256_si512(offset));
        }
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][t]), _mm512_mul_ps(scales[r].d, dx),
                                    acc[r][t]);
        if constexpr (kType != GgmlType::Q6_K) {
          const __m128i sums32 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kSuperSums32Offset));
          const __m128i mins = _mm_dpwssd_epi32(_mm_setzero_si128(),
                                                _mm256_castsi256_si128(scales[r].words), sums32);
          acc[r][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi128_si512(mins)),
                                       _mm512_mul_ps(scales[r].dmin, dx), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < TB; ++t) {
    float* out = a.out + static_cast<size_t>(t0 + t) * a.ldo + r0;
    for (int r = 0; r < RB; ++r) out[r] = ReduceAdd(acc[r][t]);
  }
}

// ---- Tile tables and the panel driver ----

// Tiles of up to kRowBlock rows x kTokenBlock tokens: a batch's tiles take kTokenBlock tokens
// and kWideRows rows (each row's unpacked chunk then serves 8 tokens); short batches (one or
// two tokens: decode of one or two sequences) take kRowBlock rows.
constexpr int kRowBlock = 4;
constexpr int kWideRows = 2;
constexpr int kTokenBlock = 8;
using TileFn = void (*)(const QuantGemmArgs&, int, int);
using TileGrid = std::array<std::array<TileFn, kTokenBlock>, kRowBlock>;

template <GgmlType kType, int RB, int TB>
void TileFor(const QuantGemmArgs& a, int r0, int t0) {
  if constexpr (ActivationFormatFor(kType) == ActivationFormat::kBlock32) {
    TileBlock32<kType, RB, TB>(a, r0, t0);
  } else {
    TileSuper<kType, RB, TB>(a, r0, t0);
  }
}

template <GgmlType kType, int RB, int... T>
constexpr std::array<TileFn, kTokenBlock> GridRow(std::integer_sequence<int, T...>) {
  return {&TileFor<kType, RB, T + 1>...};
}
template <GgmlType kType, int... R>
constexpr TileGrid Grid(std::integer_sequence<int, R...>) {
  return {GridRow<kType, R + 1>(std::make_integer_sequence<int, kTokenBlock>{})...};
}
template <GgmlType kType>
constexpr TileGrid kGrid = Grid<kType>(std::make_integer_sequence<int, kRowBlock>{});

const TileGrid* GridFor(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return &kGrid<GgmlType::Q8_0>;
    case GgmlType::Q4_0:
      return &kGrid<GgmlType::Q4_0>;
    case GgmlType::Q4_K:
      return &kGrid<GgmlType::Q4_K>;
    case GgmlType::Q5_K:
      return &kGrid<GgmlType::Q5_K>;
    case GgmlType::Q6_K:
      return &kGrid<GgmlType::Q6_K>;
    default:
      return nullptr;
  }
}

}  // namespace

void QuantGemmPanelAvx512Vnni(const QuantGemmArgs& a) {
  const TileGrid& grid = *GridFor(a.type);
  for (int t0 = 0; t0 < a.num_tokens; t0 += kTokenBlock) {
    const int tb = a.num_tokens - t0 < kTokenBlock ? a.num_tokens - t0 : kTokenBlock;
    const int row_block = tb <= 2 ? kRowBlock : kWideRows;
    for (int r0 = 0; r0 < a.rows; r0 += row_block) {
      const int rb = a.rows - r0 < row_block ? a.rows - r0 : row_block;
      grid[rb - 1][tb - 1](a, r0, t0);
    }
  }
}

}  // namespace pagoda::worker::cpu
