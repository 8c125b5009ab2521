#include "worker/backend/cpu/kv_arena.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

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

void KvArena::CopyPage(const KvArena& from, int src, KvArena& to, int dst) {
  const KvArenaShape& a = from.shape_;
  const KvArenaShape& b = to.shape_;
  if (a.n_layers != b.n_layers || a.page_size != b.page_size || a.n_kv_heads != b.n_kv_heads ||
      a.head_dim != b.head_dim) {
    std::fprintf(stderr, "KvArena::CopyPage between arenas of different page shapes\n");
    std::abort();
  }
  const size_t page = static_cast<size_t>(a.page_size) * a.n_kv_heads * a.head_dim;
  for (size_t l = 0; l < static_cast<size_t>(a.n_layers); ++l) {
    std::copy_n(from.k_[l].begin() + static_cast<ptrdiff_t>(page * src), page,
                to.k_[l].begin() + static_cast<ptrdiff_t>(page * dst));
    std::copy_n(from.v_[l].begin() + static_cast<ptrdiff_t>(page * src), page,
                to.v_[l].begin() + static_cast<ptrdiff_t>(page * dst));
  }
}

size_t KvArena::bytes() const {
  size_t n = 0;
  for (const auto& k : k_) n += k.size();
  for (const auto& v : v_) n += v.size();
  return n * kValueBytes;
}

}  // namespace pagoda::worker::cpu
