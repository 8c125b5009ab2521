#include "scheduler/core/block_pool.h"

#include <gtest/gtest.h>

namespace pagoda::scheduler {
namespace {

TEST(BlockPoolTest, AllocateAndRelease) {
  BlockPool pool(3);
  std::optional<PageId> a = pool.Allocate();
  std::optional<PageId> b = pool.Allocate();
  std::optional<PageId> c = pool.Allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0);
  EXPECT_EQ(*b, 1);
  EXPECT_FALSE(pool.Allocate().has_value()) << "pool exhausted";
  EXPECT_EQ(pool.ref_count(*b), 1);
  pool.Release({*b});
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.ref_count(*b), 0);
  EXPECT_EQ(pool.Allocate(), b) << "recently freed pages are reused first";
  pool.Release({*a, *b, *c});
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(BlockPoolTest, SharedPagesNeedEveryReferenceDropped) {
  BlockPool pool(2);
  PageId a = *pool.Allocate();
  pool.AddRef(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_FALSE(pool.DropRef(a));
  EXPECT_TRUE(pool.DropRef(a));
  EXPECT_FALSE(pool.is_free(a)) << "the caller decides: park or free";
  pool.AddRef(a);  // a parked page taken again
  EXPECT_TRUE(pool.DropRef(a));
  pool.Free(a);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPoolDeathTest, MisuseAborts) {
  BlockPool pool(2);
  PageId a = *pool.Allocate();
  pool.Release({a});
  EXPECT_DEATH(pool.Release({a}), "release of free page");
  EXPECT_DEATH(pool.AddRef(a), "reference to free page");
  PageId b = *pool.Allocate();
  EXPECT_DEATH(pool.Free(b), "free of held or free page");
}

}  // namespace
}  // namespace pagoda::scheduler
