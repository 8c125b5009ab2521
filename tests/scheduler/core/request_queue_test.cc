// RequestQueue: admission order, and Pop of an entry that is no longer first in its class.
#include "scheduler/core/request_queue.h"

#include <gtest/gtest.h>

namespace pagoda::scheduler {
namespace {

TEST(RequestQueueTest, PopRemovesTheEntryEvenWhenAVictimWasPutInFrontOfIt) {
  RequestQueue q(/*aging_interval=*/0);
  q.PushBack({1, Priority::kNormal, 0});
  q.PushBack({2, Priority::kNormal, 1});
  std::optional<RequestQueue::Entry> head = q.Peek(2);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->id, 1u);
  // A preempted sequence of the same class goes back to the front before the head is popped.
  q.PushFront({3, Priority::kNormal, 0.5});
  q.Pop(*head);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.Remove(1, Priority::kNormal)) << "the popped entry is still queued";
  EXPECT_EQ(q.Peek(2)->id, 3u);
}

TEST(RequestQueueTest, HigherClassesFirstThenArrival) {
  RequestQueue q(/*aging_interval=*/0);
  q.PushBack({1, Priority::kLow, 0});
  q.PushBack({2, Priority::kHigh, 1});
  q.PushBack({3, Priority::kHigh, 2});
  EXPECT_EQ(q.Peek(3)->id, 2u);
  q.Pop(*q.Peek(3));
  EXPECT_EQ(q.Peek(3)->id, 3u);
  q.Pop(*q.Peek(3));
  EXPECT_EQ(q.Peek(3)->id, 1u);
}

}  // namespace
}  // namespace pagoda::scheduler
