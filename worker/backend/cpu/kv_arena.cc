#include "worker/backend/cpu/kv_arena.h"

#include <algorithm>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace pagoda::worker::cpu {

absl::StatusOr<KvArena> KvArena::Create(const KvArenaShape& s, size_t max_bytes) {
  if (s.n_layers <= 0 || s.num_pages <= 0 || s.page_size <= 0 || s.n_kv_heads <= 0 ||
      s.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV arena sizes must be positive: layers %d, pages %d, page_size %d, kv_heads %d, "
        "head_dim %d",
        s.n_layers, s.num_pages, s.page_size, s.n_kv_heads, s.head_dim));
  }
  // 128-bit arithmetic: no overflow for any int inputs.
  const unsigned __int128 per_layer =
      static_cast<unsigned __int128>(s.num_pages) * s.page_size * s.n_kv_heads * s.head_dim;
  const unsigned __int128 total = per_layer * 2 * s.n_layers * kValueBytes;
  if (total > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV arena of %d pages x %d slots x %d layers needs %.1f MiB, limit %.1f MiB", s.num_pages,
        s.page_size, s.n_layers, static_cast<double>(total) / (1 << 20),
        static_cast<double>(max_bytes) / (1 << 20)));
  }
  KvArena arena;
  arena.shape_ = s;
  arena.k_.resize(static_cast<size_t>(s.n_layers));
  arena.v_.resize(static_cast<size_t>(s.n_layers));
  for (int l = 0; l < s.n_layers; ++l) {
    arena.k_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), uint16_t{0});
    arena.v_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), uint16_t{0});
  }
  return arena;
}

void KvArena::CopyPage(int src, int dst) {
  const size_t page = static_cast<size_t>(shape_.page_size) * shape_.n_kv_heads * shape_.head_dim;
  for (auto* kv : {&k_, &v_}) {
    for (common::AlignedVector<uint16_t>& layer : *kv) {
      std::copy_n(layer.begin() + static_cast<ptrdiff_t>(page * src), page,
                  layer.begin() + static_cast<ptrdiff_t>(page * dst));
    }
  }
}

size_t KvArena::bytes() const {
  size_t n = 0;
  for (const auto& k : k_) n += k.size();
  for (const auto& v : v_) n += v.size();
  return n * kValueBytes;
}

}  // namespace pagoda::worker::cpu
