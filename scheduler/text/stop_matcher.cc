#include "scheduler/text/stop_matcher.h"

#include <algorithm>

namespace pagoda::scheduler::text {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

StopMatcher::Result StopMatcher::Push(std::string_view text) {
  Result r;
  held_.append(text);
  if (stops_.empty()) {
    r.text.swap(held_);
    return r;
  }
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < first) {
      first = at;
      r.stop = stop;
    }
  }
  if (first != std::string::npos) {
    r.matched = true;
    r.text = held_.substr(0, first);
    held_.clear();
    return r;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t most = std::min(stop.size() - 1, held_.size());
    for (size_t n = most; n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace pagoda::scheduler::text
