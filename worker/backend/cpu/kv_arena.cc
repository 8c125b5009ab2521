#include "worker/backend/cpu/kv_arena.h"

#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

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
  // total <= max_bytes: array_bytes fits; the mapping adds a page or two per array, so it is
  // sized in 128 bits as well.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t array_bytes = static_cast<size_t>(per_layer) * kValueBytes;
  const size_t arrays = 2 * static_cast<size_t>(s.n_layers);
  using u128 = unsigned __int128;
  const u128 stride_wide = (u128{array_bytes} + page - 1) / page * page + page;
  if (page + arrays * stride_wide > std::numeric_limits<size_t>::max() / 2) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV arena of %.1f MiB exceeds the address space", static_cast<double>(total) / (1 << 20)));
  }
  const size_t stride = static_cast<size_t>(stride_wide);
  const size_t mapped = page + arrays * stride;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV arena of %.1f MiB could not be mapped: %s",
                        static_cast<double>(mapped) / (1 << 20), std::strerror(errno)));
  }
  KvArena arena;
  arena.shape_ = s;
  arena.per_array_ = static_cast<size_t>(per_layer);
  arena.guard_ = page;
  arena.stride_ = stride;
  arena.mapping_ = std::unique_ptr<std::byte, Unmap>(static_cast<std::byte*>(p), Unmap{mapped});
  std::byte* const base = arena.mapping_.get();
  // The guard page before the first array, then each array's tail: the rest of its last page
  // (poisoned for ASan) and the guard page after it.
  bool guarded = mprotect(base, page, PROT_NONE) == 0;
  for (size_t i = 0; i < arrays; ++i) {
    std::byte* const end = base + page + i * stride + array_bytes;
    std::byte* const guard = base + page + (i + 1) * stride - page;
    ASAN_POISON_MEMORY_REGION(end, static_cast<size_t>(guard - end));
    guarded = guarded && mprotect(guard, page, PROT_NONE) == 0;
  }
  if (!guarded) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV arena guard pages could not be set: %s", std::strerror(errno)));
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
  for (int l = 0; l < a.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::copy_n(from.array(l, kv) + page * static_cast<size_t>(src), page,
                  to.array(l, kv) + page * static_cast<size_t>(dst));
    }
  }
}

void KvArena::Unmap::operator()(std::byte* p) const {
  // Unpoisoned first: ASan would otherwise still flag these addresses once they are reused.
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
  munmap(p, bytes);
}

}  // namespace pagoda::worker::cpu
