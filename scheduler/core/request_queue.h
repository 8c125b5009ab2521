// RequestQueue: waiting requests by priority class, first come first served within a class,
// with aging so that no class starves.
//
// A request's effective class rises by one for every `aging_interval` seconds it has waited
// (capped at critical). The next request is the class head with the highest effective class;
// ties go to the earlier arrival. So a low request that waited 3 intervals competes as critical
// and, having arrived earlier, goes before every critical request that arrived after it:
// its wait is bounded by 3 intervals plus the work queued ahead of it.
//
// Contract: each id appears at most once. PushFront puts a (preempted) request back at the
// head of its class, ahead of newer arrivals.
#pragma once

#include <array>
#include <deque>
#include <optional>

#include "scheduler/core/types.h"

namespace pagoda::scheduler {

class RequestQueue {
 public:
  struct Entry {
    RequestId id = 0;
    Priority priority = Priority::kNormal;
    double arrival = 0;  // seconds, the core's clock
  };

  // `aging_interval` <= 0 turns aging off.
  explicit RequestQueue(double aging_interval) : aging_interval_(aging_interval) {}

  void PushBack(const Entry& entry);
  void PushFront(const Entry& entry);
  // The next request to admit at time `now`, or nullopt when empty.
  std::optional<Entry> Peek(double now) const;
  // Removes the entry Peek() returned.
  void Pop(const Entry& entry);
  // Removes `id` wherever it is; returns false if absent.
  bool Remove(RequestId id, Priority priority);
  size_t size() const;
  bool empty() const { return size() == 0; }

  // The class `entry` competes in at `now`.
  int EffectiveClass(const Entry& entry, double now) const;

 private:
  double aging_interval_;
  std::array<std::deque<Entry>, kNumPriorities> classes_;
};

}  // namespace pagoda::scheduler
