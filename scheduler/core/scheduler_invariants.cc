// Scheduler::CheckInvariants: the properties the randomized tests assert after every step.
#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {

absl::Status Scheduler::CheckInvariants() const {
  size_t running = 0;
  for (const auto& [wid, w] : workers_) {
    for (RequestId id : w->running) {
      auto it = seqs_.find(id);
      if (it == seqs_.end()) return absl::InternalError(absl::StrFormat("running %d unknown", id));
      const Sequence& s = *it->second;
      if (s.worker != wid) return absl::InternalError(absl::StrFormat("seq %d: worker", id));
      if (s.state != SeqState::kPrefilling && s.state != SeqState::kDecoding) {
        return absl::InternalError(
            absl::StrFormat("seq %d running in state %s", id, SeqStateName(s.state)));
      }
      if (!kv_.has_table(id)) return absl::InternalError(absl::StrFormat("seq %d: no table", id));
      const size_t pages = kv_.pages(id).size();
      const int32_t want = (s.num_scheduled + w->info.page_size - 1) / w->info.page_size;
      if (static_cast<int32_t>(pages) != want) {
        return absl::InternalError(
            absl::StrFormat("seq %d holds %d pages for %d positions", id, pages, s.num_scheduled));
      }
      if (s.pages_sent > static_cast<int32_t>(pages)) {
        return absl::InternalError(absl::StrFormat("seq %d: more pages sent than held", id));
      }
      if (s.num_computed > s.num_scheduled || s.pending_samples < 0 || s.pending_samples > 2) {
        return absl::InternalError(absl::StrFormat("seq %d: bad progress counters", id));
      }
    }
    if (w->running.size() > static_cast<size_t>(options_.max_running)) {
      return absl::InternalError(absl::StrFormat("worker %d runs %d sequences, cap %d", wid,
                                                 w->running.size(), options_.max_running));
    }
    running += w->running.size();
    const KvUsage usage = kv_.usage(wid);
    if (seqs_.empty() && usage.held != 0) {
      return absl::InternalError(absl::StrFormat("worker %d: %d pages leaked", wid, usage.held));
    }
  }
  size_t forking = 0;
  for (const auto& [id, s] : seqs_) {
    if (s->fork_parent == 0) continue;
    ++forking;
    auto parent = seqs_.find(s->fork_parent);
    if (parent == seqs_.end() || std::count(parent->second->fork_children.begin(),
                                            parent->second->fork_children.end(), id) != 1) {
      return absl::InternalError(absl::StrFormat("seq %d waits for a parent that forgot it", id));
    }
  }
  if (waiting_.size() + running + forking != seqs_.size()) {
    return absl::InternalError(
        absl::StrFormat("%d waiting + %d running + %d forking != %d sequences", waiting_.size(),
                        running, forking, seqs_.size()));
  }
  if (std::optional<std::string> queue = waiting_.CheckInvariants()) {
    return absl::InternalError("request queue: " + *queue);
  }
  absl::flat_hash_map<TenantId, int32_t> running_of;
  for (const auto& [wid, w] : workers_) {
    for (RequestId id : w->running) ++running_of[seqs_.at(id)->tenant];
  }
  for (const auto& [id, s] : seqs_) {
    const int32_t counted = waiting_.tenant(s->tenant).running;
    if (counted != running_of[s->tenant]) {
      return absl::InternalError(absl::StrFormat("tenant %s counts %d running, %d are",
                                                 waiting_.tenant(s->tenant).name, counted,
                                                 running_of[s->tenant]));
    }
  }
  int64_t queued_tokens = 0;
  for (const auto& [id, s] : seqs_) {
    // Swap: a swapped-out sequence waits, holds slots on a live worker and no page.
    if (s->swapped_on.has_value() != kv_.swapped(id)) {
      return absl::InternalError(absl::StrFormat("seq %d: swap state and swap slots disagree", id));
    }
    if (s->swapped_on &&
        (s->worker || !workers_.contains(*s->swapped_on) ||
         kv_.swapped_pages(id) * kv_.page_size(*s->swapped_on) < s->swapped_positions)) {
      return absl::InternalError(absl::StrFormat("seq %d: bad swapped-out state", id));
    }
    if (s->worker || s->fork_parent != 0) continue;
    if (kv_.has_table(id) || s->num_scheduled != 0) {
      return absl::InternalError(absl::StrFormat("waiting seq %d holds KV", id));
    }
    queued_tokens += static_cast<int64_t>(s->tokens.size());
  }
  if (queued_tokens != queued_prompt_tokens_) {
    return absl::InternalError(
        absl::StrFormat("queued tokens %d != tracked %d", queued_tokens, queued_prompt_tokens_));
  }
  // The KV invariants: ref counts equal holders, held pages never free or parked, named pages
  // match their tokens and their holders', free + parked + held == pages.
  return kv_.CheckInvariants([this](RequestId id) -> const std::vector<int32_t>* {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? nullptr : &it->second->tokens;
  });
}

}  // namespace pagoda::scheduler
