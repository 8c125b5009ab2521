#include "scheduler/core/scheduler.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_format.h"

namespace pagoda::scheduler {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kDeadline:
      return "deadline";
  }
  return "unknown";
}

const char* SeqStateName(SeqState state) {
  switch (state) {
    case SeqState::kWaiting:
      return "waiting";
    case SeqState::kPrefilling:
      return "prefilling";
    case SeqState::kDecoding:
      return "decoding";
    case SeqState::kPreempted:
      return "preempted";
  }
  return "unknown";
}

namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Generated tokens a sequence's token vector has room for from the start.
constexpr int32_t kMaxReservedNewTokens = 16384;

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options)
    : options_(options),
      kv_(options.enable_prefix_caching),
      waiting_(options.aging_interval, options.fairness == Fairness::kVtc, options.tenant_weights) {
}
Scheduler::~Scheduler() = default;

size_t Scheduler::num_running() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w->running.size();
  return n;
}

size_t Scheduler::num_preempted() const {
  size_t n = 0;
  for (const auto& [id, s] : seqs_) n += s->state == SeqState::kPreempted;
  return n;
}

std::optional<SeqState> Scheduler::state(RequestId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  return it->second->state;
}

WorkerState* Scheduler::FindWorker(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::pair<int32_t, int32_t> Scheduler::PlanLimits(WorkerId id) const {
  auto it = workers_.find(id);
  if (it == workers_.end()) return {0, 0};
  return {BatchBudget(*it->second), PrefillChunk(*it->second)};
}

Sequence* Scheduler::FindSeq(RequestId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

int32_t Scheduler::DecodeLimit(const Sequence& s) const {
  const int32_t limit =
      s.request.max_tokens > 0 ? s.num_prompt + s.request.max_tokens : options_.context_length;
  return std::min(limit, options_.context_length);
}

int32_t Scheduler::BatchBudget(const WorkerState& w) const {
  const int32_t own = w.info.max_batch_tokens;
  return std::max(1,
                  options_.max_batch_tokens > 0 ? std::min(options_.max_batch_tokens, own) : own);
}

int32_t Scheduler::PrefillChunk(const WorkerState& w) const {
  const int32_t chunk = options_.max_prefill_chunk > 0 ? options_.max_prefill_chunk
                        : w.info.max_prefill_chunk > 0 ? w.info.max_prefill_chunk
                                                       : kDefaultPrefillChunk;
  return std::min(chunk, BatchBudget(w));
}

int32_t Scheduler::MaxPositions(const Sequence& s) const {
  // The last sampled token is never an input, so it needs no KV.
  return DecodeLimit(s) - 1;
}

absl::Status Scheduler::AddRequest(NewRequest request, double now) {
  const int32_t prompt = static_cast<int32_t>(request.prompt.size());
  const int32_t context = options_.context_length;
  if (prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  next_deadline_ = std::min(next_deadline_, request.deadline);  // early if refused: harmless
  if (request.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be >= 0, got %d", request.max_tokens));
  }
  if (prompt >= context) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt has %d tokens; the model context is %d tokens, leaving no room to generate",
        prompt, context));
  }
  if (prompt + int64_t{request.max_tokens} > context) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt (%d tokens) + max_tokens (%d) exceeds the model context of %d tokens", prompt,
        request.max_tokens, context));
  }
  if (request.n < 1 || request.n > kMaxCompletions) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n must be in [1, %d], got %d", kMaxCompletions, request.n));
  }
  for (int32_t i = 0; i < request.n; ++i) {
    if (seqs_.contains(request.id + i)) {
      return absl::AlreadyExistsError(absl::StrFormat("request id %d is in use", request.id + i));
    }
  }
  auto s = std::make_unique<Sequence>();
  s->request = std::move(request);
  // Room for every token it may generate, so decoding never reallocates (a realloc of a 4k
  // context per sequence in one step showed up as a 2 ms planning p99 at 1,024 sequences).
  // Capped: a GGUF may declare a context of 2^31 tokens.
  const int32_t max_tokens = s->request.max_tokens > 0 ? s->request.max_tokens : context - prompt;
  s->tokens.reserve(prompt + std::min(max_tokens, kMaxReservedNewTokens));
  s->tokens.assign(s->request.prompt.begin(), s->request.prompt.end());
  s->num_prompt = prompt;
  s->arrival = now;
  s->timings.arrival = now;
  if (!workers_.empty()) {
    int32_t largest = 0;
    bool fits = false;
    const int64_t n = s->request.n;
    for (const auto& [id, w] : workers_) {
      largest = std::max(largest, w->info.num_pages * w->info.page_size);
      fits |= n * CeilDiv(MaxPositions(*s), w->info.page_size) <= w->info.num_pages;
    }
    if (!fits && n > 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "n (%d) x (prompt (%d tokens) + max_tokens (%d)) needs more KV cache than any worker "
          "has (largest: %d tokens)",
          n, prompt, s->request.max_tokens, largest));
    }
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt (%d tokens) + max_tokens (%d) needs more KV cache than any worker has "
          "(largest: %d tokens)",
          prompt, s->request.max_tokens, largest));
    }
  }
  if (waiting_.size() >= static_cast<size_t>(options_.max_queued_requests)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the queue is full: %d requests waiting (limit %d)", waiting_.size(),
                        options_.max_queued_requests));
  }
  if (queued_prompt_tokens_ + prompt > options_.max_queued_prompt_tokens) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the queue is full: %d prompt tokens waiting + %d would exceed the limit of %d",
        queued_prompt_tokens_, prompt, options_.max_queued_prompt_tokens));
  }
  if (absl::Status admit = AdmitByPrediction(*s, now); !admit.ok()) return admit;
  const RequestId id = s->request.id;
  s->tenant = waiting_.Acquire(s->request.tenant);
  waiting_.PushBack(s->queue_entry());
  queued_prompt_tokens_ += prompt;
  for (int32_t i = 1; i < s->request.n; ++i) {
    // Completion i: its own sequence and seed, waiting to fork from completion 0.
    auto child = std::make_unique<Sequence>();
    child->request = s->request;
    child->request.id = id + i;
    child->request.n = 1;
    child->request.sampling.seed += static_cast<uint64_t>(i);
    child->tokens = s->tokens;
    child->num_prompt = prompt;
    child->arrival = now;
    child->timings.arrival = now;
    child->fork_parent = id;
    child->tenant = waiting_.Acquire(child->request.tenant);
    s->fork_children.push_back(id + i);
    seqs_.emplace(id + i, std::move(child));
  }
  seqs_.emplace(id, std::move(s));
  return absl::OkStatus();
}

void Scheduler::ForkChildren(Sequence& parent, double now) {
  WorkerState& w = *FindWorker(*parent.worker);
  std::vector<RequestId> children;
  children.swap(parent.fork_children);
  for (RequestId id : children) {
    Sequence& child = *seqs_.at(id);
    child.fork_parent = 0;
    // The child computes the last prompt token itself, to sample its own first token.
    std::optional<std::optional<PageCopy>> copy;
    if (w.running.size() < static_cast<size_t>(options_.max_running)) {
      copy = kv_.Fork(parent.request.id, id, parent.num_prompt - 1);
    }
    if (!copy) {  // no room: it queues, to recompute (or hit the prefix cache) like any other
      waiting_.PushFront(child.queue_entry());
      queued_prompt_tokens_ += static_cast<int64_t>(child.tokens.size());
      continue;
    }
    child.worker = w.id;
    child.state = SeqState::kPrefilling;
    child.num_computed = child.num_scheduled = parent.num_prompt - 1;
    child.pending_copy = *copy;
    w.pending_copies.push_back(id);
    child.timings.first_scheduled = now;
    w.running.push_back(id);
    waiting_.AddRunning(child.tenant, 1);
  }
}

void Scheduler::ReleaseChildren(Sequence& parent) {
  for (RequestId id : parent.fork_children) {
    Sequence& child = *seqs_.at(id);
    child.fork_parent = 0;
    waiting_.PushFront(child.queue_entry());
    queued_prompt_tokens_ += static_cast<int64_t>(child.tokens.size());
  }
  parent.fork_children.clear();
}

void Scheduler::Finish(RequestId id, FinishReason reason, const std::string& message, double now) {
  if (Sequence* s = FindSeq(id)) FinishSeq(*s, reason, message, now);
}

void Scheduler::AddWorker(WorkerId id, const WorkerInfo& info) {
  auto w = std::make_unique<WorkerState>(id, info);
  w->model.SetSwapPrior(info.swap_seconds_per_page);
  workers_.emplace(id, std::move(w));
  kv_.AddWorker(id, info.num_pages, info.page_size, std::max(0, info.num_swap_pages));
}

void Scheduler::RemoveWorker(WorkerId id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  WorkerState& w = *it->second;
  // Re-queue in reverse so the earliest admitted ends up first in its class.
  for (auto rit = w.running.rbegin(); rit != w.running.rend(); ++rit) {
    Sequence& s = *seqs_.at(*rit);
    waiting_.AddRunning(s.tenant, -1);
    s.worker.reset();
    s.worker_knows = false;
    s.pages_sent = 0;
    s.pending_copy.reset();
    s.num_computed = s.num_scheduled = 0;
    s.pending_samples = 0;
    ++s.epoch;
    s.state = SeqState::kPreempted;
    waiting_.PushFront(s.queue_entry());
    queued_prompt_tokens_ += static_cast<int64_t>(s.tokens.size());
  }
  // Sequences swapped out to it lose their KV with it: they recompute, wherever they go.
  for (auto& [sid, s] : seqs_) {
    if (s->swapped_on == id) s->swapped_on.reset();
  }
  workers_.erase(it);
  kv_.RemoveWorker(id);  // its tables, its cache and its swap space
}

void Scheduler::ExpireDeadlines(double now) {
  if (now < next_deadline_) return;
  std::vector<RequestId> expired;
  next_deadline_ = std::numeric_limits<double>::infinity();
  for (const auto& [id, s] : seqs_) {
    if (s->request.deadline <= now) {
      expired.push_back(id);
    } else {
      next_deadline_ = std::min(next_deadline_, s->request.deadline);
    }
  }
  for (RequestId id : expired) {
    FinishSeq(*seqs_.at(id), FinishReason::kDeadline, "deadline exceeded", now);
  }
}

std::optional<Plan> Scheduler::Schedule(WorkerId worker, double now) {
  ExpireDeadlines(now);
  WorkerState* w = FindWorker(worker);
  if (w == nullptr ||
      w->flight.size() >= static_cast<size_t>(std::max(1, options_.max_plans_in_flight))) {
    return std::nullopt;
  }
  Plan plan;
  plan.worker = worker;
  plan.steps.reserve(w->running.size() + 1);
  Budget budget{BatchBudget(*w)};
  // Forks' copies go out in the next plan, whether or not the child steps in it: once the
  // parent leaves, its partial page may be handed out again. The worker copies right after
  // the plan's swap-outs, before any swap-in or step writes a page.
  for (RequestId id : w->pending_copies) {
    Sequence* child = FindSeq(id);
    if (child == nullptr || child->worker != worker || !child->pending_copy) continue;
    plan.page_copies.push_back(*child->pending_copy);
    child->pending_copy.reset();
    child->kv_arrives_in = w->iteration + 1;
  }
  w->pending_copies.clear();
  building_ = {&plan, &budget};
  BuildSteps(*w, plan, budget, now);
  if (plan.steps.empty() && w->flight.empty() && !w->running.empty()) {
    // Stalled: every running sequence needs a page and no victim was eligible. Break the
    // stall by preempting the last-admitted sequence even past the thrashing bound.
    Sequence& victim = *seqs_.at(w->running.back());
    forced_preemptions_ += victim.preempted_in_row >= options_.max_preemptions_in_row;
    Preempt(victim);
    BuildSteps(*w, plan, budget, now);
  }
  building_ = {};
  plan.free_seq_ids = std::move(w->pending_frees);
  w->pending_frees.clear();
  plan.swap_out = std::move(w->pending_swap_out);
  w->pending_swap_out.clear();
  plan.swap_in = std::move(w->pending_swap_in);
  w->pending_swap_in.clear();
  kv_.EndPlan(worker);
  if (plan.steps.empty() && plan.free_seq_ids.empty() && plan.swap_out.empty() &&
      plan.swap_in.empty() && plan.page_copies.empty()) {
    return std::nullopt;
  }
  plan.iteration = ++w->iteration;
  FlightPlan flight{plan.iteration, {}};
  flight.entries.reserve(plan.steps.size());
  for (const PlanStep& step : plan.steps) {
    const Sequence& s = *seqs_.at(step.seq_id);
    const int32_t chunk = step.feed_last_sampled ? 1 : static_cast<int32_t>(step.tokens.size());
    flight.entries.push_back({step.seq_id, s.epoch, chunk, step.sample});
    flight.work += StepModel::Work(step.start_pos, chunk);
  }
  flight.tokens = plan.num_tokens;
  flight.swap_pages = static_cast<int32_t>(plan.swap_out.size() + plan.swap_in.size());
  w->flight.push_back(std::move(flight));
  return plan;
}

void Scheduler::BuildSteps(WorkerState& w, Plan& plan, Budget& budget, double now) {
  ScheduleRunning(w, plan, budget, /*decodes=*/true);
  ScheduleRunning(w, plan, budget, /*decodes=*/false);
  AdmitWaiting(w, plan, budget, now);
}

void Scheduler::ScheduleRunning(WorkerState& w, Plan& plan, Budget& budget, bool decodes) {
  // Pointers, not ids: no sequence is destroyed while a plan is built (preemption only moves
  // it back to the queue), and this saves a lookup per sequence per pass. Copied because
  // preemption edits w.running. Earlier admissions go first (they are never victims while
  // later ones exist).
  std::vector<Sequence*>& order = scratch_running_;
  order.clear();
  for (RequestId id : w.running) order.push_back(seqs_.at(id).get());
  for (Sequence* s : order) {
    if (budget.tokens <= 0) return;
    if (s->worker != w.id) continue;  // preempted during this loop
    if ((s->unscheduled() == 1) != decodes) continue;
    AddStep(w, *s, plan, budget, /*may_preempt=*/true);
  }
}

void Scheduler::AdmitWaiting(WorkerState& w, Plan& plan, Budget& budget, double now) {
  while (budget.tokens > 0) {
    std::optional<RequestQueue::Entry> entry = waiting_.Peek(now);
    if (!entry) return;
    Sequence& s = *seqs_.at(entry->id);
    if (!IsPlacedOn(w, s)) return;  // the head waits for a better worker's next plan
    // Another sequence here is computing the head's next prompt pages: wait for them.
    if (!s.swapped_on &&
        kv_.Lookup(w.id, s.request.id, s.tokens, s.request.cache_salt).computing_tokens > 0) {
      return;
    }
    const int entry_class = waiting_.Standing(entry->priority, now);
    // Make room by preempting lower-class sequences (or, with fair share, sequences of a tenant
    // holding more than its share of this worker); never overtake the head.
    // A victim's released pages may extend the head's hit, so look up again after each.
    while (!HasRoomToAdmit(w, s, budget)) {
      Sequence* victim = PickVictim(w, entry_class, now);
      if (victim == nullptr) victim = PickFairShareVictim(w, s, entry_class, now);
      if (victim == nullptr) return;
      Preempt(*victim);
    }
    // By id: a victim of the head's base class (outranked by aging) is now in front of it.
    waiting_.Remove(*entry);
    queued_prompt_tokens_ -= static_cast<int64_t>(s.tokens.size());
    s.worker = w.id;
    s.state = SeqState::kPrefilling;
    w.running.push_back(s.request.id);
    waiting_.AddRunning(s.tenant, 1);
    if (s.swapped_on) {
      SwapIn(w, s);
    } else {
      const int32_t cached = kv_.Open(w.id, s.request.id, s.tokens, s.request.cache_salt);
      s.num_computed = s.num_scheduled = cached;
    }
    if (s.timings.first_scheduled < 0) {
      s.timings.first_scheduled = now;
      s.cached_tokens = std::min(s.num_computed, s.num_prompt);
      const int32_t uncached = s.num_prompt - s.cached_tokens;
      waiting_.Charge(s.tenant, kPromptTokenCost * uncached, uncached);
    }
    AddStep(w, s, plan, budget, /*may_preempt=*/false);
  }
}

bool Scheduler::HasRoomToAdmit(const WorkerState& w, Sequence& s, const Budget& budget) {
  if (w.running.size() >= static_cast<size_t>(options_.max_running)) return false;
  const int32_t ps = w.info.page_size;
  if (s.swapped_on) {  // its swapped pages come back, plus what its first chunk needs
    const int32_t chunk = std::min({static_cast<int32_t>(s.tokens.size()) - s.swapped_positions,
                                    budget.tokens, PrefillChunk(w)});
    return CeilDiv(s.swapped_positions + chunk, ps) <= kv_.AvailablePages(w.id);
  }
  const PrefixHit hit = kv_.Lookup(w.id, s.request.id, s.tokens, s.request.cache_salt);
  const int32_t chunk = std::min(
      {static_cast<int32_t>(s.tokens.size()) - hit.tokens, budget.tokens, PrefillChunk(w)});
  const int32_t pages = CeilDiv(hit.tokens + chunk, ps) - hit.tokens / ps;
  return pages <= kv_.AvailablePages(w.id) - hit.parked_pages;
}

std::tuple<bool, int64_t, int64_t, int64_t> Scheduler::PlacementKey(const WorkerState& w,
                                                                    Sequence& s) {
  const int32_t ps = w.info.page_size;
  const PrefixHit hit = kv_.Lookup(w.id, s.request.id, s.tokens, s.request.cache_salt);
  const int32_t uncached = static_cast<int32_t>(s.tokens.size()) - hit.tokens;
  const int32_t available = kv_.AvailablePages(w.id) - hit.parked_pages;
  const bool fits_now =
      w.running.size() < static_cast<size_t>(options_.max_running) &&
      CeilDiv(static_cast<int32_t>(s.tokens.size()), ps) - hit.tokens / ps <= available;
  int64_t backlog = 0;
  for (RequestId id : w.running) {
    const Sequence& r = *seqs_.at(id);
    backlog += static_cast<int64_t>(r.tokens.size()) - r.num_computed;
  }
  const int64_t cost =
      uncached + backlog + kDecodeCostTokens * static_cast<int64_t>(w.running.size());
  return {fits_now, -cost, int64_t{kv_.AvailablePages(w.id)} * ps, -static_cast<int64_t>(w.id)};
}

bool Scheduler::IsPlacedOn(const WorkerState& w, Sequence& s) {
  if (s.swapped_on) return *s.swapped_on == w.id;  // its KV is in that worker's swap space
  if (workers_.size() == 1) return true;
  if (HasBurstShare(w, s)) return true;
  const WorkerState* best = nullptr;
  std::tuple<bool, int64_t, int64_t, int64_t> best_key;
  for (const auto& [id, x] : workers_) {
    if (CeilDiv(MaxPositions(s), x->info.page_size) > x->info.num_pages) continue;
    auto key = PlacementKey(*x, s);
    if (best == nullptr || key > best_key) {
      best = x.get();
      best_key = key;
    }
  }
  return best == &w;
}

bool Scheduler::HasBurstShare(const WorkerState& w, Sequence& s) {
  // One request per plan would ramp a burst of N requests over N / workers steps (the worker
  // that admits one is no longer the best). With at least one waiting request per worker, a
  // worker under its fair share of everything running and waiting takes the head when it
  // plans, provided the whole request fits its available pages beyond its hit (evicting only
  // parked pages, preempting no one) and no other worker holds more of its prefix.
  if (waiting_.size() < workers_.size()) return false;
  if (w.running.size() >= static_cast<size_t>(options_.max_running)) return false;
  const int32_t ps = w.info.page_size;
  const PrefixHit hit = kv_.Lookup(w.id, s.request.id, s.tokens, s.request.cache_salt);
  if (CeilDiv(MaxPositions(s), ps) - hit.tokens / ps >
      kv_.AvailablePages(w.id) - hit.parked_pages) {
    return false;
  }
  size_t running = 0;
  for (const auto& [id, x] : workers_) {
    running += x->running.size();
    if (x.get() == &w || !kv_.prefix_caching()) continue;
    if (CeilDiv(MaxPositions(s), x->info.page_size) > x->info.num_pages) continue;
    if (kv_.Lookup(x->id, s.request.id, s.tokens, s.request.cache_salt).tokens > hit.tokens) {
      return false;
    }
  }
  const size_t share = (running + waiting_.size() + workers_.size() - 1) / workers_.size();
  return w.running.size() < share;
}

bool Scheduler::AddStep(WorkerState& w, Sequence& s, Plan& plan, Budget& budget, bool may_preempt) {
  const int32_t unscheduled = s.unscheduled();
  int32_t chunk = std::min({unscheduled, budget.tokens, PrefillChunk(w)});
  if (chunk <= 0) return false;
  const int32_t known_plus_pending = static_cast<int32_t>(s.tokens.size()) + s.pending_samples;
  // Never ask for a token past max_tokens or the context: it would be thrown away.
  if (s.num_scheduled + chunk == known_plus_pending && known_plus_pending >= DecodeLimit(s)) {
    return false;
  }
  if (!EnsurePages(w, s, chunk, may_preempt)) return false;
  const bool sample = s.num_scheduled + chunk == known_plus_pending;
  PlanStep step;
  step.seq_id = s.request.id;
  step.start_pos = s.num_scheduled;
  step.feed_last_sampled = s.pending_samples > 0;  // then chunk == 1 (see Sequence)
  if (!step.feed_last_sampled) {
    step.tokens.assign(s.tokens.begin() + s.num_scheduled,
                       s.tokens.begin() + s.num_scheduled + chunk);
  }
  const std::vector<PageId>& table = kv_.pages(s.request.id);
  step.new_pages.assign(table.begin() + s.pages_sent, table.end());
  s.pages_sent = static_cast<int32_t>(table.size());
  step.sample = sample;
  step.sample_index = known_plus_pending - s.num_prompt;
  step.first_sight = !s.worker_knows;
  if (step.first_sight) {
    step.sampling = s.request.sampling;
    if (step.sampling.needs_history()) {  // the worker counts tokens from here on
      step.prompt_tokens = s.num_prompt;
      step.history.assign(s.tokens.begin(), s.tokens.begin() + step.start_pos);
    }
  }
  s.worker_knows = true;
  s.num_scheduled += chunk;
  if (sample) ++s.pending_samples;
  plan.steps.push_back(std::move(step));
  plan.num_tokens += chunk;
  budget.tokens -= chunk;
  return true;
}

bool Scheduler::EnsurePages(WorkerState& w, Sequence& s, int32_t& chunk, bool may_preempt) {
  // Grow evicts unreferenced cached pages before it fails: preemption comes only after. A
  // victim of a lower class yields its pages. Otherwise a prefill chunk first shrinks to the
  // pages there are (SGLang cuts a continuing chunk to its free tokens too): preempting a
  // sequence of the same class, or this one, would throw computed KV away while the prefill
  // can still move. Only a chunk that cannot shrink preempts within its class.
  const bool shrinkable = s.pending_samples == 0 && chunk > 1;
  while (!kv_.Grow(s.request.id, s.num_scheduled + chunk)) {
    Sequence* victim = may_preempt ? PickVictim(w, -1, 0) : nullptr;
    if (shrinkable && (victim == nullptr || victim->priority() >= s.priority())) {
      const int32_t reachable =
          (static_cast<int32_t>(kv_.pages(s.request.id).size()) + kv_.AvailablePages(w.id)) *
          w.info.page_size;
      if (reachable > s.num_scheduled) {
        chunk = reachable - s.num_scheduled;  // ends on a page boundary; Grow now succeeds
        continue;
      }
    }
    if (victim != nullptr && victim != &s) {
      Preempt(*victim);
      continue;
    }
    // No room: yield to others (or to the victim choice).
    if (victim == &s) Preempt(s);
    return false;
  }
  return true;
}

absl::Status Scheduler::OnResult(WorkerId worker, uint64_t iteration,
                                 const std::vector<SampledToken>& sampled, double now,
                                 const StepTimes& times) {
  WorkerState* w = FindWorker(worker);
  if (w == nullptr) return absl::NotFoundError(absl::StrFormat("no worker %d", worker));
  if (w->flight.empty() || w->flight.front().iteration != iteration) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker %d answered iteration %d; the oldest plan in flight is %d", worker,
                        iteration, w->flight.empty() ? 0 : w->flight.front().iteration));
  }
  FlightPlan done = std::move(w->flight.front());
  w->flight.pop_front();
  if (times.forward_seconds > 0 && done.tokens > 0) {
    w->model.Observe(done.tokens, done.work, times.forward_seconds);
  }
  if (done.swap_pages > 0) w->model.ObserveSwap(done.swap_pages, times.swap_seconds);
  // Workers answer in plan order: match by walking both, with a map only if they differ.
  size_t next = 0;
  absl::flat_hash_map<RequestId, const SampledToken*> by_id;
  auto token_for = [&](RequestId id) -> const SampledToken* {
    if (next < sampled.size() && sampled[next].seq_id == id) return &sampled[next++];
    if (by_id.empty()) {
      by_id.reserve(sampled.size());
      for (const SampledToken& t : sampled) by_id.emplace(t.seq_id, &t);
    }
    auto it = by_id.find(id);
    if (it == by_id.end()) return nullptr;
    return it->second;
  };
  events_.reserve(events_.size() + done.entries.size());
  for (const FlightEntry& e : done.entries) {
    Sequence* s = FindSeq(e.id);
    // A sampling entry consumes its token even when the sequence has gone since.
    const SampledToken* token = e.sample ? token_for(e.id) : nullptr;
    if (s == nullptr || s->worker != worker || s->epoch != e.epoch) continue;  // gone since
    s->num_computed += e.chunk;
    // Only a filled page can join the cache (most decode steps fill none).
    const int32_t ps = w->info.page_size;
    if (s->num_computed / ps > (s->num_computed - e.chunk) / ps) {
      kv_.Commit(s->request.id, s->tokens, s->num_computed);
    }
    if (!s->fork_children.empty() && s->num_computed >= s->num_prompt) ForkChildren(*s, now);
    if (!e.sample) continue;
    --s->pending_samples;
    if (token == nullptr) {
      FinishSeq(*s, FinishReason::kError, "the worker returned no token", now);
      continue;
    }
    ApplySample(*s, *token, now);
  }
  return absl::OkStatus();
}

void Scheduler::OnPlanFailed(WorkerId worker, const std::string& error, double now) {
  WorkerState* w = FindWorker(worker);
  if (w == nullptr || w->flight.empty()) return;
  FlightPlan done = std::move(w->flight.front());
  w->flight.pop_front();
  for (const FlightEntry& e : done.entries) {
    Sequence* s = FindSeq(e.id);
    if (s == nullptr || s->worker != worker || s->epoch != e.epoch) continue;
    FinishSeq(*s, FinishReason::kError, error, now);
  }
}

void Scheduler::ApplySample(Sequence& s, const SampledToken& sampled, double now) {
  const int32_t token = sampled.token;
  waiting_.Charge(s.tenant, kOutputTokenCost, 1);
  if (s.timings.first_token < 0) s.timings.first_token = now;
  s.preempted_in_row = 0;
  const NewRequest& r = s.request;
  const bool eos = token == options_.eos_id ||
                   std::find(options_.more_eos_ids.begin(), options_.more_eos_ids.end(), token) !=
                       options_.more_eos_ids.end();
  if (eos && !r.ignore_eos) {
    FinishSeq(s, FinishReason::kEos, "", now);
    return;
  }
  if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
      r.stop_token_ids.end()) {
    FinishSeq(s, FinishReason::kStop, "", now);
    return;
  }
  s.tokens.push_back(token);
  s.state = SeqState::kDecoding;
  Event e;
  e.kind = Event::Kind::kToken;
  e.id = r.id;
  e.token = token;
  if (r.sampling.logprobs) e.logprob = sampled.logprob;
  events_.push_back(std::move(e));
  if (r.max_tokens > 0 && s.generated() >= r.max_tokens) {
    FinishSeq(s, FinishReason::kLength, "", now);
  } else if (static_cast<int32_t>(s.tokens.size()) >= options_.context_length) {
    FinishSeq(s, FinishReason::kContext, "", now);
  }
}

void Scheduler::ReleaseFromWorker(Sequence& s) {
  if (!s.worker) return;
  WorkerState* w = FindWorker(*s.worker);
  if (w != nullptr) {
    kv_.Release(s.request.id);
    w->running.erase(std::find(w->running.begin(), w->running.end(), s.request.id));
    waiting_.AddRunning(s.tenant, -1);
    if (s.worker_knows) w->pending_frees.push_back(s.request.id);
  }
  s.worker.reset();
  s.worker_knows = false;
  s.pages_sent = 0;
  s.pending_copy.reset();
}

void Scheduler::FinishSeq(Sequence& s, FinishReason reason, const std::string& message,
                          double now) {
  ReleaseChildren(s);  // completions that had not forked yet go on without their parent
  if (s.fork_parent != 0) {
    std::vector<RequestId>& siblings = seqs_.at(s.fork_parent)->fork_children;
    siblings.erase(std::find(siblings.begin(), siblings.end(), s.request.id));
  } else if (s.worker) {
    ReleaseFromWorker(s);
  } else if (waiting_.Remove(s.queue_entry())) {
    queued_prompt_tokens_ -= static_cast<int64_t>(s.tokens.size());
  }
  if (reason != FinishReason::kCancelled && reason != FinishReason::kError) {
    ObserveOutputLength(s.generated());
  }
  waiting_.Release(s.tenant);
  Event e;
  e.kind = Event::Kind::kFinished;
  e.id = s.request.id;
  e.reason = reason;
  e.message = message;
  e.prompt_tokens = s.num_prompt;
  e.completion_tokens = s.generated();
  e.cached_tokens = s.cached_tokens;
  e.preemptions = s.preemptions;
  e.timings = s.timings;
  e.timings.finished = now;
  events_.push_back(std::move(e));
  kv_.Forget(s.request.id);
  seqs_.erase(s.request.id);  // destroys `s`
}

int64_t Scheduler::preemptions(PreemptionMode mode) const {
  return mode == PreemptionMode::kSwap ? swap_preemptions_ : total_preemptions_ - swap_preemptions_;
}

std::vector<TenantStats> Scheduler::tenant_stats() const {
  std::vector<TenantStats> out;
  for (const RequestQueue::Tenant* t : waiting_.tenants()) {
    TenantStats& st = out.emplace_back();
    st.name = t->name;
    st.weight = t->weight;
    st.virtual_counter = t->counter;
    st.served_tokens = t->served_tokens;
    st.queued = t->queued;
    st.running = t->running;
  }
  return out;
}

const char* PreemptionModeName(PreemptionMode mode) {
  switch (mode) {
    case PreemptionMode::kAuto:
      return "auto";
    case PreemptionMode::kRecompute:
      return "recompute";
    case PreemptionMode::kSwap:
      return "swap";
  }
  return "unknown";
}

std::vector<Event> Scheduler::TakeEvents() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

}  // namespace pagoda::scheduler
