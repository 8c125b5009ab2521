#include "worker/backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

namespace pagoda::worker::cpu {
namespace {

int NumPanels(const WeightMatrix& w) { return (w.rows + kPanelRows - 1) / kPanelRows; }

// Tokens multiplied per pass over the weight panels: the chunk's activations (about 1 MiB of
// float32, at least 64 and at most kMaxTokenChunk tokens) stay in L2 while the panels stream
// by. Longer batches (prefill chunks) read and decode each panel once per chunk.
constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int kMinTokenChunk = 64;
// Most products in one MatMul call (Q, K and V, or gate and up, in practice).
constexpr size_t kMaxProducts = 8;

// Asks for the bytes of row r of the block the panel decodes after the one at column k0 (the
// same rows' next columns, else the next panel's first columns): a block touches each row for
// only a few hundred bytes, too short a run for the hardware prefetcher to hide the memory
// latency. Called once per row, just before that row's decode, so the requests spread over the
// block instead of queuing up at its start. The next block's bounds are recomputed per row on
// purpose: computed once per block, outside the row loop, the prefetches arrive in tighter
// bursts and batch-1 GEMV runs slower (bench/journal/cpu-kernel-notes.md).
void PrefetchNextBlockRow(const WeightMatrix& w, int r0, int k0, int r, int k_block) {
  int next_r0 = r0, next_k0 = k0 + k_block;
  if (next_k0 >= w.cols) {
    next_r0 += kPanelRows;
    next_k0 = 0;
  }
  if (next_r0 + r >= w.rows) return;
  const size_t begin = RowBytes(w.type, next_k0);
  const size_t end = RowBytes(w.type, std::min(w.cols, next_k0 + k_block));
  const uint8_t* row = w.row(next_r0 + r);
  // Into L2 (locality 2: prefetcht1), where decode steps ran faster than with the bytes asked
  // for into L1 (bench/journal/cpu-kernel-notes.md).
  for (size_t b = begin; b < end; b += common::kCacheLineBytes) __builtin_prefetch(row + b, 0, 2);
}

// Walks a flat index over several products' items (count(j) of product j, 0 to skip it), for
// increasing indices: Find(i) gives product j and i's index within it.
struct FlatIndex {
  size_t j = 0;
  int first = 0;  // flat index of product j's first item
  template <typename Count>
  std::pair<size_t, int> Find(int i, const Count& count) {
    while (i >= first + count(j)) first += count(j++);
    return {j, i - first};
  }
};

// A product's activations as its panel kernel reads them: quantized, one record per token, and
// where the table packs them (pack_activations), the groups of kPackTokens tokens; or for float
// weights the table multiplies with float_gemm_panel (AMX: BF16), the float activations packed
// in groups of `columns` tokens (no records).
struct PanelInput {
  uint8_t* records = nullptr;
  uint8_t* packed = nullptr;
  size_t group_bytes = 0;
  int columns = 0;  // float groups only
};

// Multiplies tokens [t0, t0 + tokens) by panel `panel` of `p.w`. With quantized activations
// (`xq.records` set) or packed float ones (`xq.columns` set), the panel kernel reads the weight
// bytes as they are; so does the table's float_gemv for one token and float weights. Otherwise
// one k block at a time: the block of the panel's rows is decoded
// to float32 in the thread's scratch (F32 is read in place), where it stays in L1 while every
// token of the chunk passes by; each output's lane sums carry over to the next block in the
// scratch's lane area.
void RunPanel(const ExecContext& ctx, const MatMulParams& p, const PanelInput& xq, int panel,
              int thread, int t0, int tokens) {
  const WeightMatrix& w = *p.w;
  const int r0 = panel * kPanelRows;
  const int rows = std::min(kPanelRows, w.rows - r0);
  if (xq.columns > 0) {  // t0 is a multiple of the chunk, itself one of kPackTokens
    ctx.kernels->float_gemm_panel(
        {w.type, xq.packed + static_cast<size_t>(t0 / xq.columns) * xq.group_bytes, xq.group_bytes,
         xq.columns, w.row(r0), w.row_bytes, p.out + static_cast<size_t>(t0) * w.rows + r0, w.rows,
         tokens, rows, w.cols});
    return;
  }
  if (xq.records != nullptr) {
    const size_t record = QuantizedActivationBytes(w.type, w.cols);
    QuantGemmArgs args{w.type,    xq.records + static_cast<size_t>(t0) * record,
                       w.row(r0), p.out + static_cast<size_t>(t0) * w.rows + r0,
                       record,    w.row_bytes,
                       tokens,    rows,
                       w.cols,    w.rows};
    if (xq.packed != nullptr) {  // t0 is a multiple of the chunk, itself one of kPackTokens
      args.x_packed = xq.packed + static_cast<size_t>(t0 / kPackTokens) * xq.group_bytes;
      args.x_packed_stride = xq.group_bytes;
    }
    ctx.kernels->quant_gemm_panel(args);
    return;
  }
  // One token with float weights: the table reads each row once, in place, asking for the next
  // panel's rows (into L2) as it goes (the same rows' bytes one panel ahead: the panels a thread
  // takes are consecutive). The prefetch beats the hardware prefetcher alone, and the read in
  // place a decode to the scratch first (bench/journal/cpu-kernel-notes.md).
  const bool float_weights = w.type == common::GgmlType::F32 || w.type == common::GgmlType::F16 ||
                             w.type == common::GgmlType::BF16;
  if (tokens == 1 && float_weights && ctx.kernels->float_gemv != nullptr) {
    static_assert(kPanelRows <= kMaxGemvRows);
    const uint8_t* next = r0 + kPanelRows < w.rows ? w.row(r0 + kPanelRows) : nullptr;
    ctx.kernels->float_gemv({w.type, p.x + static_cast<size_t>(t0) * w.cols, w.row(r0), w.row_bytes,
                             p.out + static_cast<size_t>(t0) * w.rows + r0, rows, w.cols, next});
    return;
  }
  // An invariant of the callers (contexts are sized by ScratchFloatsPerThread()).
  if (ctx.scratch_floats < ScratchFloatsPerThread() || tokens > kMaxTokenChunk) {
    std::fprintf(stderr, "cpu::MatMul: scratch of %zu floats < %zu or %d tokens > %d\n",
                 ctx.scratch_floats, ScratchFloatsPerThread(), tokens, kMaxTokenChunk);
    std::abort();
  }
  float* scratch = ctx.scratch + static_cast<size_t>(thread) * ctx.scratch_floats;
  const int k_block = tokens == 1 ? kOneTokenKBlock : kKBlock;
  float* lanes = scratch + static_cast<size_t>(kPanelRows) * k_block;
  const size_t t = static_cast<size_t>(t0);
  for (int k0 = 0; k0 < w.cols; k0 += k_block) {
    const int kb = std::min(k_block, w.cols - k0);
    const float* wp;
    int ldw;
    if (w.type == common::GgmlType::F32) {
      wp = reinterpret_cast<const float*>(w.row(r0)) + k0;
      ldw = w.cols;
    } else {
      const size_t offset = RowBytes(w.type, k0);
      for (int r = 0; r < rows; ++r) {
        PrefetchNextBlockRow(w, r0, k0, r, k_block);
        ctx.kernels->dequantize_row(w.type, w.row(r0 + r) + offset, kb,
                                    scratch + static_cast<size_t>(r) * kb);
      }
      wp = scratch;
      ldw = kb;
    }
    ctx.kernels->gemm_panel({p.x + t * w.cols + k0, wp, p.out + t * w.rows + r0, lanes, tokens,
                             rows, kb, w.cols, ldw, w.rows, k0 > 0, k0 + kb == w.cols});
  }
}

}  // namespace

LocalContext::LocalContext(CpuIsa isa, int threads, bool quantize_activations)
    : pool_(std::make_unique<ThreadPool>(threads)) {
  scratch_.assign(ScratchFloatsPerThread() * static_cast<size_t>(pool_->size()), 0.0f);
  ctx_ = {&Kernels(isa), pool_.get(),         scratch_.data(), ScratchFloatsPerThread(),
          &activations_, quantize_activations};
}

void MatMul(const ExecContext& ctx, std::span<const MatMulParams> products) {
  int total = 0, tokens = 0;
  for (const MatMulParams& p : products) {
    total += NumPanels(*p.w);
    tokens += p.num_tokens;
  }
  if (tokens == 0) return;
  int max_tokens = 0, max_cols = 1;
  for (const MatMulParams& p : products) {
    max_tokens = std::max(max_tokens, p.num_tokens);
    max_cols = std::max(max_cols, p.w->cols);
  }
  // A multiple of kPackTokens, so chunks start at a packed group.
  const int chunk = std::clamp(static_cast<int>(kChunkBytes / (sizeof(float) * max_cols)),
                               kMinTokenChunk, kMaxTokenChunk) /
                    kPackTokens * kPackTokens;
  if (products.size() > kMaxProducts) {
    std::fprintf(stderr, "cpu::MatMul: %zu products > %zu\n", products.size(), kMaxProducts);
    std::abort();
  }
  // The quantized activations of each product with a quantized weight: one record per token,
  // then (tables that pack them) the packed groups; or the packed float activations of the float
  // weights the table multiplies with float_gemm_panel; in ctx.activations.
  std::array<PanelInput, kMaxProducts> xq{};
  const auto float_columns = [&](const MatMulParams& p) {
    return ctx.kernels->float_group_columns != nullptr
               ? ctx.kernels->float_group_columns(p.w->type, p.num_tokens)
               : 0;
  };
  const auto record_bytes = [&](const MatMulParams& p) {
    return ctx.quantize_activations ? QuantizedActivationBytes(p.w->type, p.w->cols) : 0;
  };
  // Products of one token are not packed for quantized weights: the panels multiply one token
  // from its record.
  const auto group_bytes = [&](const MatMulParams& p) {
    if (const int columns = float_columns(p); columns > 0) {
      return ctx.kernels->float_group_bytes(columns, p.w->cols);
    }
    return record_bytes(p) > 0 && p.num_tokens > 1 && ctx.kernels->pack_activations != nullptr
               ? ctx.kernels->packed_group_bytes(p.w->type, p.w->cols)
               : 0;
  };
  const auto num_groups = [&](const MatMulParams& p) {
    int columns = float_columns(p);
    if (columns == 0) columns = kPackTokens;
    return (p.num_tokens + columns - 1) / columns;
  };
  // Products that read the same activations with the same weight type and width (Q, K and V
  // of a layer; gate and up) need the same records and groups: the first prepares them, the
  // others read its (owner[j] < j).
  std::array<size_t, kMaxProducts> owner{};
  for (size_t j = 0; j < products.size(); ++j) {
    const MatMulParams& p = products[j];
    owner[j] = j;
    for (size_t i = 0; i < j; ++i) {
      const MatMulParams& o = products[i];
      if (o.x == p.x && o.num_tokens == p.num_tokens && o.w->type == p.w->type &&
          o.w->cols == p.w->cols) {
        owner[j] = i;
        break;
      }
    }
  }
  size_t bytes = 0;
  int quant_tokens = 0, packed_groups = 0;
  for (size_t j = 0; j < products.size(); ++j) {
    if (owner[j] != j) continue;
    const MatMulParams& p = products[j];
    const size_t record = record_bytes(p);
    bytes += record * static_cast<size_t>(p.num_tokens) +
             group_bytes(p) * static_cast<size_t>(num_groups(p));
    if (record > 0) quant_tokens += p.num_tokens;
    if (group_bytes(p) > 0) packed_groups += num_groups(p);
  }
  // Whether product j prepares activations (it owns them and has some to prepare).
  const auto owns = [&](size_t j, const uint8_t* data) { return owner[j] == j && data != nullptr; };
  if (bytes > 0) {
    if (ctx.activations->size() < bytes) ctx.activations->resize(bytes);
    size_t offset = 0;
    for (size_t j = 0; j < products.size(); ++j) {
      if (owner[j] != j) {
        xq[j] = xq[owner[j]];
        continue;
      }
      const size_t record = record_bytes(products[j]);
      if (record > 0) xq[j].records = ctx.activations->data() + offset;
      offset += record * static_cast<size_t>(products[j].num_tokens);
      xq[j].group_bytes = group_bytes(products[j]);
      xq[j].columns = float_columns(products[j]);
      if (xq[j].group_bytes > 0) xq[j].packed = ctx.activations->data() + offset;
      offset += xq[j].group_bytes * static_cast<size_t>(num_groups(products[j]));
    }
    const auto tokens_of = [&](size_t j) {
      return owns(j, xq[j].records) ? products[j].num_tokens : 0;
    };
    ctx.pool->ParallelFor(quant_tokens, [&](int begin, int end, int) {
      FlatIndex at;
      for (int i = begin; i < end; ++i) {
        const auto [j, local] = at.Find(i, tokens_of);
        const WeightMatrix& w = *products[j].w;
        const size_t t = static_cast<size_t>(local);
        ctx.kernels->quantize_activations(
            w.type, products[j].x + t * w.cols, w.cols,
            xq[j].records + t * QuantizedActivationBytes(w.type, w.cols));
      }
    });
  }
  if (packed_groups > 0) {
    const auto groups_of = [&](size_t j) {
      return owns(j, xq[j].packed) ? num_groups(products[j]) : 0;
    };
    ctx.pool->ParallelFor(packed_groups, [&](int begin, int end, int) {
      FlatIndex at;
      for (int i = begin; i < end; ++i) {
        const auto [j, local] = at.Find(i, groups_of);
        const MatMulParams& p = products[j];
        uint8_t* group = xq[j].packed + static_cast<size_t>(local) * xq[j].group_bytes;
        if (xq[j].columns > 0) {
          const int t0 = local * xq[j].columns;
          ctx.kernels->pack_float_activations(p.x + static_cast<size_t>(t0) * p.w->cols, p.w->cols,
                                              std::min(xq[j].columns, p.num_tokens - t0),
                                              xq[j].columns, p.w->cols, group);
          continue;
        }
        const int t0 = local * kPackTokens;
        const size_t record = record_bytes(p);
        ctx.kernels->pack_activations(p.w->type, xq[j].records + static_cast<size_t>(t0) * record,
                                      record, std::min(kPackTokens, p.num_tokens - t0), p.w->cols,
                                      group);
      }
    });
  }
  ctx.pool->ParallelFor(total, [&](int begin, int end, int thread) {
    const auto panels_of = [&](size_t j) { return NumPanels(*products[j].w); };
    for (int t0 = 0; t0 < max_tokens; t0 += chunk) {
      FlatIndex at;
      for (int i = begin; i < end; ++i) {
        const auto [j, panel] = at.Find(i, panels_of);
        const int tokens = std::min(chunk, products[j].num_tokens - t0);
        if (tokens > 0) RunPanel(ctx, products[j], xq[j], panel, thread, t0, tokens);
      }
    }
  });
}

void RmsNorm(const ExecContext& ctx, const RmsNormParams& p) {
  ctx.pool->ParallelFor(p.num_tokens, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      const size_t o = static_cast<size_t>(t) * p.dim;
      ctx.kernels->rms_norm_row(p.x + o, p.weight, p.out + o, p.dim, p.eps);
    }
  });
}

void BuildRopeTables(const RopeTableParams& p) {
  const int half = p.head_dim / 2;
  for (int t = 0; t < p.num_tokens; ++t) {
    const double pos = p.positions[t];
    for (int i = 0; i < half; ++i) {
      const double angle = p.inv_freq != nullptr
                               ? pos * static_cast<double>(p.inv_freq[i])
                               : pos * std::pow(static_cast<double>(p.base),
                                                -2.0 * i / static_cast<double>(p.head_dim));
      p.cos[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      p.sin[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void ApplyRope(const RopeParams& p) {
  const int half = p.head_dim / 2;
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* cos_t = p.cos + static_cast<size_t>(t) * half;
    const float* sin_t = p.sin + static_cast<size_t>(t) * half;
    float* row = p.x + static_cast<size_t>(t) * p.n_heads * p.head_dim;
    for (int h = 0; h < p.n_heads; ++h) {
      float* x = row + h * p.head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cos_t[i] - b * sin_t[i];
        x[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

void WriteKv(const ExecContext& ctx, const KvWriteParams& p) {
  const size_t kv_dim = static_cast<size_t>(p.kv_dim);
  for (int t = 0; t < p.num_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t page = p.page_tables[t][pos / p.page_size];
    const size_t slot = static_cast<size_t>(page) * p.page_size + pos % p.page_size;
    ctx.kernels->float_to_half(p.k + t * kv_dim, kv_dim, p.k_cache + slot * kv_dim);
    ctx.kernels->float_to_half(p.v + t * kv_dim, kv_dim, p.v_cache + slot * kv_dim);
  }
}

void PagedAttention(const ExecContext& ctx, const PagedAttentionParams& p) {
  const int group = p.n_heads / p.n_kv_heads;
  const size_t hd = static_cast<size_t>(p.head_dim);
  const size_t kv_stride = static_cast<size_t>(p.n_kv_heads) * hd;
  ctx.pool->ParallelFor(p.num_tokens * p.n_heads, [&](int begin, int end, int) {
    for (int item = begin; item < end; ++item) {
      const int t = item / p.n_heads, h = item % p.n_heads;
      ctx.kernels->attention_head({p.q + item * hd, p.k_cache, p.v_cache, p.page_tables[t],
                                   p.out + item * hd, p.positions[t], kv_stride,
                                   static_cast<size_t>(h / group) * hd, p.head_dim, p.page_size,
                                   p.scale});
    }
  });
}

void SwiGlu(const ExecContext& ctx, float* gate, const float* up, int num_tokens, int width) {
  ctx.pool->ParallelFor(num_tokens, [&](int begin, int end, int) {
    const size_t o = static_cast<size_t>(begin) * width;
    ctx.kernels->swiglu(gate + o, up + o, static_cast<size_t>(end - begin) * width);
  });
}

void AddInPlace(const ExecContext& ctx, float* x, const float* y, int num_tokens, int width) {
  ctx.kernels->add(x, y, static_cast<size_t>(num_tokens) * width);
}

void GatherRows(const ExecContext& ctx, const WeightMatrix& table, const int32_t* ids,
                int num_tokens, float* out) {
  for (int t = 0; t < num_tokens; ++t) {
    ctx.kernels->dequantize_row(table.type, table.row(ids[t]), table.cols,
                                out + static_cast<size_t>(t) * table.cols);
  }
}

}  // namespace pagoda::worker::cpu
