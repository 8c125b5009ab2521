// The CUDA backend's KV arena: one device allocation holding K and V pages for every layer, and
// the arithmetic that sizes it from the GPU's memory.
//
// Layout: [layer][K, V][num_pages][page_size][n_kv_heads][head_dim] of the dtype, so a layer's K
// (or V) is the CPU arena's per-layer array (worker/backend/cpu/kv_arena.h), in one block.
// Host-only arithmetic: tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace pagoda::worker::cuda {

struct KvArenaLayout {
  int n_layers = 0;
  int num_pages = 0;
  int page_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  size_t element_bytes = 2;

  // One page of K (or of V) in one layer.
  size_t page_bytes() const {
    return size_t(page_size) * size_t(n_kv_heads) * size_t(head_dim) * element_bytes;
  }
  // One page across every layer, K and V: what one more page in the pool costs.
  size_t bytes_per_pool_page() const { return 2 * size_t(n_layers) * page_bytes(); }
  size_t layer_bytes() const { return size_t(num_pages) * page_bytes(); }  // K (or V), one layer
  size_t k_offset(int layer) const { return 2 * size_t(layer) * layer_bytes(); }
  size_t v_offset(int layer) const { return k_offset(layer) + layer_bytes(); }
  size_t total_bytes() const { return 2 * size_t(n_layers) * layer_bytes(); }
};

struct MemoryBudget {
  size_t device_total = 0;  // the GPU's memory
  size_t device_free = 0;   // free now, after weights and workspace were allocated
  double fraction = 0.9;    // --gpu-memory-fraction: share of device_total Pagoda may hold
  int requested_pages = 0;  // --kv-pages; 0 = what the fraction leaves
  size_t reserve = size_t{256} << 20;  // left free for cuBLAS, CUDA graphs and the runtime
};

// Pages for the arena: `requested_pages` when they fit in free memory, else the fraction's
// budget minus what is already used, in whole pages. ResourceExhausted (with the numbers) when
// not even one page fits or the requested pages do not; InvalidArgument for a fraction outside
// (0, 1]. Capped at 2^24 pages.
absl::StatusOr<int> PlanKvPages(const MemoryBudget& budget, size_t bytes_per_pool_page);

}  // namespace pagoda::worker::cuda
