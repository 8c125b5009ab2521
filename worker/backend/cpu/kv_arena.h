// Host-memory KV cache arena: per layer, K and V arrays of fixed-size pages.
//
// Contract: storage only. Page ids are assigned by the scheduler; the arena neither tracks nor
// validates ownership. Layout per layer and per K/V: [num_pages][page_size][n_kv_heads][head_dim]
// IEEE half (F16, as llama.cpp's default cache: half the bytes that attention reads per position
// of float32), zero-initialized. Sizes are fixed at Create(); the arena is move-only. The CPU
// backend's swap space is a second arena of the same shape whose pages are the swap slots.
//
// The arrays live in one anonymous mapping with its pages committed at Create() (MAP_POPULATE):
// the kernel hands them over zeroed, so no pass over hundreds of MiB in user space writes the
// zeros (a pass that sanitizer builds instrument element by element). Each array starts on a
// page of its own and is fenced by inaccessible guard pages, so a write past either end faults
// instead of landing in the neighbouring array; under ASan the rest of an array's last page is
// poisoned too, so an overrun is reported from its first byte, as for a heap block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace pagoda::worker::cpu {

struct KvArenaShape {
  int n_layers = 0;
  int num_pages = 0;
  int page_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

class KvArena {
 public:
  static constexpr size_t kValueBytes = sizeof(uint16_t);  // one F16 value of K or V

  // Fails with InvalidArgument on non-positive sizes and ResourceExhausted when the arena would
  // exceed `max_bytes`.
  static absl::StatusOr<KvArena> Create(const KvArenaShape& shape, size_t max_bytes);

  KvArena(KvArena&&) = default;
  KvArena& operator=(KvArena&&) = default;
  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  const KvArenaShape& shape() const { return shape_; }
  uint16_t* k(int layer) { return array(layer, 0); }  // [pages][ps][kv][hd]
  uint16_t* v(int layer) { return array(layer, 1); }
  size_t bytes() const {
    return 2 * static_cast<size_t>(shape_.n_layers) * per_array_ * kValueBytes;
  }
  // Copies page `src` into page `dst` in every layer, K and V (ids unchecked: the caller's).
  void CopyPage(int src, int dst) { CopyPage(*this, src, *this, dst); }
  // Copies page `src` of `from` into page `dst` of `to`, arenas whose shapes differ at most in
  // num_pages (checked: aborts otherwise; ids unchecked).
  static void CopyPage(const KvArena& from, int src, KvArena& to, int dst);

 private:
  struct Unmap {
    size_t bytes;  // of the whole mapping, guard pages included
    void operator()(std::byte* p) const;
  };

  KvArena() = default;
  // Layer `layer`'s K (kv 0) or V (kv 1) array: the arrays follow one another, K first, each
  // `stride_` bytes after the previous one, the first one guard page into the mapping.
  uint16_t* array(int layer, int kv) const {
    return reinterpret_cast<uint16_t*>(mapping_.get() + guard_ +
                                       (2 * static_cast<size_t>(layer) + kv) * stride_);
  }

  KvArenaShape shape_;
  size_t per_array_ = 0;  // values in one layer's K (or V) array
  size_t guard_ = 0;      // bytes of one guard page (the system's page size)
  size_t stride_ = 0;     // bytes from one array to the next: its pages and one guard page
  std::unique_ptr<std::byte, Unmap> mapping_;
};

}  // namespace pagoda::worker::cpu
