// StepModel: what a worker's iteration costs, learned from the iterations it ran.
//
// A step's forward time is modelled as  t = fixed + per_token * tokens + per_attention * work,
// where `tokens` is the plan's input tokens and `work` its attention work: the sum over its steps
// of chunk * (start_pos + chunk), in thousands (the key positions each new token reads, the
// quadratic part of a prefill). The three coefficients are the least-squares fit of the observed
// steps with exponential forgetting (each observation's weight decays by kForget per new one),
// with a small ridge term so that a worker whose steps all look alike (decodes only, a synthetic
// worker with a fixed step time) still gives a well-defined fit; slopes are never negative (the
// best fit among those with slopes >= 0). Swap copies are timed separately, as seconds per page.
// A fit is only as good as the steps it saw: until kMinFitSteps steps are observed a step is
// predicted as the decayed mean step time; features beyond the largest observed are clipped to
// it, and a step of more tokens than any observed is scaled linearly from the origin (an upper
// bound when the fixed cost is positive): the fit is never extrapolated.
//
// The scheduler uses it for two predictions: a request's time to first token (admission by
// predicted wait) and the cost of recomputing a preempted sequence against swapping it.
// Pure arithmetic: no clock, no randomness.
#pragma once

#include <array>
#include <cstdint>

namespace pagoda::scheduler {

class StepModel {
 public:
  static constexpr double kForget = 0.98;
  static constexpr int64_t kMinFitSteps = 16;

  // One executed step: `tokens` input tokens, `work` attention work (see above), `seconds`.
  void Observe(double tokens, double work, double seconds);
  // One step's swap copies: `pages` pages (out and in together) took `seconds`.
  void ObserveSwap(int64_t pages, double seconds);
  // The worker's own start-up measurement of one page out and back in.
  void SetSwapPrior(double seconds_per_page);

  bool has_steps() const { return steps_ > 0; }
  bool fitted() const { return steps_ >= kMinFitSteps; }
  int64_t steps() const { return steps_; }
  // Predicted seconds of a step with `tokens` input tokens and `work` attention work.
  double StepSeconds(double tokens, double work) const;
  // Seconds one page takes out and back in; 0 when never measured.
  double swap_seconds_per_page() const { return swap_seconds_per_page_; }
  // The fitted coefficients: fixed, per token, per unit of attention work; all 0 before
  // kMinFitSteps steps.
  std::array<double, 3> coefficients() const;
  // The decayed mean of the observed step times.
  double mean_seconds() const { return steps_ == 0 ? 0 : xy_[0] / xx_[0][0]; }

  // Attention work of a chunk of `chunk` tokens starting at `start_pos`.
  static double Work(int64_t start_pos, int64_t chunk) {
    return static_cast<double>(chunk) * static_cast<double>(start_pos + chunk) / 1000.0;
  }

 private:
  std::array<std::array<double, 3>, 3> xx_{};  // decayed sum of x x^T, x = (1, tokens, work)
  std::array<double, 3> xy_{};                 // decayed sum of x * seconds
  double yy_ = 0;                              // decayed sum of seconds^2
  int64_t steps_ = 0;
  double max_tokens_ = 0;  // the largest features observed
  double max_work_ = 0;
  double swap_seconds_per_page_ = 0;
  double swap_weight_ = 0;  // decayed count of swap observations
};

}  // namespace pagoda::scheduler
