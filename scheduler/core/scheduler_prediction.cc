// Scheduler: predicting a new request's time to first token, and admission by that prediction.
//
// The prediction replays the queue in steps of the measured step time (StepModel):
//  * the prefill work ahead of the request (prompt tokens still to compute of running
//    sequences, of the queued requests that go before it, and its own) is done at the rate the
//    token budgets leave after the running decodes;
//  * when every running slot is taken, or the free KV holds fewer requests of the new one's size
//    (prompt + expected output) than there are free slots, the request also waits for slots:
//    running sequences free theirs after their remaining output (max_tokens, or the mean output
//    length seen so far), and each queued request ahead takes the next free slot for its
//    prefill and output;
//  * the first token comes with the step that ends the later of the two, plus the plans
//    already in flight (overlap).
// Who goes before it: every queued request of a class standing at least as high as its own
// (RequestQueue::Standing: a tie goes to the class queued first) and, in its own class, all of
// them (arrival order) or, with fair share, its own tenant's and as much of each other
// tenant's as that tenant is served (weighted) before the new request's tenant catches up with
// its counter.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {
namespace {

// Replaying the slots of more queued requests than this would cost more than it tells:
// beyond it the wait is extrapolated linearly.
constexpr size_t kMaxReplayed = 2048;

}  // namespace

void Scheduler::ObserveOutputLength(int32_t tokens) {
  // A decayed mean (weight 1/64 for the newest), seeded by the first finished request.
  mean_output_tokens_ = finished_observed_ == 0
                            ? tokens
                            : mean_output_tokens_ + (tokens - mean_output_tokens_) / 64.0;
  ++finished_observed_;
}

double Scheduler::ExpectedOutputTokens(const NewRequest& r) const {
  const double mean = finished_observed_ > 0 ? mean_output_tokens_ : 256.0;
  return r.max_tokens > 0 ? std::min<double>(r.max_tokens, std::max(1.0, mean))
                          : std::max(1.0, mean);
}

std::vector<const Sequence*> Scheduler::QueuedAhead(const NewRequest& r, double now) const {
  const int own_class = std::max(static_cast<int>(r.priority), waiting_.Standing(r.priority, now));
  const std::optional<TenantId> own = waiting_.Find(r.tenant);
  // Fair share: the new request's tenant catches up when its counter, after the lift and its
  // queued work, is reached by the others'.
  absl::flat_hash_map<TenantId, double> allowance;  // service each tenant gets first
  if (waiting_.fair_share()) {
    double counter = 0, weight = 1, queued_cost = 0;
    if (own) {
      counter = waiting_.tenant(*own).counter;
      weight = waiting_.tenant(*own).weight;
    } else if (auto it = options_.tenant_weights.find(r.tenant);
               it != options_.tenant_weights.end()) {
      weight = it->second;
    }
    if (!own || waiting_.tenant(*own).queued == 0) {
      counter = std::max(counter, waiting_.MinBackloggedCounter().value_or(counter));
    }
    waiting_.ForEachQueued([&](const RequestQueue::Entry& e) {
      if (own && e.tenant == *own) queued_cost += ServiceCost(seqs_.at(e.id)->request);
    });
    const double target = counter + (queued_cost + ServiceCost(r)) / weight;
    for (const RequestQueue::Tenant* t : waiting_.tenants()) {
      if (t->queued == 0) continue;
      const TenantId id = *waiting_.Find(t->name);
      allowance[id] = std::max(0.0, target - t->counter) * t->weight;
    }
  }
  std::array<int, kNumPriorities> standing;
  for (int c = 0; c < kNumPriorities; ++c) standing[c] = waiting_.Standing(Priority{c}, now);
  std::vector<const Sequence*> ahead;
  waiting_.ForEachQueued([&](const RequestQueue::Entry& e) {
    // A class standing lower goes after the new request; a tie goes to the class queued first.
    if (standing[static_cast<int>(e.priority)] < own_class) return;
    const Sequence* s = seqs_.at(e.id).get();
    if (e.priority == r.priority && waiting_.fair_share() && !(own && e.tenant == *own)) {
      double& left = allowance[e.tenant];
      if (left <= 0) return;
      left -= ServiceCost(s->request);
    }
    ahead.push_back(s);
  });
  return ahead;
}

double Scheduler::ServiceCost(const NewRequest& r) const {
  return kPromptTokenCost * static_cast<double>(r.prompt.size()) +
         kOutputTokenCost * ExpectedOutputTokens(r);
}

double Scheduler::PredictFirstToken(const NewRequest& r, double now) {
  struct Load {
    const WorkerState* w;
    int32_t budget, decodes;
    double decode_work;  // attention work of its decodes
  };
  std::vector<Load> loads;
  double backlog = static_cast<double>(r.prompt.size());  // prefill tokens before its first token
  // The steps (from now) at which each running slot frees, earliest first.
  std::priority_queue<double, std::vector<double>, std::greater<double>> frees;
  // Steps before a plan holding the request starts: none on an idle worker; otherwise the
  // plans queued ahead of it, less half of the one executing (arrivals fall anywhere in a step).
  double pipeline = std::numeric_limits<double>::infinity();
  for (const auto& [id, w] : workers_) {
    if (!w->model.has_steps()) continue;
    Load& load = loads.emplace_back(Load{w.get(), BatchBudget(*w), 0, 0});
    for (RequestId rid : w->running) {
      const Sequence& s = *seqs_.at(rid);
      const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.num_computed;
      if (left <= 1) {
        ++load.decodes;
        load.decode_work += StepModel::Work(static_cast<int64_t>(s.tokens.size()), 1);
      } else {
        backlog += left;
      }
      const double outputs = ExpectedOutputTokens(s.request) - s.generated();
      frees.push(std::ceil(std::max(0, left - 1) / static_cast<double>(load.budget)) +
                 std::max(1.0, outputs));
    }
    // Free slots now: running slots, as far as free KV holds requests of this one's size.
    const double footprint =
        std::max(1.0, static_cast<double>(r.prompt.size()) + ExpectedOutputTokens(r));
    const double kv_free =
        std::floor(static_cast<double>(kv_.AvailablePages(w->id)) * w->info.page_size / footprint);
    const double slots_free = std::min(kv_free, static_cast<double>(options_.max_running) -
                                                    static_cast<double>(w->running.size()));
    for (int k = 0; k < static_cast<int>(slots_free); ++k) frees.push(0);
    const double in_flight = static_cast<double>(w->flight.size());
    pipeline = std::min(pipeline, in_flight == 0 ? 0.0 : in_flight - 0.5);
  }
  if (loads.empty()) return -1;      // no step measured yet
  if (frees.empty()) frees.push(0);  // nothing runs and its size fills the KV: it goes first
  const std::vector<const Sequence*> ahead = QueuedAhead(r, now);
  for (const Sequence* s : ahead) {
    backlog += static_cast<double>(s->tokens.size() - (s->swapped_on ? s->swapped_positions : 0));
  }
  // Step times, averaged over the workers: a decode step, and a step that also takes its
  // share of the backlog as prefill.
  double prefill_rate = 0, decode_step = 0, full_step = 0, chunk = 0;
  for (const Load& load : loads) {
    chunk += PrefillChunk(*load.w);
    const int32_t prefill = std::max(1, load.budget - load.decodes);
    const double share = std::min<double>(prefill, backlog / static_cast<double>(loads.size()));
    prefill_rate += prefill;
    decode_step += load.w->model.StepSeconds(load.decodes, load.decode_work);
    full_step += load.w->model.StepSeconds(
        load.decodes + share,
        load.decode_work + StepModel::Work(static_cast<int64_t>(r.prompt.size() / 2),
                                           static_cast<int64_t>(share)));
  }
  decode_step /= static_cast<double>(loads.size());
  full_step /= static_cast<double>(loads.size());
  chunk /= static_cast<double>(loads.size());
  const double prefill_steps = std::ceil(backlog / prefill_rate);
  // Slots: each request ahead takes the earliest free slot for its prefill and output, at the
  // workers' mean chunk.
  const double chunk_rate = std::max(1.0, std::min(chunk, prefill_rate));
  size_t replayed = 0;
  for (const Sequence* s : ahead) {
    if (replayed == kMaxReplayed) break;
    const double start = frees.top();
    frees.pop();
    frees.push(start + std::ceil(static_cast<double>(s->tokens.size()) / chunk_rate) +
               ExpectedOutputTokens(s->request));
    ++replayed;
  }
  double slot_free = frees.top();  // when the request gets its slot
  if (replayed < ahead.size()) {   // the rest at the pace of those replayed
    slot_free *= static_cast<double>(ahead.size()) / static_cast<double>(replayed);
  }
  const double own_prefill = std::ceil(static_cast<double>(r.prompt.size()) / chunk_rate);
  return std::max(prefill_steps * full_step, slot_free * decode_step + own_prefill * full_step) +
         pipeline * decode_step;
}

absl::Status Scheduler::AdmitByPrediction(Sequence& s, double now) {
  const double predicted = PredictFirstToken(s.request, now);
  s.timings.predicted_first_token = predicted;
  if (options_.max_predicted_wait <= 0 || predicted < 0) return absl::OkStatus();
  const double deadline_in = s.request.deadline - now;
  const double limit = std::min(options_.max_predicted_wait, deadline_in);
  if (predicted <= limit) return absl::OkStatus();
  const double retry = std::max(1.0, std::ceil(predicted - limit));
  absl::Status refused = absl::ResourceExhaustedError(
      limit < options_.max_predicted_wait
          ? absl::StrFormat("the predicted time to first token, %.3g s, is longer than the "
                            "request's deadline, %.3g s away; retry in %.0f s",
                            predicted, deadline_in, retry)
          : absl::StrFormat("the predicted time to first token, %.3g s, exceeds the limit of "
                            "%g s (--max-predicted-wait-s); retry in %.0f s",
                            predicted, options_.max_predicted_wait, retry));
  refused.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrFormat("%.0f", retry)));
  return refused;
}

}  // namespace pagoda::scheduler
