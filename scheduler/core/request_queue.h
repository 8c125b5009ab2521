// RequestQueue: waiting requests ordered by priority class, then arrival.
//
// Contract: each id appears at most once. PushFront puts a request back at the head of its
// class (a resumed request keeps its place ahead of newer arrivals).
#pragma once

#include <array>
#include <deque>
#include <optional>

#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class RequestQueue {
 public:
  void PushBack(RequestId id, Priority priority);
  void PushFront(RequestId id, Priority priority);
  // The next request to admit: highest class first, FIFO within a class.
  std::optional<RequestId> Peek() const;
  void Pop();
  // Removes `id` wherever it is; returns false if absent.
  bool Remove(RequestId id, Priority priority);
  size_t size() const;
  bool empty() const { return size() == 0; }

 private:
  std::array<std::deque<RequestId>, kNumPriorities> classes_;
};

}  // namespace pagoda::scheduler
