// std::vector whose storage starts on a cache line, for data that SIMD kernels stream through:
// a 64-byte load from a cache-line-aligned row never splits across two lines.
//
// Contract: AlignedVector<T> behaves as std::vector<T> (same interface, value semantics); only
// the allocator differs, so data() is a multiple of kCacheLineBytes.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace pagoda::common {

inline constexpr size_t kCacheLineBytes = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kCacheLineBytes}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace pagoda::common
