// The avx512amx table's products on AMX tiles: of quantized weights with quantized activations
// (AMX-INT8), and of BF16 weights with float activations (AMX-BF16); the rest of the table is
// the avx512vnni one (kernel_table.cc builds it). Compiled with AMX for this file only
// (CMakeLists.txt); called only where the CPU has it and the OS granted the tile state
// (kernel_table.cc).
//
// Per weight type (QuantGemmPanelAmx and FloatGemmPanelAmx, at the end):
//   Q8_0, Q4_0        several tokens: GemmQx_0_Q8_0Amx (tiles); one token: GemvQx_0_Q8_0
//                     (quant_products_avx512.inc). Reference: GemmQx_0_Q8_0Portable.
//   Q4_K, Q5_K, Q6_K  several tokens: GemmQx_K_Q8_KAmx (tiles); one token: GemvQx_K_Q8_K
//                     (quant_products_avx512.inc). Reference: GemmQx_K_Q8_KPortable.
//   BF16              where the CPU has AMX-BF16 and AVX512-BF16, one token and several:
//                     GemmBF16Amx. Reference: GemmPanelPortable over the decoded rows.
// (References in kernels_body.inc and kernels_portable.cc.)
//
// ---- Q8_0, Q4_0 weights on AMX-INT8 tiles ----
//
// One tile dot product (tdpbssd) multiplies 8 weight rows by 16 tokens over one block of 32
// elements: the A tile is the rows' 32 signed weights (Q8_0: read in place from the GGUF rows;
// Q4_0: unpacked to q - 8 first), the B tile the tokens' 32 signed activations, packed by
// PackActivationsAmx (tdpbssd wants 4 consecutive elements of one token per 32-bit column).
// Every (row, token) gets its block's exact int32 sum, and one float step per block folds it:
//   acc = fma(float(sum), d_w * d_x, acc)
// in block order, from zero. A token's result is that alone, whatever the other 15 tokens of its
// group (zeros when the batch has fewer) or the other rows: the table is batch-invariant.
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::worker::cpu {
namespace {

using common::GgmlType;

#include "worker/backend/cpu/avx512_common.inc"
#include "worker/backend/cpu/quant_products_avx512.inc"

constexpr int kTileRows = 8;  // weight rows per tile (the CPU backend's panels are 8 rows)
static_assert(kTileRows == kKernelRows);

bool OnTiles(GgmlType type) { return type == GgmlType::Q8_0 || type == GgmlType::Q4_0; }

// Tiles 0-1: C (8 rows x 16 int32), 2-3: A (8 rows x 32 bytes), 4-5: B (8 rows x 64 bytes); two
// of each, for two blocks in flight.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// The tile layouts of this file: the int8 products' (below), and the bfloat16 products' for
// groups of 16 tokens and of one token (GemmBF16Amx).
enum class TileMode { kNone, kInt8, kSuper, kBf16Group, kBf16One };

// The tile configuration is per thread; loaded by each thread that multiplies, again when it
// switches between int8 and bfloat16 products (which also zeroes the tiles).
void ConfigureTiles(TileMode mode) {
  thread_local TileMode current = TileMode::kNone;
  if (current == mode) return;
  TileConfig c{};
  c.palette_id = 1;
  if (mode == TileMode::kInt8) {
    for (int t = 0; t < 6; ++t) {
      c.rows[t] = kTileRows;
      c.colsb[t] = t == 2 || t == 3 ? 32 : 64;
    }
  } else if (mode == TileMode::kSuper) {
    // 0-3: C (8 rows x 16 int32), 4-5: A (8 rows x 64 bytes), 6-7: B (16 rows x 64 bytes).
    for (int t = 0; t < 8; ++t) {
      c.rows[t] = t < 6 ? kTileRows : 16;
      c.colsb[t] = 64;
    }
  } else {
    // 0-3: C (8 rows x `columns` float32), 4: A (8 rows x 32 bf16), 6-7: B (16 rows x
    // `columns` pairs of bf16).
    const int columns = mode == TileMode::kBf16Group ? kPackTokens : 1;
    for (int t = 0; t < 8; ++t) {
      if (t == 5) continue;
      c.rows[t] = t < 5 ? kTileRows : 16;
      c.colsb[t] = static_cast<uint16_t>(t == 4 ? 64 : 4 * columns);
    }
  }
  _tile_loadconfig(&c);
  current = mode;
}

// Rows [r0, r0 + rows) of block b as signed bytes in `buf` ([8][32], rows past `rows` zero),
// for Q4_0 (q - 8) and for a Q8_0 tile of fewer than 8 rows.
template <GgmlType kType>
inline void UnpackWeights(const QuantGemmArgs& a, int r0, int rows, int b, int8_t* buf) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const uint8_t* p = a.w + static_cast<size_t>(r0) * a.w_stride + b * kBytes + 2;
  const __m512i eight = _mm512_set1_epi8(8);
  if (kType == GgmlType::Q4_0 && rows == kTileRows) {
    for (int r = 0; r < kTileRows; r += 2, p += 2 * a.w_stride) {  // two rows per register
      _mm512_store_si512(buf + 32 * r, _mm512_sub_epi8(Q4PairNibbles(p, p + a.w_stride), eight));
    }
    return;
  }
  for (int r = 0; r < kTileRows; ++r, p += a.w_stride) {
    __m256i q = _mm256_setzero_si256();
    if (r < rows) {
      if constexpr (kType == GgmlType::Q8_0) {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      } else {
        q = _mm512_castsi512_si256(_mm512_sub_epi8(Q4PairNibbles(p, nullptr), eight));
      }
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 32 * r), q);
  }
}

// The A tile of block b: from `unpacked` ([blocks][8][32], the whole tile row's weights unpacked
// ahead) when set; else Q8_0's rows read in place (a full tile), or unpacked into wbuf now.
template <GgmlType kType>
inline const int8_t* WeightTile(const QuantGemmArgs& a, const int8_t* unpacked, int r0, int rows,
                                int b, int8_t* wbuf, size_t* stride) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  if (unpacked != nullptr) {
    *stride = 32;
    return unpacked + static_cast<size_t>(b) * kTileRows * 32;
  }
  if (kType == GgmlType::Q8_0 && rows == kTileRows) {
    *stride = a.w_stride;
    return reinterpret_cast<const int8_t*>(a.w + static_cast<size_t>(r0) * a.w_stride + b * kBytes +
                                           2);
  }
  UnpackWeights<kType>(a, r0, rows, b, wbuf);
  *stride = 32;
  return wbuf;
}

// Tile products of block b into C tile `c` from A tile `ta` and B tile `tb`, stored to `sums`.
// (GCC's tile intrinsics paste the tile number into their assembly: a literal, not a constant.)
#define PAGODA_BLOCK_SUMS(c, ta, tb)                                                             \
  template <GgmlType kType>                                                                      \
  inline void BlockSums##c(const QuantGemmArgs& a, const uint8_t* group, const int8_t* unpacked, \
                           int r0, int rows, int b, int8_t* wbuf, int32_t* sums) {               \
    size_t stride;                                                                               \
    const int8_t* w = WeightTile<kType>(a, unpacked, r0, rows, b, wbuf, &stride);                \
    _tile_loadd(ta, w, stride);                                                                  \
    _tile_loadd(tb, group + b * kPackedBlockBytes, 64);                                          \
    _tile_zero(c);                                                                               \
    _tile_dpbssd(c, ta, tb);                                                                     \
    _tile_stored(c, sums, 64);                                                                   \
  }
PAGODA_BLOCK_SUMS(0, 2, 4)
PAGODA_BLOCK_SUMS(1, 3, 5)
#undef PAGODA_BLOCK_SUMS

// Most blocks per row whose weight scales a tile row converts to float ahead (rows of 32,768
// elements; 32 KiB on the stack); longer rows convert each scale as its block is folded.
constexpr int kMaxScaleBlocks = 1024;

// The d of blocks [0, nb) of rows [r0, r0 + rows) as floats, dws[r * nb + b] (rows past `rows`
// zero): 16 blocks of a row per gather.
template <GgmlType kType>
void ConvertRowScales(const QuantGemmArgs& a, int r0, int rows, float* dws) {
  constexpr int kBytes = static_cast<int>(QuantBlockBytes(kType));
  const int nb = a.k / 32;
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(kBytes));
  for (int r = 0; r < kTileRows; ++r) {
    const uint8_t* row = a.w + static_cast<size_t>(r0 + r) * a.w_stride;
    for (int b = 0; b < nb; b += 16) {
      const __mmask16 m =
          nb - b >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (nb - b)) - 1);
      __m512 d = _mm512_setzero_ps();
      if (r < rows) {
        // 4 bytes at each block's start (its d, then 2 bytes of q): the low 16 bits are d.
        const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, offsets,
                                                          row + static_cast<size_t>(b) * kBytes, 1);
        d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
      }
      _mm512_mask_storeu_ps(dws + static_cast<size_t>(r) * nb + b, m, d);
    }
  }
}

// acc[r] (lanes: the group's tokens) += float(sums[r]) * d_w[r] * d_x, for block b; d_w from
// `dws` (ConvertRowScales) when set.
template <GgmlType kType>
inline void Fold(const QuantGemmArgs& a, const uint8_t* group, const float* dws, int r0, int rows,
                 int b, const int32_t* sums, __m512* acc) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const int nb = a.k / 32;
  const __m512 dx =
      _mm512_load_ps(reinterpret_cast<const float*>(group + b * kPackedBlockBytes + kBTileBytes));
  for (int r = 0; r < kTileRows; ++r) {
    float dw;
    if (dws != nullptr) {
      dw = dws[static_cast<size_t>(r) * nb + b];
    } else {
      dw = r < rows ? LoadHalf(a.w + static_cast<size_t>(r0 + r) * a.w_stride + b * kBytes) : 0.0f;
    }
    const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * r));
    acc[r] = _mm512_fmadd_ps(s, _mm512_mul_ps(_mm512_set1_ps(dw), dx), acc[r]);
  }
}

// Asks for rows [r0 + 8, r0 + 16) at blocks b and b + 1: the next tile's or panel's weights
// (rows are a few hundred bytes, too short a run for the hardware prefetcher; a prefetch past
// the matrix does not fault).
template <GgmlType kType>
inline void PrefetchNextRows(const QuantGemmArgs& a, int r0, int b) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  for (int r = 0; r < kTileRows; ++r) {
    const uint8_t* p = a.w + static_cast<size_t>(r0 + kTileRows + r) * a.w_stride + b * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + 2 * kBytes - 1), _MM_HINT_T0);
  }
}

// Tile row r0 (rows <= kTileRows weight rows) x one group of 16 tokens, two blocks in flight;
// writes the outputs of the group's first `tokens` tokens.
template <GgmlType kType>
void TileRows(const QuantGemmArgs& a, const uint8_t* group, const int8_t* unpacked,
              const float* dws, int tokens, int r0, int rows, float* out) {
  alignas(64) int32_t sums[2][kTileRows * 16];
  alignas(64) int8_t wbuf[2][kTileRows * 32];
  __m512 acc[kTileRows];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  const int nb = a.k / 32;
  int b = 0;
  for (; b + 2 <= nb; b += 2) {
    PrefetchNextRows<kType>(a, r0, b);
    BlockSums0<kType>(a, group, unpacked, r0, rows, b, wbuf[0], sums[0]);
    BlockSums1<kType>(a, group, unpacked, r0, rows, b + 1, wbuf[1], sums[1]);
    Fold<kType>(a, group, dws, r0, rows, b, sums[0], acc);
    Fold<kType>(a, group, dws, r0, rows, b + 1, sums[1], acc);
  }
  if (b < nb) {
    BlockSums0<kType>(a, group, unpacked, r0, rows, b, wbuf[0], sums[0]);
    Fold<kType>(a, group, dws, r0, rows, b, sums[0], acc);
  }
  alignas(64) float result[kTileRows][16];
  for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(result[r], acc[r]);
  for (int t = 0; t < tokens; ++t) {
    for (int r = 0; r < rows; ++r) out[static_cast<size_t>(t) * a.ldo + r] = result[r][t];
  }
}

// Longest rows whose weights a tile row unpacks ahead, on the stack (8 x 4096 bytes); longer
// rows unpack each block as its tiles load it.
constexpr int kMaxUnpackedCols = 4096;

// Q8_0 / Q4_0 weights x Q8_0 activations: one token by GemvQx_0_Q8_0, several by tiles, per
// tile row of 8 weight rows and group of 16 tokens (TileRows).
template <GgmlType kType>
void GemmQx_0_Q8_0Amx(const QuantGemmArgs& a) {
  if (a.num_tokens == 1) {
    for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
      GemvQx_0_Q8_0<kType, _MM_HINT_T0>(a, r0, a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows,
                                        a.out + r0);
    }
    return;
  }
  ConfigureTiles(TileMode::kInt8);
  alignas(64) int8_t unpacked_buf[kTileRows * kMaxUnpackedCols];
  alignas(64) float scales_buf[kTileRows * kMaxScaleBlocks];
  for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
    const int rows = a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows;
    // Scales converted ahead serve every group of the call; a call of one group reads each as
    // its block folds: for it, converting ahead costs more than it saves
    // (bench/journal/cpu-kernel-notes.md).
    const float* dws = nullptr;
    if (a.num_tokens > kPackTokens && a.k / 32 <= kMaxScaleBlocks) {
      ConvertRowScales<kType>(a, r0, rows, scales_buf);
      dws = scales_buf;
    }
    // Unpacking ahead lets the tile loads find the bytes in L1 rather than wait on the stores.
    const int8_t* unpacked = nullptr;
    if ((kType == GgmlType::Q4_0 || rows < kTileRows) && a.k <= kMaxUnpackedCols) {
      for (int b = 0; b < a.k / 32; ++b) {
        if (b % 2 == 0) PrefetchNextRows<kType>(a, r0, b);
        UnpackWeights<kType>(a, r0, rows, b,
                             unpacked_buf + static_cast<size_t>(b) * kTileRows * 32);
      }
      unpacked = unpacked_buf;
    }
    for (int t0 = 0, g = 0; t0 < a.num_tokens; t0 += kPackTokens, ++g) {
      const int tokens = a.num_tokens - t0 < kPackTokens ? a.num_tokens - t0 : kPackTokens;
      const uint8_t* group = a.x_packed + static_cast<size_t>(g) * a.x_packed_stride;
      TileRows<kType>(a, group, unpacked, dws, tokens, r0, rows,
                      a.out + static_cast<size_t>(t0) * a.ldo + r0);
    }
  }
}

// ---- Q4_K, Q5_K and Q6_K weights on AMX tiles ----
//
// Each (row, token) gets a super-block's exact integer sums S and M and folds them in one float
// step per super-block, as quant_products_avx512.inc describes: GemvQx_K_Q8_K (VNNI) for one
// token, tiles for groups of 16, so these products are batch-invariant too (and give the bits
// of the VNNI table's).
//
// On tiles, each weight times its scale, v = sc * q (|v| <= 4096), is split into bytes,
// v = lo + 256 hi (lo unsigned; hi unsigned for Q4_K / Q5_K, signed for Q6_K), unpacked a slab
// of super-blocks ahead per tile row; then S = sum lo * x + 256 sum hi * x, two tile products
// per 64 elements (tdpbusd, and tdpbssd for Q6_K's signed hi), and M by vpdpwssd on the
// packed activations' sub-block sums.

bool OnSuperTiles(GgmlType type) {
  return type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
}

// A slab of a tile row's weights as A tiles, [super-block][64 elements][lo, hi][8 rows][64
// bytes] (kSuperSlab super-blocks, 2,048 elements: 32 KiB), with each row's folds.
struct SuperSlab {
  alignas(64) int8_t tiles[kSuperSlab][4][2][kTileRows][64];
  SuperFolds folds;
};

// Unpacks row r's super-block sb (at p) into slot j of the slab.
template <GgmlType kType>
inline void UnpackSuperRow(const uint8_t* p, int r, int j, SuperSlab* slab) {
  SuperScales s;
  LoadSuperScales<kType>(p, &s);
  // Word w of a chunk's elements 0-31 (32-63) takes the scale of multiplier lane w / 4
  // (8 + w / 4), which sits in that lane's low 16 bits: word 2 (w / 4) (16 + 2 (w / 4)).
  const __m512i first = _mm512_set_epi16(14, 14, 14, 14, 12, 12, 12, 12, 10, 10, 10, 10, 8, 8, 8, 8,
                                         6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
  for (int c = 0; c < 4; ++c) {
    const __m512i q = LoadSuperChunk<kType>(p, c);
    for (int h = 0; h < 2; ++h) {
      __m512i q16 = _mm512_cvtepu8_epi16(h == 0 ? _mm512_castsi512_si256(q)
                                                : _mm512_extracti64x4_epi64(q, 1));
      if constexpr (kType == GgmlType::Q6_K) q16 = _mm512_sub_epi16(q16, _mm512_set1_epi16(32));
      const __m512i v =
          _mm512_mullo_epi16(q16, _mm512_permutexvar_epi16(h == 0 ? first : second, s.chunk[c]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(&slab->tiles[j][c][0][r][32 * h]),
                         _mm512_cvtepi16_epi8(v));
      _mm256_store_si256(reinterpret_cast<__m256i*>(&slab->tiles[j][c][1][r][32 * h]),
                         _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    }
  }
  slab->folds.Set<kType>(s, j, r);
}

// Super-blocks [sb0, sb0 + count) of rows [r0, r0 + rows) into the slab (missing rows zero).
template <GgmlType kType>
void UnpackSuperSlab(const QuantGemmArgs& a, int r0, int rows, int sb0, int count,
                     SuperSlab* slab) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  for (int r = 0; r < kTileRows; ++r) {
    if (r >= rows) {
      for (int j = 0; j < count; ++j) {
        for (int c = 0; c < 4; ++c) {
          std::memset(slab->tiles[j][c][0][r], 0, 64);
          std::memset(slab->tiles[j][c][1][r], 0, 64);
        }
        slab->folds.Clear(j, r);
      }
      continue;
    }
    const uint8_t* row = a.w + static_cast<size_t>(r0 + r) * a.w_stride;
    for (int j = 0; j < count; ++j) {
      const uint8_t* p = row + static_cast<size_t>(sb0 + j) * kBytes;
      for (size_t o = 0; o < kBytes; o += 64) {  // the next tile row's same bytes
        _mm_prefetch(reinterpret_cast<const char*>(p + kTileRows * a.w_stride + o), _MM_HINT_T0);
      }
      UnpackSuperRow<kType>(p, r, j, slab);
    }
  }
}

// One super-block (slab slot j) of a group of 16 tokens into acc (lanes: the tokens).
template <GgmlType kType>
inline void SuperBlockOnTiles(const SuperSlab& slab, int j, const uint8_t* packed, __m512* acc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int step = 0; step < 4; step += 2) {
    _tile_loadd(4, slab.tiles[j][step][0], 64);
    _tile_loadd(5, slab.tiles[j][step][1], 64);
    _tile_loadd(6, packed + step * kSuperBTileBytes, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (kType == GgmlType::Q6_K) {
      _tile_dpbssd(2, 5, 6);
    } else {
      _tile_dpbusd(2, 5, 6);
    }
    _tile_loadd(4, slab.tiles[j][step + 1][0], 64);
    _tile_loadd(5, slab.tiles[j][step + 1][1], 64);
    _tile_loadd(7, packed + (step + 1) * kSuperBTileBytes, 64);
    _tile_dpbusd(1, 4, 7);
    if constexpr (kType == GgmlType::Q6_K) {
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbusd(3, 5, 7);
    }
  }
  alignas(64) int32_t sums[4][kTileRows][16];
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  _tile_stored(3, sums[3], 64);
  __m512i total[kTileRows];
  for (int r = 0; r < kTileRows; ++r) {
    const __m512i lo =
        _mm512_add_epi32(_mm512_load_si512(sums[0][r]), _mm512_load_si512(sums[1][r]));
    const __m512i hi =
        _mm512_add_epi32(_mm512_load_si512(sums[2][r]), _mm512_load_si512(sums[3][r]));
    total[r] = _mm512_add_epi32(lo, _mm512_slli_epi32(hi, 8));
  }
  FoldGroup<kType>(slab.folds, j, packed, total, acc);
}

// Q4_K / Q5_K / Q6_K weights x Q8_K activations: one token by GemvQx_K_Q8_K, several by tiles,
// per slab of super-blocks of 8 weight rows and group of 16 tokens (SuperBlockOnTiles).
template <GgmlType kType>
void GemmQx_K_Q8_KAmx(const QuantGemmArgs& a) {
  if (a.num_tokens == 1) {
    for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
      GemvQx_K_Q8_K<kType, _MM_HINT_T0>(a, r0, a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows,
                                        a.out + r0);
    }
    return;
  }
  ConfigureTiles(TileMode::kSuper);
  SuperSlab slab;
  ForGroups(
      a, a.num_tokens, a.k / 256, kSuperSlab, kSuperPackedBytes,
      [&](int r0, int rows, int s0, int count) {
        UnpackSuperSlab<kType>(a, r0, rows, s0, count, &slab);
      },
      [&](int j, const uint8_t* packed, __m512* acc) {
        SuperBlockOnTiles<kType>(slab, j, packed, acc);
      },
      [](int, int) {});
}

// ---- BF16 weights on AMX-BF16 tiles ----
//
// Each activation x is split into two bfloat16 terms, hi = bf16(x) and lo = bf16(x - hi), both
// rounded to nearest even, so |x - hi - lo| <= 2^-18 |x|; the weights are bfloat16 already. One
// tile dot product (tdpbf16ps) multiplies 8 weight rows by a group's tokens over a block of 32
// elements, adding the exact products of bfloat16 pairs into float32 sums. Each (row, token) has
// kPartialSums independent sums, each taking its products block after block from zero, added in
// a fixed order at the end: the same steps whatever the other rows and tokens of its tiles, so
// these products are batch-invariant too. The packed activations of a group, per block: the B
// tile of the his (16 rows; row i holds elements 2i and 2i + 1 of each token as one 32-bit
// word), then that of the los.
//
// F16 weights stay on the float path: split exactly into two bfloat16 terms, they would take
// four tile products per block and a conversion per weight, more work per product of one token
// than the FMA kernels' (bench/journal/cpu-kernel-notes.md).

constexpr int kFloatBlock = 32;  // elements per tile dot product
constexpr size_t kATileBytes = kTileRows * 64;
// Independent sums per (row, token) in C tiles 0-3 (one chain of tile products would wait on
// each one's latency): w * x_hi of even blocks, of odd blocks, w * x_lo of even blocks, of odd
// blocks; added at the end in that order.
constexpr int kPartialSums = 4;
// Blocks of weights per pass of the groups (8 rows x 512 elements, 8 KiB): the A tiles of a
// panel that cannot be read in place are copied a slab at a time.
constexpr int kSlabBlocks = 16;
// Distance, in blocks, of the weight prefetches.
constexpr int kPrefetchAhead = 16;

int NumFloatBlocks(int k) { return (k + kFloatBlock - 1) / kFloatBlock; }

inline __mmask32 BlockMask(int k, int b) {
  const int n = k - kFloatBlock * b;
  return n >= kFloatBlock ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
}

inline __m256i Bf16Bits(__m512 f) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f)); }

inline __m512 Bf16ToFloat(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 32 floats (f0: elements 0-15, f1: 16-31) as 64 bytes of bfloat16 his and of los. lo is 0
// where hi is infinite, so an infinite value stays one rather than becoming inf - inf.
inline void SplitBf16(__m512 f0, __m512 f1, __m512i* hi, __m512i* lo) {
  __m256i h[2], l[2];
  const __m512 f[2] = {f0, f1};
  for (int i = 0; i < 2; ++i) {
    h[i] = Bf16Bits(f[i]);
    const __m512 back = Bf16ToFloat(h[i]);
    const __mmask16 inf = _mm512_fpclass_ps_mask(back, 0x18);  // +-infinity
    l[i] = Bf16Bits(_mm512_maskz_sub_ps(static_cast<__mmask16>(~inf), f[i], back));
  }
  *hi = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
  *lo = _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1);
}

// Blocks [b0, b1) of the panel's rows as A tiles, [block][8 rows][32 bf16] in `out` (rows past
// a.rows and elements past a.k zero): for a panel whose tiles cannot be read in place.
void CopyWeightTiles(const FloatGemmArgs& a, int b0, int b1, uint8_t* out) {
  for (int r = 0; r < kTileRows; ++r) {
    const uint8_t* row = a.w + static_cast<size_t>(r) * a.w_stride;
    for (int b = b0; b < b1; ++b) {
      const __m512i v = r < a.rows ? _mm512_maskz_loadu_epi16(BlockMask(a.k, b), row + 64 * b)
                                   : _mm512_setzero_si512();
      _mm512_store_si512(out + static_cast<size_t>(b - b0) * kATileBytes + 64 * r, v);
    }
  }
}

// Asks for the line of each of the panel's rows `ahead` blocks after block b (past the row's
// end: the next panel's rows): a block touches each row for one line, too short a run for the
// hardware prefetcher. A prefetch past the matrix does not fault.
inline void PrefetchBlocksAhead(const FloatGemmArgs& a, int b, int ahead) {
  const int nb = NumFloatBlocks(a.k);
  int target = b + ahead, first_row = 0;
  if (target >= nb) {
    target -= nb;
    first_row = kTileRows;
  }
  for (int r = 0; r < kTileRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(
                     a.w + static_cast<size_t>(first_row + r) * a.w_stride + 64 * target),
                 _MM_HINT_T0);
  }
}

using PartialSums = float[kPartialSums][kTileRows][kPackTokens];
constexpr int kSumsStride = 4 * kPackTokens;

// BF16 weights x float32 activations (split into bfloat16 his and los), one or several tokens,
// one tile row: a.rows <= kTileRows. Reference: GemmPanelPortable over the decoded rows.
void GemmBF16Amx(const FloatGemmArgs& a) {
  // Invariants of MatMul: BF16 weights; one-column groups only for products of one token.
  if (a.type != GgmlType::BF16 ||
      (a.columns != kPackTokens && (a.columns != 1 || a.num_tokens != 1))) {
    std::fprintf(stderr, "cpu: %s product on bfloat16 tiles of %d columns for %d tokens\n",
                 common::GgmlTypeName(a.type).c_str(), a.columns, a.num_tokens);
    std::abort();
  }
  ConfigureTiles(a.columns == 1 ? TileMode::kBf16One : TileMode::kBf16Group);
  const bool in_place = a.rows == kTileRows && a.k % kFloatBlock == 0;
  const size_t b_row = 4 * static_cast<size_t>(a.columns);  // bytes of a B tile row
  const size_t block_bytes = 2 * 16 * b_row;
  const int nb = NumFloatBlocks(a.k);
  const int groups = (a.num_tokens + a.columns - 1) / a.columns;
  alignas(64) uint8_t copy[kSlabBlocks * kATileBytes];
  // Each group's partial sums, carried between slabs.
  alignas(64) PartialSums sums[kMaxPanelTokens / kPackTokens];
  for (int s0 = 0; s0 < nb; s0 += kSlabBlocks) {
    const int s1 = nb - s0 < kSlabBlocks ? nb : s0 + kSlabBlocks;
    if (!in_place) CopyWeightTiles(a, s0, s1, copy);
    for (int g = 0; g < groups; ++g) {
      PartialSums& p = sums[g];
      if (s0 == 0) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      } else {
        _tile_loadd(0, p[0], kSumsStride);
        _tile_loadd(1, p[1], kSumsStride);
        _tile_loadd(2, p[2], kSumsStride);
        _tile_loadd(3, p[3], kSumsStride);
      }
      const uint8_t* group = a.x_packed + static_cast<size_t>(g) * a.x_packed_stride;
      for (int b = s0; b < s1; ++b) {
        if (g == 0) PrefetchBlocksAhead(a, b, kPrefetchAhead);
        if (in_place) {
          _tile_loadd(4, a.w + 64 * static_cast<size_t>(b), a.w_stride);
        } else {
          _tile_loadd(4, copy + static_cast<size_t>(b - s0) * kATileBytes, 64);
        }
        const uint8_t* x = group + static_cast<size_t>(b) * block_bytes;
        _tile_loadd(6, x, b_row);
        _tile_loadd(7, x + 16 * b_row, b_row);
        if (b % 2 == 0) {
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(2, 4, 7);
        } else {
          _tile_dpbf16ps(1, 4, 6);
          _tile_dpbf16ps(3, 4, 7);
        }
      }
      _tile_stored(0, p[0], kSumsStride);
      _tile_stored(1, p[1], kSumsStride);
      _tile_stored(2, p[2], kSumsStride);
      _tile_stored(3, p[3], kSumsStride);
    }
  }
  for (int t = 0; t < a.num_tokens; ++t) {
    const PartialSums& p = sums[t / a.columns];
    const int c = t % a.columns;
    for (int r = 0; r < a.rows; ++r) {
      a.out[static_cast<size_t>(t) * a.ldo + r] =
          ((p[0][r][c] + p[1][r][c]) + p[2][r][c]) + p[3][r][c];
    }
  }
}

}  // namespace

size_t PackedGroupBytesAmx(GgmlType type, int k) {
  if (OnSuperTiles(type)) return static_cast<size_t>(k / 256) * kSuperPackedBytes;
  return OnTiles(type) ? static_cast<size_t>(k / 32) * kPackedBlockBytes : 0;
}

void PackActivationsAmx(GgmlType type, const uint8_t* records, size_t record_bytes, int tokens,
                        int k, uint8_t* out) {
  if (OnSuperTiles(type)) {
    PackSuperActivations(records, record_bytes, tokens, k, out);
    return;
  }
  PackBlock32Activations(records, record_bytes, tokens, k, out);
}

void QuantGemmPanelAmx(const QuantGemmArgs& a) {
  if (!OnTiles(a.type) && !OnSuperTiles(a.type)) {
    QuantGemmPanelAvx512Vnni(a);
    return;
  }
  // An invariant of MatMul, which packs the activations of products of 2 or more tokens.
  if (a.x_packed == nullptr && a.num_tokens > 1) {
    std::fprintf(stderr, "cpu: %s product on AMX tiles without packed activations\n",
                 common::GgmlTypeName(a.type).c_str());
    std::abort();
  }
  switch (a.type) {
    case GgmlType::Q8_0:
      GemmQx_0_Q8_0Amx<GgmlType::Q8_0>(a);
      return;
    case GgmlType::Q4_0:
      GemmQx_0_Q8_0Amx<GgmlType::Q4_0>(a);
      return;
    case GgmlType::Q4_K:
      GemmQx_K_Q8_KAmx<GgmlType::Q4_K>(a);
      return;
    case GgmlType::Q5_K:
      GemmQx_K_Q8_KAmx<GgmlType::Q5_K>(a);
      return;
    default:
      GemmQx_K_Q8_KAmx<GgmlType::Q6_K>(a);
      return;
  }
}

int FloatGroupColumnsAmx(GgmlType type, int product_tokens) {
  if (type != GgmlType::BF16) return 0;
  return product_tokens == 1 ? 1 : kPackTokens;
}

size_t FloatGroupBytesAmx(int columns, int k) {
  return static_cast<size_t>(NumFloatBlocks(k)) * 2 * 16 * 4 * columns;
}

void PackFloatActivationsAmx(const float* x, size_t ldx, int tokens, int columns, int k,
                             uint8_t* out) {
  const size_t b_row = 4 * static_cast<size_t>(columns);
  const size_t block_bytes = 2 * 16 * b_row;
  if (tokens < columns) std::memset(out, 0, FloatGroupBytesAmx(columns, k));
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(b_row)));
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x + static_cast<size_t>(t) * ldx;
    for (int b = 0; b < NumFloatBlocks(k); ++b) {
      const __mmask32 m = BlockMask(k, b);
      __m512i hi, lo;
      SplitBf16(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), xt + kFloatBlock * b),
                _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), xt + kFloatBlock * b + 16),
                &hi, &lo);
      uint8_t* block = out + static_cast<size_t>(b) * block_bytes + 4 * t;
      _mm512_i32scatter_epi32(block, rows, hi, 1);
      _mm512_i32scatter_epi32(block + 16 * b_row, rows, lo, 1);
    }
  }
}

void FloatGemmPanelAmx(const FloatGemmArgs& a) {
  for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
    FloatGemmArgs tile = a;
    tile.w += static_cast<size_t>(r0) * a.w_stride;
    tile.out += r0;
    tile.rows = a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows;
    GemmBF16Amx(tile);
  }
}

}  // namespace pagoda::worker::cpu
