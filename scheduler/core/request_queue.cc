#include "scheduler/core/request_queue.h"

#include <algorithm>

namespace pagoda::scheduler {

void RequestQueue::PushBack(RequestId id, Priority priority) {
  classes_[static_cast<int>(priority)].push_back(id);
}

void RequestQueue::PushFront(RequestId id, Priority priority) {
  classes_[static_cast<int>(priority)].push_front(id);
}

std::optional<RequestId> RequestQueue::Peek() const {
  for (int c = kNumPriorities - 1; c >= 0; --c) {
    if (!classes_[c].empty()) return classes_[c].front();
  }
  return std::nullopt;
}

void RequestQueue::Pop() {
  for (int c = kNumPriorities - 1; c >= 0; --c) {
    if (!classes_[c].empty()) {
      classes_[c].pop_front();
      return;
    }
  }
}

bool RequestQueue::Remove(RequestId id, Priority priority) {
  auto& q = classes_[static_cast<int>(priority)];
  auto it = std::find(q.begin(), q.end(), id);
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
