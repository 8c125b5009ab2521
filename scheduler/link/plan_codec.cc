#include "scheduler/link/plan_codec.h"

#include <cmath>

namespace pagoda::scheduler {

void EncodePlan(const Plan& plan, pagoda::worker::v1::IterationPlan* out) {
  out->set_iteration(plan.iteration);
  out->mutable_free_seq_ids()->Add(plan.free_seq_ids.begin(), plan.free_seq_ids.end());
  for (const SwapCopy& swap : plan.swap_out) {
    auto* c = out->add_swap_out();
    c->set_page(static_cast<uint32_t>(swap.page));
    c->set_slot(static_cast<uint32_t>(swap.slot));
  }
  for (const SwapCopy& swap : plan.swap_in) {
    auto* c = out->add_swap_in();
    c->set_page(static_cast<uint32_t>(swap.page));
    c->set_slot(static_cast<uint32_t>(swap.slot));
  }
  for (const PageCopy& copy : plan.page_copies) {
    auto* c = out->add_page_copies();
    c->set_src(static_cast<uint32_t>(copy.src));
    c->set_dst(static_cast<uint32_t>(copy.dst));
  }
  out->mutable_steps()->Reserve(static_cast<int>(plan.steps.size()));
  for (const PlanStep& step : plan.steps) {
    auto* s = out->add_steps();
    s->set_seq_id(step.seq_id);
    s->mutable_tokens()->Add(step.tokens.begin(), step.tokens.end());
    s->set_feed_last_sampled(step.feed_last_sampled);
    s->set_start_pos(static_cast<uint32_t>(step.start_pos));
    for (PageId p : step.new_pages) s->add_new_pages(static_cast<uint32_t>(p));
    s->set_sample(step.sample);
    s->set_sample_index(static_cast<uint32_t>(step.sample_index));
    s->set_first_sight(step.first_sight);
    if (step.first_sight) {
      auto* sp = s->mutable_sampling();
      sp->set_temperature(step.sampling.temperature);
      sp->set_top_k(step.sampling.top_k);
      sp->set_top_p(step.sampling.top_p);
      sp->set_seed(step.sampling.seed);
      sp->set_min_p(step.sampling.min_p);
      sp->set_presence_penalty(step.sampling.presence_penalty);
      sp->set_frequency_penalty(step.sampling.frequency_penalty);
      sp->set_repetition_penalty(step.sampling.repetition_penalty);
      for (const auto& [token, bias] : step.sampling.logit_bias) {
        auto* b = sp->add_logit_bias();
        b->set_token_id(token);
        b->set_bias(bias);
      }
      sp->set_logprobs(step.sampling.logprobs);
      sp->set_top_logprobs(static_cast<uint32_t>(step.sampling.top_logprobs));
      if (const Constraint* c = step.sampling.constraint.get()) {
        auto* out_c = sp->mutable_constraint();
        out_c->set_grammar(c->grammar);
        out_c->mutable_end_token_ids()->Add(c->end_token_ids.begin(), c->end_token_ids.end());
      }
      s->set_prompt_tokens(static_cast<uint32_t>(step.prompt_tokens));
      s->mutable_history()->Add(step.history.begin(), step.history.end());
    }
  }
}

std::vector<SampledToken> DecodeSampled(const pagoda::worker::v1::IterationResult& result) {
  std::vector<SampledToken> out;
  out.reserve(result.sampled_size());
  for (const auto& t : result.sampled()) {
    SampledToken& sampled = out.emplace_back();
    sampled.seq_id = t.seq_id();
    sampled.token = t.token_id();
    if (!t.has_logprob()) continue;
    TokenLogprob& lp = sampled.logprob.emplace();
    lp.logprob = t.logprob();
    lp.top.reserve(t.top_size());
    for (const auto& top : t.top()) lp.top.push_back({top.token_id(), top.logprob()});
  }
  return out;
}

namespace {

// A measured duration, or 0 when it is none (negative, NaN or infinite).
double Seconds(double value) { return std::isfinite(value) && value > 0 ? value : 0; }

}  // namespace

StepTimes DecodeStepTimes(const pagoda::worker::v1::IterationResult& result) {
  StepTimes times;
  times.forward_seconds = Seconds(result.forward_seconds()) + Seconds(result.sample_seconds());
  times.swap_seconds = Seconds(result.swap_seconds());
  return times;
}

}  // namespace pagoda::scheduler
