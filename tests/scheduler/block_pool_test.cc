#include "scheduler/core/block_pool.h"

#include <gtest/gtest.h>

namespace pagoda::scheduler {
namespace {

TEST(BlockPoolTest, ReserveTakeFree) {
  BlockPool pool(4);
  EXPECT_EQ(pool.available(), 4);
  ASSERT_TRUE(pool.Reserve(3));
  EXPECT_FALSE(pool.Reserve(2));
  EXPECT_EQ(pool.available(), 1);
  PageId a = pool.TakeReserved();
  PageId b = pool.TakeReserved();
  EXPECT_NE(a, b);
  EXPECT_TRUE(pool.IsAllocated(a));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.reserved(), 1);
  pool.Unreserve(1);
  pool.Free({a, b});
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_FALSE(pool.IsAllocated(a));
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(2);
  ASSERT_TRUE(pool.Reserve(1));
  PageId a = pool.TakeReserved();
  pool.Free({a});
  EXPECT_DEATH(pool.Free({a}), "free of a page not allocated");
}

}  // namespace
}  // namespace pagoda::scheduler
