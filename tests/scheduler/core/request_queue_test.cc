// RequestQueue: admission order by class, aging and fair share (one test per rule of the
// header), and Pop of an entry that is no longer first in its class.
#include "scheduler/core/request_queue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

namespace pagoda::scheduler {
namespace {

RequestQueue::Entry E(RequestId id, TenantId tenant, double arrival,
                      Priority priority = Priority::kNormal) {
  return {id, priority, arrival, tenant};
}

TEST(RequestQueueTest, PopRemovesTheEntryEvenWhenAVictimWasPutInFrontOfIt) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/false);
  const TenantId t = q.Acquire("default");
  q.PushBack(E(1, t, 0));
  q.PushBack(E(2, t, 1));
  std::optional<RequestQueue::Entry> head = q.Peek(2);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->id, 1u);
  // A preempted sequence of the same class goes back to the front before the head is popped.
  q.PushFront(E(3, t, 0.5));
  q.Pop(*head);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.Remove(E(1, t, 0))) << "the popped entry is still queued";
  EXPECT_EQ(q.Peek(2)->id, 3u);
  EXPECT_EQ(q.CheckInvariants(), std::nullopt);
}

TEST(RequestQueueTest, HigherClassesFirstThenArrival) {
  for (bool fair : {false, true}) {
    RequestQueue q(/*aging_interval=*/0, fair);
    const TenantId t = q.Acquire("default");
    q.PushBack(E(1, t, 0, Priority::kLow));
    q.PushBack(E(2, t, 1, Priority::kHigh));
    q.PushBack(E(3, t, 2, Priority::kHigh));
    EXPECT_EQ(q.Peek(3)->id, 2u);
    q.Pop(*q.Peek(3));
    EXPECT_EQ(q.Peek(3)->id, 3u);
    q.Pop(*q.Peek(3));
    EXPECT_EQ(q.Peek(3)->id, 1u);
  }
}

TEST(RequestQueueTest, AgingRaisesALowRequestAboveLaterHighOnes) {
  RequestQueue q(/*aging_interval=*/10, /*fair_share=*/true);
  const TenantId t = q.Acquire("default");
  q.PushBack(E(1, t, 0, Priority::kLow));
  q.PushBack(E(2, t, 25, Priority::kHigh));
  EXPECT_EQ(q.Peek(26)->id, 1u) << "low aged twice is high: a tie, and it arrived first";
  EXPECT_EQ(q.Peek(19)->id, 2u) << "low aged once is normal";
}

TEST(RequestQueueTest, FairShareAdmitsTheLeastServedBackloggedTenantFirst) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId heavy = q.Acquire("heavy"), light = q.Acquire("light");
  for (RequestId id = 1; id <= 5; ++id) q.PushBack(E(id, heavy, id));
  q.Charge(heavy, 100, 100);  // heavy was served while light was away
  q.PushBack(E(10, light, 10));
  // light was not backlogged: lifted to the lowest backlogged counter (heavy's 100), a tie,
  // which goes to queue order (heavy's request 1)...
  EXPECT_DOUBLE_EQ(q.tenant(light).counter, 100);
  EXPECT_EQ(q.Peek(11)->id, 1u);
  q.Pop(*q.Peek(11));
  q.Charge(heavy, 10, 10);
  // ...until heavy is charged for it: then light goes first.
  EXPECT_EQ(q.Peek(11)->id, 10u);
}

// A tenant lifted to another's counter ties with it: the one running fewer sequences per unit
// of weight goes first, not the one whose requests were queued earlier.
TEST(RequestQueueTest, EqualCountersGoToTheTenantRunningLess) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId heavy = q.Acquire("heavy"), light = q.Acquire("light");
  q.AddRunning(heavy, 32);
  q.PushBack(E(1, heavy, 1));
  q.Charge(heavy, 50, 50);
  q.PushBack(E(2, light, 2));
  ASSERT_DOUBLE_EQ(q.tenant(light).counter, q.tenant(heavy).counter);
  EXPECT_EQ(q.Peek(3)->id, 2u);
  q.AddRunning(light, 40);
  EXPECT_EQ(q.Peek(3)->id, 1u) << "now light runs more";
}

TEST(RequestQueueTest, ArrivalOrderIgnoresCountersWithoutFairShare) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/false);
  const TenantId heavy = q.Acquire("heavy"), light = q.Acquire("light");
  q.PushBack(E(1, heavy, 1));
  q.PushBack(E(2, light, 2));
  q.Charge(heavy, 1000, 1000);
  EXPECT_EQ(q.Peek(3)->id, 1u);
}

TEST(RequestQueueTest, IdleTimeIsNotBanked) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId a = q.Acquire("a"), b = q.Acquire("b");
  // b is backlogged and served for a long time while a is idle.
  q.PushBack(E(1, b, 0));
  q.Charge(b, 500, 500);
  q.PushBack(E(2, a, 1));
  EXPECT_DOUBLE_EQ(q.tenant(a).counter, 500) << "lifted to the lowest backlogged counter";
  // A tenant already backlogged is not lifted again.
  q.Charge(b, 100, 100);
  q.PushBack(E(3, a, 2));
  EXPECT_DOUBLE_EQ(q.tenant(a).counter, 500);
}

TEST(RequestQueueTest, WithNoBacklogAReturningTenantIsLiftedToTheLastToLeave) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId a = q.Acquire("a"), b = q.Acquire("b");
  q.PushBack(E(1, b, 0));
  q.Charge(b, 300, 300);
  q.Pop(*q.Peek(1));  // b leaves the backlog last
  q.PushBack(E(2, a, 2));
  EXPECT_DOUBLE_EQ(q.tenant(a).counter, 300);
}

TEST(RequestQueueTest, WeightsDivideTheCharge) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true, {{"gold", 2.0}});
  const TenantId gold = q.Acquire("gold"), plain = q.Acquire("plain");
  EXPECT_DOUBLE_EQ(q.tenant(gold).weight, 2);
  EXPECT_DOUBLE_EQ(q.tenant(plain).weight, 1);
  q.Charge(gold, 100, 100);
  q.Charge(plain, 100, 100);
  EXPECT_DOUBLE_EQ(q.tenant(gold).counter, 50);
  EXPECT_DOUBLE_EQ(q.tenant(plain).counter, 100);
  EXPECT_EQ(q.tenant(gold).served_tokens, 100);
}

// Two always-backlogged tenants weighted 1:2, each admission charged the same service: the
// heavier weight is admitted twice as often.
TEST(RequestQueueTest, BackloggedTenantsAreServedInProportionToTheirWeights) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true, {{"two", 2.0}});
  const TenantId one = q.Acquire("one"), two = q.Acquire("two");
  RequestId next = 1;
  for (int i = 0; i < 4; ++i) {
    q.PushBack(E(next++, one, 0));
    q.PushBack(E(next++, two, 0));
  }
  std::map<TenantId, int> admitted;
  for (int i = 0; i < 3000; ++i) {
    const RequestQueue::Entry head = *q.Peek(i);
    q.Pop(head);
    q.Charge(head.tenant, 10, 10);
    ++admitted[head.tenant];
    q.PushBack(E(next++, head.tenant, i));  // stays backlogged
  }
  EXPECT_NEAR(static_cast<double>(admitted[two]) / admitted[one], 2.0, 0.01);
  EXPECT_LE(std::abs(q.tenant(one).counter - q.tenant(two).counter), 10.0);
}

TEST(RequestQueueTest, PrioritiesRankAboveCounters) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId rich = q.Acquire("rich"), poor = q.Acquire("poor");
  q.PushBack(E(1, poor, 0, Priority::kLow));
  q.PushBack(E(2, rich, 1, Priority::kNormal));
  q.Charge(rich, 1000, 1000);
  EXPECT_EQ(q.Peek(2)->id, 2u) << "a low request never overtakes a normal one";
}

TEST(RequestQueueTest, PushFrontKeepsAPreemptedRequestFirstInItsTenant) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true);
  const TenantId t = q.Acquire("t");
  q.PushBack(E(1, t, 5));
  q.PushFront(E(2, t, 9));
  EXPECT_EQ(q.Peek(10)->id, 2u);
  EXPECT_EQ(q.CheckInvariants(), std::nullopt);
}

TEST(RequestQueueTest, IdleTenantsAreForgottenPastTheLimitButNotLiveOnes) {
  RequestQueue q(/*aging_interval=*/0, /*fair_share=*/true, {{"named", 3.0}});
  const TenantId live = q.Acquire("live");
  const TenantId named = q.Acquire("named");
  q.Release(named);
  for (size_t i = 0; i < 2 * RequestQueue::kMaxIdleTenants + 10; ++i) {
    q.Release(q.Acquire("t" + std::to_string(i)));
  }
  EXPECT_LT(q.tenants().size(), 2 * RequestQueue::kMaxIdleTenants + 3);
  EXPECT_EQ(q.Find("live"), live);
  EXPECT_EQ(q.Find("named"), named) << "tenants with a weight are kept";
  EXPECT_EQ(q.CheckInvariants(), std::nullopt);
}

}  // namespace
}  // namespace pagoda::scheduler
