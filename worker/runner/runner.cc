#include "worker/runner/runner.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace pagoda::worker {
namespace {

namespace wv1 = pagoda::worker::v1;

SamplingParams FromProto(const wv1::SamplingParams& p) {
  SamplingParams out;
  out.temperature = p.temperature();
  out.top_k = p.top_k();
  out.top_p = p.top_p();
  out.seed = p.seed();
  out.min_p = p.min_p();
  out.presence_penalty = p.presence_penalty();
  out.frequency_penalty = p.frequency_penalty();
  out.repetition_penalty = p.repetition_penalty() == 0 ? 1.0f : p.repetition_penalty();
  out.top_logprobs =
      p.logprobs() ? static_cast<int>(std::min<uint32_t>(p.top_logprobs(), kMaxTopLogprobs)) : -1;
  return out;
}

// `start`: Execute began; `t0`..`t1`: ForwardSample (forward pass and sampling); `t1`..`t2`: the
// sampled tokens written into the result.
StepTiming Timing(const std::vector<SeqInput>& batch, absl::Time start, absl::Time t0,
                  absl::Time t1, absl::Time t2, bool ok) {
  StepTiming timing;
  for (const SeqInput& in : batch) timing.tokens += static_cast<int32_t>(in.tokens.size());
  timing.step_seconds = absl::ToDoubleSeconds(t2 - start);
  timing.forward_seconds = absl::ToDoubleSeconds(t1 - t0);
  timing.sampling_seconds = absl::ToDoubleSeconds(t2 - t1);
  timing.ok = ok;
  return timing;
}

}  // namespace

int Runner::DefaultMaskThreads() {
  // Half the cores, at most 4: masks of 64 rows take about a millisecond on one thread.
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 4);
}

Runner::Runner(std::unique_ptr<Backend> backend, int mask_threads)
    : backend_(std::move(backend)), mask_filler_(mask_threads) {}

absl::Status Runner::FirstSight(const wv1::SequenceStep& step) {
  SeqState state;
  state.sampling = FromProto(step.sampling());
  const int32_t vocab = backend_->config().vocab_size;
  for (const wv1::LogitBias& b : step.sampling().logit_bias()) {
    if (b.token_id() < 0 || b.token_id() >= vocab || !std::isfinite(b.bias())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d: logit_bias for token %d (%g): ids must be in [0, %d) and "
                          "biases finite",
                          step.seq_id(), b.token_id(), b.bias(), vocab));
    }
    state.logit_bias.emplace_back(b.token_id(), b.bias());
  }
  std::sort(state.logit_bias.begin(), state.logit_bias.end());
  const bool constrained = step.sampling().has_constraint();
  if (state.sampling.has_penalties() || constrained) {
    if (step.history_size() != static_cast<int>(step.start_pos())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d has penalties or a constraint and starts at position %d, "
                          "but its first step carries %d history tokens",
                          step.seq_id(), step.start_pos(), step.history_size()));
    }
  }
  if (state.sampling.has_penalties()) {
    state.history = TokenHistory(static_cast<int32_t>(step.prompt_tokens()), /*tracked=*/true);
    RETURN_IF_ERROR(state.history.Record(
        0, {step.history().data(), static_cast<size_t>(step.history().size())}));
  }
  if (constrained) {
    const wv1::Constraint& c = step.sampling().constraint();
    if (vocabulary_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "sequence %d is constrained, but the scheduler sent no vocabulary", step.seq_id()));
    }
    for (int32_t id : c.end_token_ids()) {
      if (id < 0 || id >= vocabulary_->size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("sequence %d: end token %d is outside the vocabulary [0, %d)",
                            step.seq_id(), id, vocabulary_->size()));
      }
    }
    absl::StatusOr<std::shared_ptr<grammar::CompiledConstraint>> compiled =
        ConstraintFor(c.grammar());
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d: %s", step.seq_id(), compiled.status().message()));
    }
    state.end_tokens.assign(c.end_token_ids().begin(), c.end_token_ids().end());
    state.matcher.emplace(*std::move(compiled), state.end_tokens);
    state.prompt_tokens = static_cast<int32_t>(step.prompt_tokens());
    state.matched_to = state.prompt_tokens;
    Match(state, 0, {step.history().data(), static_cast<size_t>(step.history_size())});
  }
  seqs_[step.seq_id()] = std::move(state);
  return absl::OkStatus();
}

void Runner::SetVocabulary(const wv1::Vocabulary& vocabulary) {
  if (vocabulary.token_bytes_size() == 0) return;
  std::vector<std::string> bytes(vocabulary.token_bytes().begin(), vocabulary.token_bytes().end());
  std::vector<bool> excluded(bytes.size(), false);
  for (int32_t id : vocabulary.special_ids()) {
    if (id >= 0 && static_cast<size_t>(id) < excluded.size()) excluded[id] = true;
  }
  vocabulary_ = grammar::Vocabulary::Create(std::move(bytes), std::move(excluded));
  constraints_.clear();
}

absl::StatusOr<std::shared_ptr<grammar::CompiledConstraint>> Runner::ConstraintFor(
    const std::string& gbnf) {
  if (auto it = constraints_.find(gbnf); it != constraints_.end()) return it->second;
  ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> g, grammar::Grammar::FromGbnf(gbnf));
  if (constraints_.size() >= kMaxGrammars) constraints_.clear();  // live matchers hold theirs
  auto compiled = grammar::CompiledConstraint::Get(std::move(g), vocabulary_);
  constraints_.emplace(gbnf, compiled);
  return compiled;
}

void Runner::Match(SeqState& s, int32_t start, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t pos = start + static_cast<int32_t>(i);
    if (pos < s.matched_to) continue;  // prompt, or seen already
    s.matched_to = pos + 1;
    s.unmatched.emplace_back(pos, tokens[i]);
  }
}

void Runner::FeedAndFill(const MaskRow& row) {
  SeqState& s = *row.seq;
  for (const auto& [pos, token] : s.unmatched) {
    if (s.matcher->Finished()) continue;  // overlap: a step planned before the end was seen
    if (!s.matcher->Accept(token)) {
      // Masked sampling never produces such a token; a scheduler that sends one breaks the
      // constraint, and the sequence can only end.
      PAGODA_LOG(kError, "worker", "sequence %d: token %d at position %d breaks its constraint",
                 row.seq_id, token, pos);
      s.constraint_broken = true;
    }
  }
  s.unmatched.clear();
  if (s.constraint_broken) {
    std::fill(row.mask.begin(), row.mask.end(), 0u);
    for (int32_t id : s.end_tokens) row.mask[id / 32] |= 1u << (id % 32);
  } else {
    s.matcher->FillMask(row.mask);
  }
}

absl::Status Runner::RecordHistory(const wv1::SequenceStep& step, SeqState& s) {
  const std::span<const int32_t> input =
      step.feed_last_sampled() ? std::span<const int32_t>(&s.fed_token, 1)
                               : std::span<const int32_t>(step.tokens().data(), step.tokens_size());
  if (s.matcher) Match(s, static_cast<int32_t>(step.start_pos()), input);
  if (!s.sampling.has_penalties()) return absl::OkStatus();
  if (absl::Status st = s.history.Record(static_cast<int32_t>(step.start_pos()), input); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sequence %d: %s", step.seq_id(), st.message()));
  }
  return absl::OkStatus();
}

bool Runner::BuildAdjustments(const SeqState& s) {
  if (s.logit_bias.empty() && !s.sampling.has_penalties()) return false;
  s.history.Adjustments(s.sampling, s.logit_bias, &adjustments_);
  return true;
}

absl::Status Runner::Prepare(const wv1::IterationPlan& plan, std::vector<SeqInput>* batch,
                             std::vector<SampleInput>* samples) {
  RETURN_IF_ERROR(ApplyEdits(plan));
  // First every state change, then the batch: spans into seqs_ must not see a rehash.
  for (const wv1::SequenceStep& step : plan.steps()) {
    if (step.first_sight()) RETURN_IF_ERROR(FirstSight(step));
    auto it = seqs_.find(step.seq_id());
    if (it == seqs_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("plan %d names sequence %d, which this worker does not know",
                          plan.iteration(), step.seq_id()));
    }
    SeqState& s = it->second;
    if (step.feed_last_sampled()) {
      if (s.last_sampled < 0 || step.tokens_size() != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "sequence %d: feed_last_sampled needs a previous sample and no tokens", step.seq_id()));
      }
      s.fed_token = s.last_sampled;
    }
    RETURN_IF_ERROR(RecordHistory(step, s));
    for (uint32_t page : step.new_pages()) {
      if (page >= static_cast<uint32_t>(backend_->num_pages())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("sequence %d: page %d is outside the arena of %d pages", step.seq_id(),
                            page, backend_->num_pages()));
      }
      s.pages.push_back(static_cast<int32_t>(page));
    }
  }
  batch->reserve(plan.steps_size());
  adjustments_.clear();
  // Masks first, so that the spans into masks_ stay valid.
  const int32_t words = vocabulary_ ? vocabulary_->mask_words() : 0;
  size_t constrained = 0;
  for (const wv1::SequenceStep& step : plan.steps()) {
    if (step.sample() && seqs_.at(step.seq_id()).matcher) ++constrained;
  }
  masks_.resize(constrained * static_cast<size_t>(words));
  mask_rows_.clear();
  std::vector<std::pair<size_t, size_t>> ranges;  // each sample's slice of adjustments_
  for (const wv1::SequenceStep& step : plan.steps()) {
    SeqState& s = seqs_.at(step.seq_id());
    SeqInput in;
    in.tokens = step.feed_last_sampled()
                    ? std::span<const int32_t>(&s.fed_token, 1)
                    : std::span<const int32_t>(step.tokens().data(), step.tokens_size());
    in.start_pos = static_cast<int32_t>(step.start_pos());
    in.pages = s.pages;
    in.want_logits = step.sample();
    batch->push_back(in);
    if (!step.sample()) continue;
    const size_t begin = adjustments_.size();
    BuildAdjustments(s);
    ranges.emplace_back(begin, adjustments_.size() - begin);
    samples->push_back({s.sampling, step.sample_index(), {}, {}});
    if (s.matcher) {
      const std::span<uint32_t> mask(masks_.data() + mask_rows_.size() * words, words);
      mask_rows_.push_back({step.seq_id(), &s, mask});
      samples->back().allowed = mask;
    }
  }
  // adjustments_ no longer grows: the spans stay valid.
  for (size_t i = 0; i < samples->size(); ++i) {
    (*samples)[i].adjustments =
        std::span<const LogitAdjustment>(adjustments_).subspan(ranges[i].first, ranges[i].second);
  }
  return absl::OkStatus();
}

absl::Status Runner::ApplyEdits(const wv1::IterationPlan& plan) {
  RETURN_IF_ERROR(ValidateSwaps(plan));
  RETURN_IF_ERROR(Swap(plan.swap_out(), /*out=*/true));
  RETURN_IF_ERROR(CopyPages(plan));
  for (uint64_t id : plan.free_seq_ids()) seqs_.erase(id);
  return Swap(plan.swap_in(), /*out=*/false);
}

absl::Status Runner::ValidateSwaps(const wv1::IterationPlan& plan) const {
  const int swaps = plan.swap_out_size() + plan.swap_in_size();
  const uint32_t pages = static_cast<uint32_t>(backend_->num_pages());
  const uint32_t slots = static_cast<uint32_t>(backend_->num_swap_pages());
  if (swaps > 0 && slots == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("plan %d swaps %d pages out and %d in, but this worker has no swap space "
                        "(--swap-space-mib 0)",
                        plan.iteration(), plan.swap_out_size(), plan.swap_in_size()));
  }
  for (const auto* list : {&plan.swap_out(), &plan.swap_in()}) {
    for (int i = 0; i < list->size(); ++i) {
      const wv1::SwapCopy& c = list->Get(i);
      if (c.page() >= pages || c.slot() >= slots) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "plan %d swap_%s entry %d: page %d, slot %d; pages must be below %d and slots below %d",
            plan.iteration(), list == &plan.swap_out() ? "out" : "in", i, c.page(), c.slot(), pages,
            slots));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Runner::Swap(const google::protobuf::RepeatedPtrField<wv1::SwapCopy>& list, bool out) {
  if (list.empty()) return absl::OkStatus();
  swaps_.clear();
  for (const wv1::SwapCopy& c : list) {
    swaps_.push_back({static_cast<int32_t>(c.page()), static_cast<int32_t>(c.slot())});
  }
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(out ? backend_->SwapOut(swaps_) : backend_->SwapIn(swaps_));
  swapped_.seconds += absl::ToDoubleSeconds(absl::Now() - start);
  (out ? swapped_.out : swapped_.in) += static_cast<int32_t>(swaps_.size());
  return absl::OkStatus();
}

absl::Status Runner::MeasureSwap() {
  constexpr int kPages = 8, kRounds = 3;
  const int n = std::min({kPages, backend_->num_pages(), backend_->num_swap_pages()});
  swap_seconds_per_page_ = 0;
  if (n <= 0) return absl::OkStatus();
  std::vector<SwapCopy> copies;
  for (int i = 0; i < n; ++i) copies.push_back({i, i});
  absl::Duration total;
  for (int round = 0; round <= kRounds; ++round) {  // round 0 warms up, untimed
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(backend_->SwapOut(copies));
    RETURN_IF_ERROR(backend_->SwapIn(copies));
    if (round > 0) total += absl::Now() - start;
  }
  swap_seconds_per_page_ = absl::ToDoubleSeconds(total) / (kRounds * n);
  return absl::OkStatus();
}

absl::Status Runner::CopyPages(const wv1::IterationPlan& plan) {
  if (plan.page_copies().empty()) return absl::OkStatus();
  copies_.clear();
  for (const wv1::PageCopy& c : plan.page_copies()) {
    const uint32_t limit = static_cast<uint32_t>(backend_->num_pages());
    if (c.src() >= limit || c.dst() >= limit || c.src() == c.dst()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("plan %d copies page %d to page %d; ids must differ and be below %d",
                          plan.iteration(), c.src(), c.dst(), limit));
    }
    copies_.push_back({static_cast<int32_t>(c.src()), static_cast<int32_t>(c.dst())});
  }
  return backend_->CopyPages(copies_);
}

void Runner::Observe(StepTiming timing) const {
  if (!observer_) return;
  timing.swap_seconds = swapped_.seconds;
  timing.pages_swapped_out = swapped_.out;
  timing.pages_swapped_in = swapped_.in;
  observer_(timing);
}

wv1::IterationResult Runner::Execute(const wv1::IterationPlan& plan) {
  const absl::Time start = absl::Now();
  wv1::IterationResult result;
  result.set_iteration(plan.iteration());
  std::vector<SeqInput> batch;
  std::vector<SampleInput> samples;
  swapped_ = {};
  absl::Status status = Prepare(plan, &batch, &samples);
  result.set_swap_seconds(swapped_.seconds);
  const bool run = status.ok() && !batch.empty();
  if (run) {
    // The rows' sequences are left alone until their masks are complete:
    // ForwardSampleMasksPending returns only then, and the next change to seqs_ is the next
    // plan's. A backend that cannot overlap the masks gets them before its forward pass (and
    // its time).
    mask_filler_.Start(mask_rows_.size(), [this](size_t row) { FeedAndFill(mask_rows_[row]); });
    if (!backend_->OverlapsMasks()) mask_filler_.Wait();
  }
  const absl::Time t0 = absl::Now();
  tokens_.clear();
  const bool want_logprobs = std::any_of(samples.begin(), samples.end(), [](const SampleInput& s) {
    return s.params.top_logprobs >= 0;
  });
  if (run) {
    status = backend_->ForwardSampleMasksPending(
        batch, samples, &tokens_, want_logprobs ? &logprobs_ : nullptr, mask_filler_);
  }
  const absl::Time t1 = absl::Now();
  if (!status.ok()) {
    result.set_error(std::string(status.message()));
    Observe(Timing(batch, start, t0, t1, t1, /*ok=*/false));
    return result;
  }
  size_t row = 0;
  for (const wv1::SequenceStep& step : plan.steps()) {
    if (!step.sample()) continue;
    auto* out = result.add_sampled();
    out->set_seq_id(step.seq_id());
    out->set_token_id(tokens_[row]);
    if (samples[row].params.top_logprobs >= 0) {
      const SampledLogprobs& lp = logprobs_[row];
      out->set_logprob(lp.logprob);
      for (int k = 0; k < lp.num_top; ++k) {
        auto* top = out->add_top();
        top->set_token_id(lp.top_ids[k]);
        top->set_logprob(lp.top_logprobs[k]);
      }
    }
    ++row;
    seqs_.at(step.seq_id()).last_sampled = out->token_id();
  }
  const absl::Time t2 = absl::Now();
  result.set_forward_seconds(absl::ToDoubleSeconds(t1 - t0));
  result.set_sample_seconds(absl::ToDoubleSeconds(t2 - t1));
  StepTiming timing = Timing(batch, start, t0, t1, t2, /*ok=*/true);
  timing.has_parts = backend_->TakeForwardParts(&timing.parts);
  Observe(timing);
  return result;
}

}  // namespace pagoda::worker
