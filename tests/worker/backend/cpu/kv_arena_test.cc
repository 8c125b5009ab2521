#include "worker/backend/cpu/kv_arena.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

// ASan: GCC defines __SANITIZE_ADDRESS__, clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define PAGODA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGODA_TEST_ASAN 1
#endif
#endif

namespace pagoda::worker::cpu {
namespace {

constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();

// Values in one layer's K (or V) array.
size_t PerArray(const KvArenaShape& s) {
  return static_cast<size_t>(s.num_pages) * s.page_size * s.n_kv_heads * s.head_dim;
}

TEST(KvArenaTest, StartsZeroedWithDisjointArraysOfTheShapesSize) {
  const KvArenaShape s{3, 5, 4, 2, 8};
  ASSERT_OK_AND_ASSIGN(KvArena arena, KvArena::Create(s, kNoLimit));
  const size_t n = PerArray(s);
  EXPECT_EQ(arena.bytes(), 2 * 3 * n * KvArena::kValueBytes);
  for (int l = 0; l < s.n_layers; ++l) {
    for (uint16_t* a : {arena.k(l), arena.v(l)}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u) << "layer " << l;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 0) << "layer " << l << " value " << i;
    }
  }
  // Every array written with its own mark, then read back whole: no two arrays overlap.
  for (int l = 0; l < s.n_layers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      arena.k(l)[i] = static_cast<uint16_t>(2 * l + 1);
      arena.v(l)[i] = static_cast<uint16_t>(2 * l + 2);
    }
  }
  for (int l = 0; l < s.n_layers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(arena.k(l)[i], 2 * l + 1) << "layer " << l << " value " << i;
      ASSERT_EQ(arena.v(l)[i], 2 * l + 2) << "layer " << l << " value " << i;
    }
  }
}

TEST(KvArenaTest, CopyPageMovesOnePageOfEveryLayerBetweenArenas) {
  const KvArenaShape s{2, 4, 3, 2, 4};
  ASSERT_OK_AND_ASSIGN(KvArena from, KvArena::Create(s, kNoLimit));
  KvArenaShape slots = s;
  slots.num_pages = 7;
  ASSERT_OK_AND_ASSIGN(KvArena to, KvArena::Create(slots, kNoLimit));
  std::mt19937 rng(11);
  const size_t n = PerArray(s), page = PerArray(s) / s.num_pages;
  for (int l = 0; l < s.n_layers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      from.k(l)[i] = static_cast<uint16_t>(rng());
      from.v(l)[i] = static_cast<uint16_t>(rng());
    }
  }
  const std::vector<uint16_t> poison(PerArray(slots), 0xBEEF);
  for (int l = 0; l < s.n_layers; ++l) {
    std::copy(poison.begin(), poison.end(), to.k(l));
    std::copy(poison.begin(), poison.end(), to.v(l));
  }
  KvArena::CopyPage(from, 2, to, 6);
  from.CopyPage(3, 0);  // within one arena
  for (int l = 0; l < s.n_layers; ++l) {
    for (size_t i = 0; i < PerArray(slots); ++i) {
      const bool copied = i / page == 6;
      ASSERT_EQ(to.k(l)[i], copied ? from.k(l)[2 * page + i % page] : 0xBEEF) << l << " " << i;
      ASSERT_EQ(to.v(l)[i], copied ? from.v(l)[2 * page + i % page] : 0xBEEF) << l << " " << i;
    }
    for (size_t i = 0; i < page; ++i) {
      ASSERT_EQ(from.k(l)[i], from.k(l)[3 * page + i]) << l << " " << i;
      ASSERT_EQ(from.v(l)[i], from.v(l)[3 * page + i]) << l << " " << i;
    }
  }
}

TEST(KvArenaTest, RefusesBadSizesAndArenasOverTheLimit) {
  EXPECT_EQ(KvArena::Create({0, 4, 16, 2, 8}, kNoLimit).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvArena::Create({2, 4, 16, -1, 8}, kNoLimit).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 2 layers x K and V x 4 pages x 16 slots x 2 heads x 8 dims x 2 bytes = 8 KiB.
  EXPECT_OK(KvArena::Create({2, 4, 16, 2, 8}, 8192));
  EXPECT_EQ(KvArena::Create({2, 4, 16, 2, 8}, 8191).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Sizes whose product overflows 64 bits are refused by the limit, not wrapped around.
  const int big = std::numeric_limits<int>::max();
  EXPECT_EQ(KvArena::Create({big, big, big, big, big}, kNoLimit).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// A write past an array's page, or before the first array, faults on a guard page instead of
// landing in the next array; under ASan the first value past an array's end is reported.
TEST(KvArenaDeathTest, WritesPastAnArrayFault) {
  const KvArenaShape s{2, 3, 5, 1, 8};  // 240 values (480 bytes) an array: its page has a tail
  ASSERT_OK_AND_ASSIGN(KvArena arena, KvArena::Create(s, kNoLimit));
  const size_t page_values = static_cast<size_t>(sysconf(_SC_PAGESIZE)) / sizeof(uint16_t);
  volatile uint16_t* const first = arena.k(0);
  volatile uint16_t* const last = arena.v(1);
  first[PerArray(s) - 1] = 1;  // the arrays' own values stay writable
  last[PerArray(s) - 1] = 1;
  EXPECT_DEATH(first[page_values] = 1, "");  // the guard page between layer 0's K and V
  EXPECT_DEATH(last[page_values] = 1, "");   // the guard page after the last array
  EXPECT_DEATH(*(first - 1) = 1, "");        // the guard page before the first array
#ifdef PAGODA_TEST_ASAN
  EXPECT_DEATH(first[PerArray(s)] = 1, "AddressSanitizer");
#endif
}

}  // namespace
}  // namespace pagoda::worker::cpu
