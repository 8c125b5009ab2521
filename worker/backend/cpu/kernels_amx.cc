// Products of Q8_0 and Q4_0 weights with quantized activations on AMX tiles (the avx512amx
// table: kAvx512Vnni's kernels, with these for the two kBlock32 weight types). Compiled with
// AMX for this file only (CMakeLists.txt); called only where the CPU has it and the OS granted
// the tile state (kernel_table.cc).
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

// A packed group, per block of 32 elements: the B tile (8 rows of 64 bytes; row i holds
// elements 4i..4i+3 of each of the 16 tokens, as signed bytes), then the tokens' 16 scales d.
constexpr int kTileRows = 8;  // weight rows per tile (the CPU backend's panels are 8 rows)
constexpr size_t kBTileBytes = 8 * 64;
constexpr size_t kPackedBlockBytes = kBTileBytes + kPackTokens * sizeof(float);

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

// The tile configuration is per thread; loaded once by each thread that multiplies.
void ConfigureTiles() {
  thread_local bool configured = false;
  if (configured) return;
  TileConfig c{};
  c.palette_id = 1;
  for (int t = 0; t < 6; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = t == 2 || t == 3 ? 32 : 64;
  }
  _tile_loadconfig(&c);
  configured = true;
}

// Q4_0's signed weights (q - 8) of two 16-byte groups of packed nibbles (v: [first | second]):
// [first's low nibbles, its high nibbles, second's low, its high].
inline __m512i UnpackQ4Pair(__m256i v) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m512i order = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i q = _mm512_permutex2var_epi64(
      _mm512_castsi256_si512(_mm256_and_si256(v, nib)), order,
      _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib)));
  return _mm512_sub_epi8(q, _mm512_set1_epi8(8));
}

// Rows [r0, r0 + rows) of block b as signed bytes in `buf` ([8][32], rows past `rows` zero),
// for Q4_0 (q - 8) and for a Q8_0 tile of fewer than 8 rows.
template <GgmlType kType>
inline void UnpackWeights(const QuantGemmArgs& a, int r0, int rows, int b, int8_t* buf) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const uint8_t* p = a.w + static_cast<size_t>(r0) * a.w_stride + b * kBytes + 2;
  if (kType == GgmlType::Q4_0 && rows == kTileRows) {
    for (int r = 0; r < kTileRows; r += 2) {  // two rows per register
      const __m256i v = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + a.w_stride)), 1);
      _mm512_store_si512(buf + 32 * r, UnpackQ4Pair(v));
      p += 2 * a.w_stride;
    }
    return;
  }
  for (int r = 0; r < kTileRows; ++r, p += a.w_stride) {
    __m256i q = _mm256_setzero_si256();
    if (r < rows) {
      if constexpr (kType == GgmlType::Q8_0) {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      } else {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const __m128i nib = _mm_set1_epi8(0x0F);
        const __m256i lh =
            _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), nib), _mm_and_si128(v, nib));
        q = _mm256_sub_epi8(lh, _mm256_set1_epi8(8));
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

// acc[r] (lanes: the group's tokens) += float(sums[r]) * d_w[r] * d_x, for block b.
template <GgmlType kType>
inline void Fold(const QuantGemmArgs& a, const uint8_t* group, int r0, int rows, int b,
                 const int32_t* sums, __m512* acc) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const __m512 dx =
      _mm512_load_ps(reinterpret_cast<const float*>(group + b * kPackedBlockBytes + kBTileBytes));
  for (int r = 0; r < kTileRows; ++r) {
    const float dw =
        r < rows ? LoadHalf(a.w + static_cast<size_t>(r0 + r) * a.w_stride + b * kBytes) : 0.0f;
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

template <GgmlType kType>
void TileRows(const QuantGemmArgs& a, const uint8_t* group, const int8_t* unpacked, int tokens,
              int r0, int rows, float* out) {
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
    Fold<kType>(a, group, r0, rows, b, sums[0], acc);
    Fold<kType>(a, group, r0, rows, b + 1, sums[1], acc);
  }
  if (b < nb) {
    BlockSums0<kType>(a, group, unpacked, r0, rows, b, wbuf[0], sums[0]);
    Fold<kType>(a, group, r0, rows, b, sums[0], acc);
  }
  alignas(64) float result[kTileRows][16];
  for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(result[r], acc[r]);
  for (int t = 0; t < tokens; ++t) {
    for (int r = 0; r < rows; ++r) out[static_cast<size_t>(t) * a.ldo + r] = result[r][t];
  }
}

// The sums and float steps of TileRows for a call of one token (decode of one sequence), by
// VNNI byte dot products, which stream a row faster than tiles of one token column: per pair of
// blocks each row's 16 lanes of 4-product sums are reduced exactly to the rows' block sums, 8
// rows to a lane each, then folded in block order as TileRows folds them.
//
// The 16 int32 lanes of v[0..7] (lanes 0-7: block b, 8-15: block b + 1, of rows 0-7) summed
// per row and block: lanes 0-7 of the result are block b's rows 0-7, lanes 8-15 block b + 1's.
inline __m512i ReduceRowPairs(const __m512i* v) {
  __m512i s[4];
  for (int i = 0; i < 4; ++i) {
    s[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  const __m512i lo = _mm512_add_epi32(_mm512_unpacklo_epi64(s[0], s[1]),
                                      _mm512_unpackhi_epi64(s[0], s[1]));  // rows 0-3
  const __m512i hi = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2], s[3]),
                                      _mm512_unpackhi_epi64(s[2], s[3]));  // rows 4-7
  const __m512i t = _mm512_add_epi32(_mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(3, 1, 2, 0));
}

template <GgmlType kType>
void OneTokenRows(const QuantGemmArgs& a, int r0, int rows, float* out) {
  constexpr size_t kBytes = QuantBlockBytes(kType);
  const int nb = a.k / 32;
  const uint8_t* rec = a.x;  // q + 128 per element, then the d of each group of 4
  const float* dx = reinterpret_cast<const float*>(rec + Block32ScaleOffset(a.k));
  const uint8_t* w0 = a.w + static_cast<size_t>(r0) * a.w_stride;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i scale_offsets = _mm512_add_epi32(
      _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(a.w_stride))),
      _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(static_cast<int>(kBytes)), 1));
  const __mmask8 valid = static_cast<__mmask8>((1u << rows) - 1);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const __mmask64 bytes_mask = two ? ~__mmask64{0} : __mmask64{0xFFFFFFFF};
    const __m512i xu = _mm512_maskz_loadu_epi8(bytes_mask, rec + 32 * b);
    __m512i v[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      v[r] = _mm512_setzero_si512();
      if (r >= rows) continue;
      const uint8_t* p = w0 + static_cast<size_t>(r) * a.w_stride + b * kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(p + kTileRows * a.w_stride), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + kTileRows * a.w_stride + 2 * kBytes - 1),
                   _MM_HINT_T0);
      __m512i w;
      if constexpr (kType == GgmlType::Q8_0) {
        const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
        const __m256i q1 =
            two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2))
                : _mm256_setzero_si256();
        w = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
      } else {
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        const __m128i q1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBytes + 2))
                               : _mm_set1_epi8(static_cast<char>(0x88));
        w = UnpackQ4Pair(_mm256_set_m128i(q1, q0));
      }
      // Lanes start at -128 x their weights' sum, undoing the activations' offset.
      const __m512i start = _mm512_sub_epi32(
          _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, w));
      v[r] = _mm512_dpbusd_epi32(start, xu, w);
    }
    const __m512 sums = _mm512_cvtepi32_ps(ReduceRowPairs(v));
    const __mmask16 gather_mask =
        static_cast<__mmask16>(valid | (two ? static_cast<unsigned>(valid) << 8 : 0u));
    const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), gather_mask,
                                                      scale_offsets, w0 + b * kBytes, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
    const __m512 dxs = _mm512_insertf32x8(_mm512_set1_ps(dx[8 * b]),
                                          _mm256_set1_ps(two ? dx[8 * (b + 1)] : 0.0f), 1);
    const __m512 scale = _mm512_mul_ps(dw, dxs);
    acc = _mm256_fmadd_ps(_mm512_castps512_ps256(sums), _mm512_castps512_ps256(scale), acc);
    if (two) {
      acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(sums, 1), _mm512_extractf32x8_ps(scale, 1), acc);
    }
  }
  _mm256_mask_storeu_ps(out, valid, acc);
}

// Longest rows whose weights a tile row unpacks ahead, on the stack (8 x 4096 bytes); longer
// rows unpack each block as its tiles load it.
constexpr int kMaxUnpackedCols = 4096;

template <GgmlType kType>
void PanelOnTiles(const QuantGemmArgs& a) {
  if (a.num_tokens == 1) {
    for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
      OneTokenRows<kType>(a, r0, a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows, a.out + r0);
    }
    return;
  }
  ConfigureTiles();
  alignas(64) int8_t unpacked_buf[kTileRows * kMaxUnpackedCols];
  for (int r0 = 0; r0 < a.rows; r0 += kTileRows) {
    const int rows = a.rows - r0 < kTileRows ? a.rows - r0 : kTileRows;
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
      TileRows<kType>(a, group, unpacked, tokens, r0, rows,
                      a.out + static_cast<size_t>(t0) * a.ldo + r0);
    }
  }
}

}  // namespace

size_t PackedGroupBytesAmx(GgmlType type, int k) {
  return OnTiles(type) ? static_cast<size_t>(k / 32) * kPackedBlockBytes : 0;
}

void PackActivationsAmx(GgmlType type, const uint8_t* records, size_t record_bytes, int tokens,
                        int k, uint8_t* out) {
  const int nb = k / 32;
  const size_t scale_offset = Block32ScaleOffset(k);
  std::memset(out, 0, PackedGroupBytesAmx(type, k));
  for (int t = 0; t < tokens; ++t) {
    const uint8_t* rec = records + static_cast<size_t>(t) * record_bytes;
    const float* scales = reinterpret_cast<const float*>(rec + scale_offset);
    for (int b = 0; b < nb; ++b) {
      uint8_t* block = out + static_cast<size_t>(b) * kPackedBlockBytes;
      // The records hold q + 128; the tiles multiply signed bytes.
      const __m256i q =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 * b)),
                           _mm256_set1_epi8(static_cast<char>(0x80)));
      alignas(32) uint32_t words[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(words), q);
      for (int i = 0; i < 8; ++i) std::memcpy(block + 64 * i + 4 * t, &words[i], 4);
      std::memcpy(block + kBTileBytes + 4 * t, &scales[8 * b], sizeof(float));
    }
  }
}

void QuantGemmPanelAmx(const QuantGemmArgs& a) {
  if (!OnTiles(a.type)) {
    QuantGemmPanelAvx512Vnni(a);
    return;
  }
  // An invariant of MatMul, which packs the activations of products of 2 or more tokens.
  if (a.x_packed == nullptr && a.num_tokens > 1) {
    std::fprintf(stderr, "cpu: %s product on AMX tiles without packed activations\n",
                 common::GgmlTypeName(a.type).c_str());
    std::abort();
  }
  if (a.type == GgmlType::Q8_0) {
    PanelOnTiles<GgmlType::Q8_0>(a);
  } else {
    PanelOnTiles<GgmlType::Q4_0>(a);
  }
}

}  // namespace pagoda::worker::cpu
