// Host-memory KV cache arena: per layer, K and V arrays of fixed-size pages.
//
// Contract: storage only. Page ids are assigned by the scheduler; the arena neither tracks nor
// validates ownership. Layout per layer and per K/V: [num_pages][page_size][n_kv_heads][head_dim]
// IEEE half (F16, as llama.cpp's default cache: half the bytes that attention reads per position
// of float32), zero-initialized. Sizes are fixed at Create(); the arena is move-only. The CPU
// backend's swap space is a second arena of the same shape whose pages are the swap slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/aligned_vector.h"

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
  uint16_t* k(int layer) { return k_[static_cast<size_t>(layer)].data(); }  // [pages][ps][kv][hd]
  uint16_t* v(int layer) { return v_[static_cast<size_t>(layer)].data(); }
  size_t bytes() const;
  // Copies page `src` into page `dst` in every layer, K and V (ids unchecked: the caller's).
  void CopyPage(int src, int dst) { CopyPage(*this, src, *this, dst); }
  // Copies page `src` of `from` into page `dst` of `to`, arenas whose shapes differ at most in
  // num_pages (checked: aborts otherwise; ids unchecked).
  static void CopyPage(const KvArena& from, int src, KvArena& to, int dst);

 private:
  KvArena() = default;

  KvArenaShape shape_;
  std::vector<common::AlignedVector<uint16_t>> k_;
  std::vector<common::AlignedVector<uint16_t>> v_;
};

}  // namespace pagoda::worker::cpu
