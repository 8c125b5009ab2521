#include "scheduler/core/request_queue.h"

#include <algorithm>
#include <cmath>

namespace pagoda::scheduler {

void RequestQueue::PushBack(const Entry& entry) {
  classes_[static_cast<int>(entry.priority)].push_back(entry);
}

void RequestQueue::PushFront(const Entry& entry) {
  classes_[static_cast<int>(entry.priority)].push_front(entry);
}

int RequestQueue::EffectiveClass(const Entry& entry, double now) const {
  const int base = static_cast<int>(entry.priority);
  if (aging_interval_ <= 0) return base;
  const double steps = std::floor(std::max(0.0, now - entry.arrival) / aging_interval_);
  return static_cast<int>(std::min<double>(kNumPriorities - 1, base + steps));
}

std::optional<RequestQueue::Entry> RequestQueue::Peek(double now) const {
  std::optional<Entry> best;
  int best_class = -1;
  for (int c = kNumPriorities - 1; c >= 0; --c) {
    if (classes_[c].empty()) continue;
    const Entry& head = classes_[c].front();
    const int effective = EffectiveClass(head, now);
    if (effective > best_class || (effective == best_class && head.arrival < best->arrival)) {
      best = head;
      best_class = effective;
    }
  }
  return best;
}

void RequestQueue::Pop(const Entry& entry) {
  auto& q = classes_[static_cast<int>(entry.priority)];
  if (!q.empty() && q.front().id == entry.id) {
    q.pop_front();
    return;
  }
  // A preemption between Peek and Pop may have put its victim in front of the entry (same
  // class): the entry must still leave the queue, or it would be both queued and running.
  Remove(entry.id, entry.priority);
}

bool RequestQueue::Remove(RequestId id, Priority priority) {
  auto& q = classes_[static_cast<int>(priority)];
  auto it = std::find_if(q.begin(), q.end(), [id](const Entry& e) { return e.id == id; });
  if (it == q.end()) return false;
  q.erase(it);
  return true;
}

size_t RequestQueue::size() const {
  size_t n = 0;
  for (const auto& q : classes_) n += q.size();
  return n;
}

}  // namespace pagoda::scheduler
