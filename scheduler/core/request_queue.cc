#include "scheduler/core/request_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace pagoda::scheduler {

RequestQueue::RequestQueue(double aging_interval, bool fair_share,
                           absl::flat_hash_map<std::string, double> weights)
    : aging_interval_(aging_interval), fair_share_(fair_share), weights_(std::move(weights)) {}

TenantId RequestQueue::Acquire(std::string_view name) {
  auto it = by_name_.find(absl::string_view(name.data(), name.size()));
  if (it == by_name_.end()) {
    if (by_name_.size() >= 2 * kMaxIdleTenants) Prune();
    TenantId id;
    if (free_ids_.empty()) {
      id = static_cast<TenantId>(tenants_.size());
      tenants_.emplace_back();
    } else {
      id = free_ids_.back();
      free_ids_.pop_back();
    }
    Tenant& t = tenants_[id];
    t = Tenant{};
    t.name = std::string(name);
    if (auto w = weights_.find(t.name); w != weights_.end()) t.weight = w->second;
    it = by_name_.emplace(t.name, id).first;
  }
  ++tenants_[it->second].live;
  return it->second;
}

void RequestQueue::Release(TenantId tenant) { --tenants_[tenant].live; }

void RequestQueue::Prune() {
  for (TenantId id = 0; id < static_cast<TenantId>(tenants_.size()); ++id) {
    Tenant& t = tenants_[id];
    if (t.name.empty() || t.live > 0 || t.queued > 0 || t.running > 0 ||
        weights_.contains(t.name)) {
      continue;
    }
    by_name_.erase(t.name);
    t = Tenant{};
    free_ids_.push_back(id);
    if (last_to_leave_ == id) last_to_leave_ = -1;
  }
}

void RequestQueue::Charge(TenantId tenant, double service, int64_t tokens) {
  Tenant& t = tenants_[tenant];
  t.counter += service / t.weight;
  t.served_tokens += tokens;
}

std::optional<double> RequestQueue::MinBackloggedCounter() const {
  std::optional<double> low;
  for (const Tenant& t : tenants_) {
    if (t.queued > 0 && (!low || t.counter < *low)) low = t.counter;
  }
  return low;
}

void RequestQueue::Lift(TenantId tenant) {
  Tenant& t = tenants_[tenant];
  if (std::optional<double> low = MinBackloggedCounter()) {
    t.counter = std::max(t.counter, *low);
  } else if (last_to_leave_ >= 0) {
    t.counter = std::max(t.counter, tenants_[last_to_leave_].counter);
  }
}

void RequestQueue::PushBack(const Entry& entry) {
  const int c = static_cast<int>(entry.priority);
  if (tenants_[entry.tenant].queued == 0) Lift(entry.tenant);
  classes_[c][entry.tenant].push_back({entry, back_order_[c]++});
  ++tenants_[entry.tenant].queued;
  ++size_;
}

void RequestQueue::PushFront(const Entry& entry) {
  const int c = static_cast<int>(entry.priority);
  classes_[c][entry.tenant].push_front({entry, --front_order_[c]});
  ++tenants_[entry.tenant].queued;
  ++size_;
}

int RequestQueue::EffectiveClass(const Entry& entry, double now) const {
  const int base = static_cast<int>(entry.priority);
  if (aging_interval_ <= 0) return base;
  const double steps = std::floor(std::max(0.0, now - entry.arrival) / aging_interval_);
  return static_cast<int>(std::min<double>(kNumPriorities - 1, base + steps));
}

const RequestQueue::Keyed* RequestQueue::Candidate(int c, double* oldest) const {
  const Keyed* best = nullptr;
  *oldest = std::numeric_limits<double>::infinity();
  for (const auto& [tenant, q] : classes_[c]) {
    const Keyed& head = q.front();  // a tenant's oldest entry of the class
    *oldest = std::min(*oldest, head.entry.arrival);
    if (best == nullptr) {
      best = &head;
      continue;
    }
    if (fair_share_) {
      const Tenant& a = tenants_[tenant];
      const Tenant& b = tenants_[best->entry.tenant];
      if (a.counter != b.counter) {
        if (a.counter < b.counter) best = &head;
        continue;
      }
      const double x = a.running / a.weight, y = b.running / b.weight;
      if (x != y) {
        if (x < y) best = &head;
        continue;
      }
    }
    if (head.order < best->order) best = &head;
  }
  return best;
}

int RequestQueue::Standing(Priority priority, double now) const {
  double oldest;
  const Keyed* candidate = Candidate(static_cast<int>(priority), &oldest);
  if (candidate == nullptr) return -1;
  // Arrival order: the class competes with its head; fair share: with its oldest request, so
  // that aging lifts the class while the counters pick within it.
  const double arrival = fair_share_ ? oldest : candidate->entry.arrival;
  return EffectiveClass({0, priority, arrival, 0}, now);
}

std::optional<RequestQueue::Entry> RequestQueue::Peek(double now) const {
  const Keyed* best = nullptr;
  int best_standing = -1;
  double best_arrival = 0;
  for (int c = kNumPriorities - 1; c >= 0; --c) {
    double oldest;
    const Keyed* candidate = Candidate(c, &oldest);
    if (candidate == nullptr) continue;
    const double arrival = fair_share_ ? oldest : candidate->entry.arrival;
    const int standing = EffectiveClass({0, static_cast<Priority>(c), arrival, 0}, now);
    if (best == nullptr || standing > best_standing ||
        (standing == best_standing && arrival < best_arrival)) {
      best = candidate;
      best_standing = standing;
      best_arrival = arrival;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->entry;
}

bool RequestQueue::Remove(const Entry& entry) {
  ClassQueue& cq = classes_[static_cast<int>(entry.priority)];
  auto qit = cq.find(entry.tenant);
  if (qit == cq.end()) return false;
  std::deque<Keyed>& q = qit->second;
  auto it =
      std::find_if(q.begin(), q.end(), [&entry](const Keyed& k) { return k.entry.id == entry.id; });
  if (it == q.end()) return false;
  q.erase(it);
  if (q.empty()) cq.erase(qit);
  --size_;
  if (--tenants_[entry.tenant].queued == 0) last_to_leave_ = entry.tenant;
  return true;
}

std::vector<const RequestQueue::Tenant*> RequestQueue::tenants() const {
  std::vector<const Tenant*> out;
  for (const Tenant& t : tenants_) {
    if (!t.name.empty()) out.push_back(&t);
  }
  return out;
}

std::optional<std::string> RequestQueue::CheckInvariants() const {
  size_t total = 0;
  std::vector<int32_t> queued(tenants_.size(), 0);
  for (int c = 0; c < kNumPriorities; ++c) {
    for (const auto& [tenant, q] : classes_[c]) {
      if (q.empty())
        return absl::StrFormat("class %d keeps an empty queue of tenant %d", c, tenant);
      for (const Keyed& k : q) {
        if (k.entry.tenant != tenant || static_cast<int>(k.entry.priority) != c) {
          return absl::StrFormat("request %d is queued under the wrong class or tenant",
                                 k.entry.id);
        }
      }
      total += q.size();
      queued[tenant] += static_cast<int32_t>(q.size());
    }
  }
  if (total != size_) return absl::StrFormat("size %d, %d entries queued", size_, total);
  for (size_t t = 0; t < tenants_.size(); ++t) {
    if (queued[t] != tenants_[t].queued) {
      return absl::StrFormat("tenant %d counts %d queued, %d are", t, tenants_[t].queued,
                             queued[t]);
    }
    if (tenants_[t].live < 0 || tenants_[t].running < 0) {
      return absl::StrFormat("tenant %d has a negative live or running count", t);
    }
  }
  return std::nullopt;
}

}  // namespace pagoda::scheduler
