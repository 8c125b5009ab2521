// Scheduler: choosing victims and preempting them, by recompute or by swap.
#include <algorithm>

#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

Sequence* Scheduler::PickVictim(WorkerState& w, int below_class, double now) {
  // The victim is the lowest class, then (fair share) the most-served tenant, then the latest
  // arrival, among the worker's running sequences (the needy one included: if it ranks lowest,
  // it yields). A sequence preempted max_preemptions_in_row times without progress is spared.
  // With below_class >= 0 (an admission), only sequences whose effective class is below it
  // qualify.
  Sequence* best = nullptr;
  for (RequestId id : w.running) {
    Sequence& s = *seqs_.at(id);
    if (s.preempted_in_row >= options_.max_preemptions_in_row) continue;
    if (below_class >= 0 && waiting_.EffectiveClass(s.queue_entry(), now) >= below_class) {
      continue;
    }
    if (best == nullptr || VictimBefore(s, *best)) best = &s;
  }
  return best;
}

bool Scheduler::VictimBefore(const Sequence& a, const Sequence& b) const {
  if (a.priority() != b.priority()) return a.priority() < b.priority();
  if (waiting_.fair_share() && a.tenant != b.tenant) {
    const double x = waiting_.tenant(a.tenant).counter, y = waiting_.tenant(b.tenant).counter;
    if (x != y) return x > y;
  }
  return a.arrival > b.arrival;
}

Sequence* Scheduler::PickFairShareVictim(WorkerState& w, const Sequence& head, int head_class,
                                         double now) {
  // Fair share of the worker's running slots: a sequence of another tenant is preempted for the
  // head when, even after the move, the head's tenant would hold a smaller share of the
  // worker's running sequences per unit of weight than the victim's:
  //   (running[head] + 1) / weight[head] < (running[victim] - 1) / weight[victim].
  // So a starved tenant gets a slot at once, while tenants near their shares never trade
  // sequences back and forth: between those, admissions by counter (VTC) settle the shares.
  // Victims come from classes not above the head's, most-served tenant first, then the latest
  // arrival.
  if (!waiting_.fair_share()) return nullptr;
  absl::flat_hash_map<TenantId, int32_t> running;
  for (RequestId id : w.running) ++running[seqs_.at(id)->tenant];
  const double head_share = (running[head.tenant] + 1) / waiting_.tenant(head.tenant).weight;
  Sequence* best = nullptr;
  for (RequestId id : w.running) {
    Sequence& s = *seqs_.at(id);
    if (s.tenant == head.tenant || s.preempted_in_row >= options_.max_preemptions_in_row) {
      continue;
    }
    if (waiting_.EffectiveClass(s.queue_entry(), now) > head_class) continue;
    if (!(head_share < (running[s.tenant] - 1) / waiting_.tenant(s.tenant).weight)) continue;
    if (best == nullptr || VictimBefore(s, *best)) best = &s;
  }
  if (best != nullptr) ++fair_share_preemptions_;
  return best;
}

void Scheduler::Preempt(Sequence& s) {
  // A victim may already have a step in the plan being built: take it out and refund its
  // tokens. If that step introduced the sequence, the worker never hears of it.
  if (building_.plan != nullptr) {
    std::vector<PlanStep>& steps = building_.plan->steps;
    for (auto it = steps.begin(); it != steps.end();) {
      if (it->seq_id != s.request.id) {
        ++it;
        continue;
      }
      const int32_t chunk = it->feed_last_sampled ? 1 : static_cast<int32_t>(it->tokens.size());
      building_.plan->num_tokens -= chunk;
      building_.budget->tokens += chunk;
      if (it->first_sight) s.worker_knows = false;
      it = steps.erase(it);
    }
  }
  if (TrySwapOut(s)) ++swap_preemptions_;
  ReleaseFromWorker(s);
  s.num_computed = s.num_scheduled = 0;
  s.pending_samples = 0;
  ++s.epoch;
  ++s.preemptions;
  ++s.preempted_in_row;
  ++total_preemptions_;
  max_preempted_in_row_ = std::max(max_preempted_in_row_, s.preempted_in_row);
  s.state = SeqState::kPreempted;
  waiting_.PushFront(s.queue_entry());
  queued_prompt_tokens_ += static_cast<int64_t>(s.tokens.size());
}

bool Scheduler::TrySwapOut(Sequence& s) {
  if (options_.preemption_mode == PreemptionMode::kRecompute || !s.worker) return false;
  WorkerState& w = *FindWorker(*s.worker);
  if (kv_.swap_slots(w.id) == 0) return false;
  // Only positions whose KV the worker has confirmed, and never the last known token: the
  // resumed sequence must feed at least one token to get logits.
  const int32_t positions = std::min(s.num_computed, static_cast<int32_t>(s.tokens.size()) - 1);
  if (positions <= 0) return false;
  // KV the worker has not written yet when this plan's swap-outs run: a fork's pending copy of
  // its partial page, or a swap-in travelling in the plan being built.
  if (s.pending_copy || s.kv_arrives_in == w.iteration + 1) return false;
  if (options_.preemption_mode == PreemptionMode::kAuto && !SwapIsCheaper(w, positions)) {
    return false;
  }
  std::optional<std::vector<SwapCopy>> copies = kv_.SwapOut(s.request.id, positions);
  if (!copies) return false;  // not enough free slots: recompute
  swapped_out_pages_ += static_cast<int64_t>(copies->size());
  w.pending_swap_out.insert(w.pending_swap_out.end(), copies->begin(), copies->end());
  s.swapped_on = w.id;
  s.swapped_positions = positions;
  return true;
}

bool Scheduler::SwapIsCheaper(const WorkerState& w, int32_t positions) const {
  // Recompute: the positions as prefill tokens, each taking its share of a full step's fixed
  // time plus its own per-token time, and the attention over them (quadratic); before the
  // model is fitted, each its share of the mean step. Swap: every page out and back in.
  // Unknown costs favour swap: a copy of a page is cheaper than a forward pass over its tokens
  // on any hardware we run on.
  const double per_page = w.model.swap_seconds_per_page();
  if (!w.model.has_steps() || per_page <= 0) return true;
  const int32_t budget = BatchBudget(w);
  double recompute = positions * w.model.mean_seconds() / budget;
  if (w.model.fitted()) {
    const std::array<double, 3> c = w.model.coefficients();
    recompute = positions * (c[0] / budget + c[1]) + c[2] * StepModel::Work(0, positions);
  }
  const double swap = CeilDiv(positions, w.info.page_size) * per_page;
  return swap < recompute;
}

void Scheduler::SwapIn(WorkerState& w, Sequence& s) {
  std::optional<std::vector<SwapCopy>> copies = kv_.SwapIn(s.request.id);
  // HasRoomToAdmit checked the pages; a refusal here would be a bookkeeping bug.
  if (!copies) {
    std::fprintf(stderr, "Scheduler: swap-in of seq %lu failed after its room was checked\n",
                 static_cast<unsigned long>(s.request.id));
    std::abort();
  }
  swapped_in_pages_ += static_cast<int64_t>(copies->size());
  w.pending_swap_in.insert(w.pending_swap_in.end(), copies->begin(), copies->end());
  s.num_computed = s.num_scheduled = s.swapped_positions;
  s.swapped_on.reset();
  s.swapped_positions = 0;
  s.kv_arrives_in = w.iteration + 1;
}

}  // namespace pagoda::scheduler
