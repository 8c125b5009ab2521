#include "scheduler/core/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
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
  }
  return "unknown";
}

struct Scheduler::Sequence {
  NewRequest request;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t num_prompt = 0;
  int32_t num_computed = 0;        // tokens whose KV is in the worker's pages
  std::optional<WorkerId> worker;  // set while running
  bool worker_knows = false;       // first_sight was sent to `worker`
  std::vector<PageId> pages;       // block table on `worker`
  int32_t pages_sent = 0;          // prefix of `pages` the worker has been told about
  int32_t reserved = 0;            // pages promised by the worker's pool, not yet taken
  RequestTimings timings;

  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - num_prompt; }
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - num_computed; }
};

// One step of an in-flight plan, remembered until its result arrives.
struct FlightEntry {
  RequestId id;
  int32_t chunk;
  bool sample;
};

struct Scheduler::Worker {
  Worker(WorkerId worker_id, const WorkerInfo& worker_info)
      : id(worker_id), info(worker_info), pool(worker_info.num_pages) {}
  WorkerId id;
  WorkerInfo info;
  BlockPool pool;
  std::vector<RequestId> running;  // admission order
  bool in_flight = false;
  uint64_t iteration = 0;
  std::vector<RequestId> pending_frees;  // sequences the worker must forget
  std::vector<FlightEntry> flight;
};

namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options) : options_(options) {}
Scheduler::~Scheduler() = default;

size_t Scheduler::num_running() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w->running.size();
  return n;
}

const BlockPool* Scheduler::pool(WorkerId worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? nullptr : &it->second->pool;
}

Scheduler::Worker* Scheduler::FindWorker(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

int32_t Scheduler::PagesNeeded(const Sequence& s, const Worker& w) const {
  // KV is written for every token but the last sampled one; one page of slack keeps the
  // arithmetic simple and never hurts a sequence.
  return CeilDiv(s.num_prompt + s.request.max_tokens, w.info.page_size);
}

absl::Status Scheduler::AddRequest(NewRequest request, double now) {
  const int32_t prompt = static_cast<int32_t>(request.prompt.size());
  if (prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (request.max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be positive, got %d", request.max_tokens));
  }
  if (prompt + int64_t{request.max_tokens} > options_.context_length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt (%d tokens) + max_tokens (%d) exceeds the model context of %d tokens", prompt,
        request.max_tokens, options_.context_length));
  }
  if (seqs_.contains(request.id)) {
    return absl::AlreadyExistsError(absl::StrFormat("request id %d is in use", request.id));
  }
  auto s = std::make_unique<Sequence>();
  s->request = std::move(request);
  s->tokens = s->request.prompt;
  s->num_prompt = prompt;
  if (!workers_.empty()) {
    int32_t most_tokens = 0;
    for (const auto& [id, w] : workers_) {
      if (PagesNeeded(*s, *w) <= w->info.num_pages) most_tokens = -1;
      if (most_tokens >= 0) {
        most_tokens = std::max(most_tokens, w->info.num_pages * w->info.page_size);
      }
    }
    if (most_tokens > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt (%d tokens) + max_tokens (%d) needs more KV cache than any worker has "
          "(largest: %d tokens)",
          prompt, s->request.max_tokens, most_tokens));
    }
  }
  s->timings.arrival = now;
  const RequestId id = s->request.id;
  waiting_.PushBack(id, s->request.priority);
  seqs_.emplace(id, std::move(s));
  return absl::OkStatus();
}

void Scheduler::Cancel(RequestId id, double now, const std::string& why) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Finish(*it->second, FinishReason::kCancelled, why, now);
}

void Scheduler::AddWorker(WorkerId id, const WorkerInfo& info) {
  workers_.emplace(id, std::make_unique<Worker>(id, info));
}

void Scheduler::RemoveWorker(WorkerId id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Worker& w = *it->second;
  // Re-queue in reverse so the earliest admitted ends up first in its class.
  for (auto rit = w.running.rbegin(); rit != w.running.rend(); ++rit) {
    Sequence& s = *seqs_.at(*rit);
    s.worker.reset();
    s.worker_knows = false;
    s.pages.clear();
    s.pages_sent = 0;
    s.reserved = 0;
    s.num_computed = 0;
    waiting_.PushFront(s.request.id, s.request.priority);
  }
  workers_.erase(it);
}

std::optional<Plan> Scheduler::Schedule(WorkerId worker, double now) {
  Worker* w = FindWorker(worker);
  if (w == nullptr || w->in_flight) return std::nullopt;
  Plan plan;
  plan.worker = worker;
  plan.free_seq_ids = std::move(w->pending_frees);
  w->pending_frees.clear();
  int32_t budget = std::min(options_.max_batch_tokens, w->info.max_batch_tokens);
  ScheduleRunning(*w, plan, budget, /*decodes=*/true);
  ScheduleRunning(*w, plan, budget, /*decodes=*/false);
  AdmitWaiting(*w, plan, budget, now);
  if (plan.steps.empty() && plan.free_seq_ids.empty()) return std::nullopt;
  plan.iteration = ++w->iteration;
  w->in_flight = true;
  return plan;
}

void Scheduler::ScheduleRunning(Worker& w, Plan& plan, int32_t& budget, bool decodes) {
  for (RequestId id : w.running) {
    if (budget <= 0) return;
    Sequence& s = *seqs_.at(id);
    if ((s.remaining() == 1) != decodes) continue;
    AddStep(w, s, plan, budget);
  }
}

void Scheduler::AdmitWaiting(Worker& w, Plan& plan, int32_t& budget, double now) {
  const size_t max_running = static_cast<size_t>(options_.max_running);
  while (budget > 0 && w.running.size() < max_running) {
    std::optional<RequestId> next = waiting_.Peek();
    if (!next) return;
    Sequence& s = *seqs_.at(*next);
    const int32_t need = PagesNeeded(s, w);
    if (!w.pool.Reserve(need)) return;  // FIFO by class: no overtaking (no starvation)
    waiting_.Pop();
    s.worker = w.id;
    s.reserved = need;
    w.running.push_back(s.request.id);
    if (s.timings.first_scheduled < 0) s.timings.first_scheduled = now;
    AddStep(w, s, plan, budget);
  }
}

bool Scheduler::AddStep(Worker& w, Sequence& s, Plan& plan, int32_t& budget) {
  const int32_t chunk = std::min({s.remaining(), budget, options_.max_prefill_chunk});
  if (chunk <= 0) return false;
  PlanStep step;
  step.seq_id = s.request.id;
  step.start_pos = s.num_computed;
  step.tokens.assign(s.tokens.begin() + s.num_computed, s.tokens.begin() + s.num_computed + chunk);
  const int32_t pages_needed = CeilDiv(s.num_computed + chunk, w.info.page_size);
  while (static_cast<int32_t>(s.pages.size()) < pages_needed) {
    s.pages.push_back(w.pool.TakeReserved());
    --s.reserved;
  }
  step.new_pages.assign(s.pages.begin() + s.pages_sent, s.pages.end());
  s.pages_sent = static_cast<int32_t>(s.pages.size());
  step.sample = s.num_computed + chunk == static_cast<int32_t>(s.tokens.size());
  step.sample_index = s.generated();
  step.first_sight = !s.worker_knows;
  step.sampling = s.request.sampling;
  s.worker_knows = true;
  w.flight.push_back({s.request.id, chunk, step.sample});
  plan.steps.push_back(std::move(step));
  plan.num_tokens += chunk;
  budget -= chunk;
  return true;
}

absl::Status Scheduler::OnResult(WorkerId worker, uint64_t iteration,
                                 const std::vector<SampledToken>& sampled, double now) {
  Worker* w = FindWorker(worker);
  if (w == nullptr) return absl::NotFoundError(absl::StrFormat("no worker %d", worker));
  if (!w->in_flight || iteration != w->iteration) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker %d answered iteration %d; the plan in flight is %d", worker,
                        iteration, w->in_flight ? w->iteration : 0));
  }
  w->in_flight = false;
  std::vector<FlightEntry> flight = std::move(w->flight);
  w->flight.clear();
  absl::flat_hash_set<RequestId> expecting;
  for (const FlightEntry& e : flight) {
    auto it = seqs_.find(e.id);
    if (it == seqs_.end() || it->second->worker != worker) continue;  // cancelled meanwhile
    it->second->num_computed += e.chunk;
    if (e.sample) expecting.insert(e.id);
  }
  for (const SampledToken& t : sampled) {
    if (expecting.erase(t.seq_id) == 0) continue;  // cancelled, or not asked for
    ApplySample(*w, *seqs_.at(t.seq_id), t.token, now);
  }
  for (RequestId id : expecting) {
    Finish(*seqs_.at(id), FinishReason::kError, "the worker returned no token", now);
  }
  return absl::OkStatus();
}

void Scheduler::OnPlanFailed(WorkerId worker, const std::string& error, double now) {
  Worker* w = FindWorker(worker);
  if (w == nullptr || !w->in_flight) return;
  w->in_flight = false;
  std::vector<FlightEntry> flight = std::move(w->flight);
  w->flight.clear();
  for (const FlightEntry& e : flight) {
    auto it = seqs_.find(e.id);
    if (it == seqs_.end() || it->second->worker != worker) continue;
    Finish(*it->second, FinishReason::kError, error, now);
  }
}

void Scheduler::ApplySample(Worker& w, Sequence& s, int32_t token, double now) {
  if (s.timings.first_token < 0) s.timings.first_token = now;
  const NewRequest& r = s.request;
  if (token == options_.eos_id && !r.ignore_eos) {
    Finish(s, FinishReason::kEos, "", now);
    return;
  }
  if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
      r.stop_token_ids.end()) {
    Finish(s, FinishReason::kStop, "", now);
    return;
  }
  s.tokens.push_back(token);
  Event e;
  e.kind = Event::Kind::kToken;
  e.id = r.id;
  e.token = token;
  events_.push_back(std::move(e));
  if (s.generated() >= r.max_tokens ||
      static_cast<int32_t>(s.tokens.size()) >= options_.context_length) {
    Finish(s, FinishReason::kLength, "", now);
  }
}

void Scheduler::ReleaseFromWorker(Sequence& s) {
  if (!s.worker) return;
  Worker* w = FindWorker(*s.worker);
  if (w != nullptr) {
    w->pool.Free(s.pages);
    w->pool.Unreserve(s.reserved);
    w->running.erase(std::find(w->running.begin(), w->running.end(), s.request.id));
    if (s.worker_knows) w->pending_frees.push_back(s.request.id);
  }
  s.worker.reset();
  s.worker_knows = false;
  s.pages.clear();
  s.pages_sent = 0;
  s.reserved = 0;
}

void Scheduler::Finish(Sequence& s, FinishReason reason, const std::string& message, double now) {
  if (s.worker) {
    ReleaseFromWorker(s);
  } else {
    waiting_.Remove(s.request.id, s.request.priority);
  }
  Event e;
  e.kind = Event::Kind::kFinished;
  e.id = s.request.id;
  e.reason = reason;
  e.message = message;
  e.prompt_tokens = s.num_prompt;
  e.completion_tokens = s.generated();
  e.timings = s.timings;
  e.timings.finished = now;
  events_.push_back(std::move(e));
  seqs_.erase(s.request.id);  // destroys `s`
}

std::vector<Event> Scheduler::TakeEvents() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

absl::Status Scheduler::CheckInvariants() const {
  for (const auto& [wid, w] : workers_) {
    std::vector<bool> owned(w->pool.num_pages(), false);
    int32_t total_owned = 0;
    int32_t total_reserved = 0;
    for (RequestId id : w->running) {
      auto it = seqs_.find(id);
      if (it == seqs_.end()) return absl::InternalError(absl::StrFormat("running %d unknown", id));
      const Sequence& s = *it->second;
      if (s.worker != wid) return absl::InternalError(absl::StrFormat("seq %d worker", id));
      for (PageId p : s.pages) {
        if (p < 0 || p >= w->pool.num_pages() || owned[p] || !w->pool.IsAllocated(p)) {
          return absl::InternalError(absl::StrFormat("page %d of worker %d owned twice", p, wid));
        }
        owned[p] = true;
      }
      if (static_cast<int32_t>(s.pages.size()) + s.reserved < PagesNeeded(s, *w)) {
        return absl::InternalError(absl::StrFormat("seq %d under-reserved", id));
      }
      total_owned += static_cast<int32_t>(s.pages.size());
      total_reserved += s.reserved;
    }
    if (total_owned + w->pool.num_free() != w->pool.num_pages()) {
      return absl::InternalError(absl::StrFormat("worker %d: %d owned + %d free != %d pages", wid,
                                                 total_owned, w->pool.num_free(),
                                                 w->pool.num_pages()));
    }
    if (total_reserved != w->pool.reserved()) {
      return absl::InternalError(absl::StrFormat("worker %d: reservations %d != pool's %d", wid,
                                                 total_reserved, w->pool.reserved()));
    }
  }
  if (waiting_.size() + num_running() != seqs_.size()) {
    return absl::InternalError("a sequence is neither waiting nor running");
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
