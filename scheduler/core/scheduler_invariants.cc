// Scheduler::CheckInvariants: the properties the randomized tests assert after every step.
#include "absl/strings/str_format.h"
#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {

absl::Status Scheduler::CheckInvariants() const {
  size_t running = 0;
  for (const auto& [wid, w] : workers_) {
    std::vector<bool> held(w->pool.num_pages(), false);
    int32_t total_held = 0;
    for (RequestId id : w->running) {
      auto it = seqs_.find(id);
      if (it == seqs_.end()) return absl::InternalError(absl::StrFormat("running %d unknown", id));
      const Sequence& s = *it->second;
      if (s.worker != wid) return absl::InternalError(absl::StrFormat("seq %d: worker", id));
      if (s.state != SeqState::kPrefilling && s.state != SeqState::kDecoding) {
        return absl::InternalError(
            absl::StrFormat("seq %d running in state %s", id, SeqStateName(s.state)));
      }
      for (PageId p : s.pages) {
        if (p < 0 || p >= w->pool.num_pages() || held[p] || w->pool.ref_count(p) != 1) {
          return absl::InternalError(absl::StrFormat("page %d of worker %d owned twice", p, wid));
        }
        held[p] = true;
      }
      const int32_t want = (s.num_scheduled + w->info.page_size - 1) / w->info.page_size;
      if (static_cast<int32_t>(s.pages.size()) != want) {
        return absl::InternalError(absl::StrFormat("seq %d holds %d pages for %d positions", id,
                                                   s.pages.size(), s.num_scheduled));
      }
      if (s.num_computed > s.num_scheduled || s.pending_samples < 0 || s.pending_samples > 2) {
        return absl::InternalError(absl::StrFormat("seq %d: bad progress counters", id));
      }
      total_held += static_cast<int32_t>(s.pages.size());
    }
    if (w->running.size() > static_cast<size_t>(options_.max_running)) {
      return absl::InternalError(absl::StrFormat("worker %d runs %d sequences, cap %d", wid,
                                                 w->running.size(), options_.max_running));
    }
    running += w->running.size();
    if (total_held + w->pool.num_free() != w->pool.num_pages()) {
      return absl::InternalError(absl::StrFormat("worker %d: %d held + %d free != %d pages", wid,
                                                 total_held, w->pool.num_free(),
                                                 w->pool.num_pages()));
    }
    if (seqs_.empty() && w->pool.num_free() != w->pool.num_pages()) {
      return absl::InternalError(absl::StrFormat("worker %d: pages leaked", wid));
    }
  }
  if (waiting_.size() + running != seqs_.size()) {
    return absl::InternalError(absl::StrFormat("%d waiting + %d running != %d sequences",
                                               waiting_.size(), running, seqs_.size()));
  }
  int64_t queued_tokens = 0;
  for (const auto& [id, s] : seqs_) {
    if (s->worker) continue;
    if (!s->pages.empty() || s->num_scheduled != 0) {
      return absl::InternalError(absl::StrFormat("waiting seq %d holds KV", id));
    }
    queued_tokens += static_cast<int64_t>(s->tokens.size());
  }
  if (queued_tokens != queued_prompt_tokens_) {
    return absl::InternalError(
        absl::StrFormat("queued tokens %d != tracked %d", queued_tokens, queued_prompt_tokens_));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
