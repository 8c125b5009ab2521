#include "scheduler/core/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

std::vector<int32_t> Tokens(int32_t n, int32_t first = 10) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

const auto kNoTokens = [](RequestId) -> const std::vector<int32_t>* { return nullptr; };

// Runs `seq` on worker 1 through Open, Grow and Commit of all its tokens.
int32_t Compute(KvCacheManager& kv, RequestId seq, const std::vector<int32_t>& tokens,
                const std::string& salt = "") {
  const int32_t cached = kv.Open(1, seq, tokens, salt);
  EXPECT_TRUE(kv.Grow(seq, static_cast<int32_t>(tokens.size())));
  kv.Commit(seq, tokens, static_cast<int32_t>(tokens.size()));
  return cached;
}

TEST(KvCacheManagerTest, FullPagesHitButTheLastTokenIsAlwaysComputed) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 16, 4);
  const std::vector<int32_t> a = Tokens(12);
  EXPECT_EQ(Compute(kv, 1, a), 0);
  kv.Forget(1);
  EXPECT_EQ(kv.usage(1).parked, 3);
  // The same 12 tokens: pages 0-1 hit, page 2 holds the last token, which must be computed.
  EXPECT_EQ(kv.Lookup(1, 2, a, "").tokens, 8);
  EXPECT_EQ(kv.Lookup(1, 2, a, "").parked_pages, 2);
  // 13 tokens starting alike: three pages hit.
  EXPECT_EQ(kv.Open(1, 3, Tokens(13), ""), 12);
  EXPECT_EQ(kv.pages(3).size(), 3u);
  EXPECT_EQ(kv.usage(1).held, 3);
  EXPECT_EQ(kv.queried_tokens(), 12 + 13);
  EXPECT_EQ(kv.hit_tokens(), 12);
  // A different token in page 1 stops the run there.
  std::vector<int32_t> b = Tokens(13);
  b[5] = 999;
  EXPECT_EQ(kv.Lookup(1, 4, b, "").tokens, 4);
}

TEST(KvCacheManagerTest, SaltsKeepTenantsApart) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 16, 4);
  Compute(kv, 1, Tokens(9), "tenant-a");
  kv.Forget(1);
  EXPECT_EQ(kv.Lookup(1, 2, Tokens(9), "tenant-a").tokens, 8);
  EXPECT_EQ(kv.Lookup(1, 3, Tokens(9), "tenant-b").tokens, 0);
  EXPECT_EQ(kv.Lookup(1, 4, Tokens(9), "").tokens, 0);
}

TEST(KvCacheManagerTest, UncommittedPagesAreNeverShared) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 16, 4);
  kv.Open(1, 1, Tokens(9), "");
  ASSERT_TRUE(kv.Grow(1, 9));
  kv.Commit(1, Tokens(9), 5);  // the worker confirmed positions [0, 5): page 0 only
  EXPECT_EQ(kv.Lookup(1, 2, Tokens(9), "").tokens, 4);
  kv.Forget(1);
  EXPECT_EQ(kv.usage(1).parked, 1);
  EXPECT_EQ(kv.usage(1).free, 15);
}

TEST(KvCacheManagerTest, EvictsLeastRecentlyUsedTailPagesFirst) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 4, 2);
  Compute(kv, 1, Tokens(4, 10));  // pages 0, 1
  kv.Forget(1);
  Compute(kv, 2, Tokens(4, 50));  // pages 2, 3
  kv.Forget(2);
  EXPECT_EQ(kv.usage(1).parked, 4);
  EXPECT_EQ(kv.AvailablePages(1), 4);
  // One page for a newcomer: the oldest request's tail page goes first, its head survives.
  kv.Open(1, 3, Tokens(1, 90), "");
  ASSERT_TRUE(kv.Grow(3, 1));
  EXPECT_EQ(kv.pages(3), (std::vector<PageId>{1}));
  EXPECT_EQ(kv.Lookup(1, 4, Tokens(5, 10), "").tokens, 2);
  EXPECT_EQ(kv.Lookup(1, 5, Tokens(5, 50), "").tokens, 4);
  // A hit refreshes a page: request 2's pages are now newer than request 1's head.
  kv.Open(1, 6, Tokens(5, 50), "");
  kv.Forget(6);
  ASSERT_TRUE(kv.Grow(3, 3));
  EXPECT_EQ(kv.pages(3), (std::vector<PageId>{1, 0}));
  // Held pages are never evicted: nothing more can be handed out.
  kv.Open(1, 7, Tokens(5, 50), "");
  EXPECT_FALSE(kv.Grow(3, 7)) << "only held pages left";
  EXPECT_EQ(kv.pages(3).size(), 2u) << "a failed Grow changes nothing";
  const std::vector<int32_t> t3 = Tokens(1, 90), t7 = Tokens(5, 50);
  EXPECT_OK(kv.CheckInvariants([&](RequestId id) { return id == 3 ? &t3 : &t7; }));
}

TEST(KvCacheManagerTest, SharedPagesCountEveryHolder) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 8, 4);
  const std::vector<int32_t> t = Tokens(9);
  Compute(kv, 1, t);
  EXPECT_EQ(kv.Open(1, 2, t, ""), 8);
  EXPECT_EQ(kv.Open(1, 3, t, ""), 8);
  EXPECT_EQ(kv.pool(1)->ref_count(kv.pages(1)[0]), 3);
  EXPECT_OK(kv.CheckInvariants([&](RequestId) { return &t; }));
  kv.Forget(1);
  kv.Forget(2);
  EXPECT_EQ(kv.usage(1).parked, 0) << "still held by 3";
  kv.Forget(3);
  EXPECT_EQ(kv.usage(1).parked, 2);
  EXPECT_EQ(kv.usage(1).held, 0);
  EXPECT_OK(kv.CheckInvariants(kNoTokens));
}

TEST(KvCacheManagerTest, RemovedWorkerTakesItsCacheAlong) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 8, 4);
  Compute(kv, 1, Tokens(9));
  kv.RemoveWorker(1);
  EXPECT_FALSE(kv.has_table(1));
  kv.AddWorker(1, 8, 4);
  EXPECT_EQ(kv.Lookup(1, 2, Tokens(9), "").tokens, 0);
  EXPECT_OK(kv.CheckInvariants(kNoTokens));
}

TEST(KvCacheManagerTest, CachingOffNamesNothing) {
  KvCacheManager kv(false);
  kv.AddWorker(1, 8, 4);
  Compute(kv, 1, Tokens(9));
  kv.Forget(1);
  EXPECT_EQ(kv.Open(1, 2, Tokens(9), ""), 0);
  EXPECT_EQ(kv.usage(1).free, 8);
  EXPECT_EQ(kv.hit_tokens(), 0);
  EXPECT_EQ(kv.queried_tokens(), 0);
}

TEST(KvCacheManagerTest, ForkSharesWholePagesAndCopiesThePartialOne) {
  KvCacheManager kv(false);  // sharing by fork needs no prefix cache
  kv.AddWorker(1, 8, 4);
  const std::vector<int32_t> t = Tokens(10);
  kv.Open(1, 1, t, "");
  ASSERT_TRUE(kv.Grow(1, 10));   // pages 0, 1, 2
  auto copy = kv.Fork(1, 2, 9);  // positions [0, 9): pages 0, 1 whole, page 2 partial
  ASSERT_TRUE(copy.has_value());
  ASSERT_TRUE(copy->has_value());
  EXPECT_EQ((*copy)->src, 2);
  EXPECT_EQ(kv.pages(2), (std::vector<PageId>{0, 1, (*copy)->dst}));
  EXPECT_EQ(kv.pool(1)->ref_count(0), 2);
  EXPECT_EQ(kv.pool(1)->ref_count(2), 1);
  auto aligned = kv.Fork(1, 3, 8);  // positions [0, 8): whole pages only, nothing to copy
  ASSERT_TRUE(aligned.has_value());
  EXPECT_FALSE(aligned->has_value());
  EXPECT_EQ(kv.pages(3), (std::vector<PageId>{0, 1}));
  EXPECT_OK(kv.CheckInvariants([&](RequestId) { return &t; }));
  // No page left for the copy: no fork, no change.
  kv.Open(1, 4, Tokens(16, 50), "");
  ASSERT_TRUE(kv.Grow(4, 16));
  EXPECT_EQ(kv.AvailablePages(1), 0);
  EXPECT_FALSE(kv.Fork(1, 5, 9).has_value());
  EXPECT_FALSE(kv.has_table(5));
  for (RequestId id : {1, 2, 3, 4}) kv.Forget(id);
  EXPECT_EQ(kv.usage(1).free, 8);
}

TEST(KvCacheManagerTest, PagesBeingComputedAreAnnouncedUntilCommitted) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 16, 4);
  const std::vector<int32_t> t = Tokens(13);
  kv.Open(1, 1, t, "");
  ASSERT_TRUE(kv.Grow(1, 13));
  EXPECT_EQ(kv.Lookup(1, 2, t, "").computing_tokens, 12);
  EXPECT_EQ(kv.Lookup(1, 3, t, "other salt").computing_tokens, 0);
  kv.Commit(1, t, 8);  // two pages confirmed: a hit now, the third still in progress
  PrefixHit hit = kv.Lookup(1, 2, t, "");
  EXPECT_EQ(hit.tokens, 8);
  EXPECT_EQ(hit.computing_tokens, 4);
  EXPECT_OK(kv.CheckInvariants([&](RequestId) { return &t; }));
  kv.Release(1);  // gone before computing the rest: nothing more to wait for
  EXPECT_EQ(kv.Lookup(1, 2, t, "").computing_tokens, 0);
  EXPECT_OK(kv.CheckInvariants(kNoTokens));
}

TEST(PrefixCacheTest, HashesChainAndCollisionsAreNotHits) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  EXPECT_NE(PageHash(ChainRoot(""), a), PageHash(ChainRoot("x"), a));
  EXPECT_NE(PageHash(1, a), PageHash(2, a));
  PrefixCache cache(2);
  ASSERT_TRUE(cache.Insert(0, 77, 5, a));
  EXPECT_EQ(cache.Find(77, 5, a), 0);
  EXPECT_FALSE(cache.Find(77, 6, a).has_value()) << "same hash, other parent";
  EXPECT_FALSE(cache.Find(77, 5, std::vector<int32_t>{1, 2, 3, 5}).has_value());
  EXPECT_FALSE(cache.Insert(1, 77, 5, a)) << "the content is cached already";
}

// Swap: the computed pages go to slots and the table is released as by Release; a swap-in
// takes fresh pages, and its slots are reused only after the plan (EndPlan).
TEST(KvCacheManagerTest, SwapOutReleasesTheTableAndSwapInRefillsNewPages) {
  KvCacheManager kv(true);
  kv.AddWorker(1, 16, 4, /*num_swap_pages=*/4);
  const std::vector<int32_t> a = Tokens(10);
  auto tokens_of = [&](RequestId) { return &a; };
  Compute(kv, 1, a);
  const std::vector<PageId> pages = kv.pages(1);
  ASSERT_EQ(pages.size(), 3u);
  std::optional<std::vector<SwapCopy>> out = kv.SwapOut(1, /*positions=*/10);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ((*out)[k].page, pages[k]);
  EXPECT_FALSE(kv.has_table(1));
  EXPECT_TRUE(kv.swapped(1));
  EXPECT_EQ(kv.swapped_pages(1), 3);
  EXPECT_EQ(kv.free_swap_slots(1), 1);
  EXPECT_EQ(kv.usage(1).held, 0);
  EXPECT_EQ(kv.usage(1).parked, 2) << "its two full pages stay cached";
  EXPECT_OK(kv.CheckInvariants(tokens_of));
  // Too few slots for another three pages: no change.
  Compute(kv, 2, Tokens(10, 100));
  EXPECT_FALSE(kv.SwapOut(2, 10).has_value());
  EXPECT_TRUE(kv.has_table(2));
  kv.Forget(2);

  std::optional<std::vector<SwapCopy>> in = kv.SwapIn(1);
  ASSERT_TRUE(in.has_value());
  ASSERT_EQ(in->size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ((*in)[k].slot, (*out)[k].slot);
    EXPECT_EQ((*in)[k].page, kv.pages(1)[k]);
  }
  EXPECT_FALSE(kv.swapped(1));
  EXPECT_EQ(kv.free_swap_slots(1), 1) << "released at the end of the plan only";
  EXPECT_OK(kv.CheckInvariants(tokens_of));
  kv.EndPlan(1);
  EXPECT_EQ(kv.free_swap_slots(1), 4);
  EXPECT_OK(kv.CheckInvariants(tokens_of));
}

TEST(KvCacheManagerTest, ForgettingASwappedSequenceFreesItsSlotsAndRemovingTheWorkerDropsThem) {
  KvCacheManager kv(false);
  kv.AddWorker(1, 16, 4, /*num_swap_pages=*/8);
  Compute(kv, 1, Tokens(10));
  ASSERT_TRUE(kv.SwapOut(1, 10).has_value());
  kv.Forget(1);
  EXPECT_EQ(kv.free_swap_slots(1), 8);
  Compute(kv, 2, Tokens(10));
  ASSERT_TRUE(kv.SwapOut(2, 5).has_value());
  EXPECT_EQ(kv.swapped_pages(2), 2) << "only the pages of the positions asked for";
  kv.RemoveWorker(1);
  EXPECT_FALSE(kv.swapped(2));
  EXPECT_OK(kv.CheckInvariants(kNoTokens));
}

}  // namespace
}  // namespace pagoda::scheduler
