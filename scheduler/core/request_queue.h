// RequestQueue: waiting requests by priority class, with aging so that no class starves, and
// within a class either arrival order or fair share between tenants.
//
// Each base class offers one candidate:
//  * fair_share false (Fairness::kNone): its head in queue order. PushBack appends; PushFront
//    puts a (preempted) request back at the head of its class, ahead of newer arrivals.
//  * fair_share true (Fairness::kVtc, the Virtual Token Counter of Sheng et al., "Fairness in
//    Serving Large Language Models", OSDI 2024): every tenant has a virtual counter, the
//    service it received divided by its weight (Charge). The candidate is the queue-order head
//    of the tenant with the lowest counter among those with requests queued in the class; ties
//    go to the tenant running fewer sequences per unit of weight (one just lifted to another's
//    counter goes before the tenant that holds the machine), then to queue order. A tenant that was
//    not backlogged (no request queued in any class) when a request of its arrives (PushBack) is
//    lifted to the lowest counter among the backlogged tenants (or, when none is, to the counter of
//    the tenant that left the backlog last), so idle time is never banked as credit. Two backlogged
//    tenants' counters then stay within about one request's service of each other: each is served
//    in proportion to its weight.
//
// Classes and aging, above the counters: a class competes at its standing, its base class
// raised by one for every `aging_interval` seconds its oldest request has waited (with
// fair_share false: its head), capped at critical; the highest standing wins, ties go to the
// class whose request arrived first. So no class starves (a low request that waited 3
// intervals competes as critical), a tenant's low request never overtakes another tenant's
// normal one, and aging never lets a flooding tenant's old requests jump over another tenant's
// new ones of the same class.
//
// Tenants are named by strings and referred to by TenantId while they have live requests
// (Acquire/Release count them). The table keeps at most kMaxIdleTenants tenants with no live
// request: past that, idle ones are forgotten (a returning tenant is lifted anyway, so only a
// counter above the backlog's is lost).
//
// Contract: each id appears at most once, with the tenant and class it was pushed with.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

using TenantId = int32_t;

class RequestQueue {
 public:
  struct Entry {
    RequestId id = 0;
    Priority priority = Priority::kNormal;
    double arrival = 0;  // seconds, the core's clock
    TenantId tenant = 0;
  };

  struct Tenant {
    std::string name;
    double weight = 1;
    double counter = 0;         // virtual counter: weighted service
    int64_t served_tokens = 0;  // unweighted service (what Charge was given)
    int32_t queued = 0;         // entries in the queue
    int32_t running = 0;        // sequences running (AddRunning)
    int32_t live = 0;           // Acquire - Release: requests the scheduler holds
  };

  static constexpr size_t kMaxIdleTenants = 4096;

  // `aging_interval` <= 0 turns aging off. `weights`: tenant name -> weight (> 0); others 1.
  RequestQueue(double aging_interval, bool fair_share,
               absl::flat_hash_map<std::string, double> weights = {});

  // The tenant named `name`, created on first sight; counts one more live request of it.
  TenantId Acquire(std::string_view name);
  // The tenant named `name`, if the table holds it.
  std::optional<TenantId> Find(std::string_view name) const {
    auto it = by_name_.find(absl::string_view(name.data(), name.size()));
    if (it == by_name_.end()) return std::nullopt;
    return it->second;
  }
  // One live request of `tenant` fewer (it finished).
  void Release(TenantId tenant);
  // `tenant` has `delta` more sequences running (the tie-break between equal counters).
  void AddRunning(TenantId tenant, int32_t delta) { tenants_[tenant].running += delta; }
  // `tenant` received `service` (unweighted) and `tokens` tokens of it: its counter rises by
  // service / weight.
  void Charge(TenantId tenant, double service, int64_t tokens);

  void PushBack(const Entry& entry);
  void PushFront(const Entry& entry);
  // The next request to admit at time `now`, or nullopt when empty.
  std::optional<Entry> Peek(double now) const;
  // Removes the entry Peek() returned.
  void Pop(const Entry& entry) { Remove(entry); }
  // Removes `entry.id` (queued with entry's class and tenant); returns false if absent.
  bool Remove(const Entry& entry);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The class `entry` competes in at `now` (its own aging).
  int EffectiveClass(const Entry& entry, double now) const;
  // The class that the requests of base class `priority` compete in at `now` (see above); -1
  // when none is queued.
  int Standing(Priority priority, double now) const;
  bool fair_share() const { return fair_share_; }
  const Tenant& tenant(TenantId id) const { return tenants_[id]; }
  // Tenants with live requests or kept counters, for statistics.
  std::vector<const Tenant*> tenants() const;
  // Calls f(entry) for every queued entry (prediction of the work ahead).
  template <typename F>
  void ForEachQueued(F&& f) const {
    for (int c = kNumPriorities - 1; c >= 0; --c) {
      for (const auto& [tenant, q] : classes_[c]) {
        for (const Keyed& k : q) f(k.entry);
      }
    }
  }
  // The lowest counter among backlogged tenants, if any.
  std::optional<double> MinBackloggedCounter() const;

  // Checks the bookkeeping (sizes, queued counts, ids); a description of the first violation.
  std::optional<std::string> CheckInvariants() const;

 private:
  struct Keyed {
    Entry entry;
    int64_t order;  // queue order within the class: PushFront gives ever lower numbers
  };
  using ClassQueue = absl::flat_hash_map<TenantId, std::deque<Keyed>>;

  // The entry class `c` offers (queue order, or the least-served tenant's head) and the
  // arrival of the class's oldest entry; nullptr when the class is empty.
  const Keyed* Candidate(int c, double* oldest) const;
  void Lift(TenantId tenant);
  void Prune();

  double aging_interval_;
  bool fair_share_;
  absl::flat_hash_map<std::string, double> weights_;
  std::array<ClassQueue, kNumPriorities> classes_;
  std::array<int64_t, kNumPriorities> front_order_{};
  std::array<int64_t, kNumPriorities> back_order_{};
  size_t size_ = 0;
  std::vector<Tenant> tenants_;  // by TenantId; a forgotten tenant's slot has an empty name
  std::vector<TenantId> free_ids_;
  absl::flat_hash_map<std::string, TenantId> by_name_;
  TenantId last_to_leave_ = -1;  // the tenant whose backlog emptied last
};

}  // namespace pagoda::scheduler
