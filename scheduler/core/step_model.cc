#include "scheduler/core/step_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagoda::scheduler {
namespace {

using Matrix = std::array<std::array<double, 3>, 3>;
using Vector = std::array<double, 3>;

// Solves a x = b for a symmetric positive definite 3x3 a (Gaussian elimination with partial
// pivoting); false when a is singular.
bool Solve(Matrix a, Vector b, Vector* x) {
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    if (std::abs(a[pivot][col]) < 1e-300) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (int r = col + 1; r < 3; ++r) {
      const double f = a[r][col] / a[col][col];
      for (int c = col; c < 3; ++c) a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  for (int r = 2; r >= 0; --r) {
    double v = b[r];
    for (int c = r + 1; c < 3; ++c) v -= a[r][c] * (*x)[c];
    (*x)[r] = v / a[r][r];
  }
  return true;
}

}  // namespace

void StepModel::Observe(double tokens, double work, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return;
  const Vector x{1.0, tokens, work};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xx_[i][j] = xx_[i][j] * kForget + x[i] * x[j];
    xy_[i] = xy_[i] * kForget + x[i] * seconds;
  }
  yy_ = yy_ * kForget + seconds * seconds;
  ++steps_;
  max_tokens_ = std::max(max_tokens_, tokens);
  max_work_ = std::max(max_work_, work);
}

void StepModel::ObserveSwap(int64_t pages, double seconds) {
  if (pages <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double per_page = seconds / static_cast<double>(pages);
  swap_weight_ = swap_weight_ * kForget + 1;
  swap_seconds_per_page_ += (per_page - swap_seconds_per_page_) / swap_weight_;
}

void StepModel::SetSwapPrior(double seconds_per_page) {
  if (!(seconds_per_page > 0) || !std::isfinite(seconds_per_page)) return;
  swap_seconds_per_page_ = seconds_per_page;
  swap_weight_ = 1;
}

std::array<double, 3> StepModel::coefficients() const {
  if (steps_ < kMinFitSteps) return {0, 0, 0};
  // Non-negative slopes: the least-squares fit over each subset of the two slopes (the fixed
  // cost always in), keeping the feasible fit (slopes >= 0) with the least squared error.
  // Ridge: a pull towards 0 of each slope, relative to its feature's scale, so that features
  // that never varied get no weight instead of an arbitrary one.
  Vector best{mean_seconds(), 0, 0};
  double best_error = std::numeric_limits<double>::infinity();
  for (int subset = 0; subset < 4; ++subset) {
    Matrix a = xx_;
    Vector b = xy_;
    for (int i = 1; i < 3; ++i) {
      a[i][i] += 1e-6 * std::max(a[i][i], 1e-12);
      if (subset & i) continue;  // slope i is in the fit
      for (int j = 0; j < 3; ++j) a[i][j] = a[j][i] = j == i ? 1 : 0;
      b[i] = 0;
    }
    Vector x{0, 0, 0};
    if (!Solve(a, b, &x) || x[1] < 0 || x[2] < 0) continue;
    // Squared error: yy - 2 x.xy + x' XX x.
    double error = yy_;
    for (int i = 0; i < 3; ++i) {
      error -= 2 * x[i] * xy_[i];
      for (int j = 0; j < 3; ++j) error += x[i] * xx_[i][j] * x[j];
    }
    if (error < best_error - 1e-15) {
      best = x;
      best_error = error;
    }
  }
  best[0] = std::max(0.0, best[0]);
  return best;
}

double StepModel::StepSeconds(double tokens, double work) const {
  if (steps_ < kMinFitSteps) return mean_seconds();
  const std::array<double, 3> c = coefficients();
  const double t = std::min(tokens, max_tokens_), w = std::min(work, max_work_);
  const double seconds = c[0] + c[1] * t + c[2] * w;
  // Beyond the observed range: scale the largest observed step (see the header).
  return max_tokens_ > 0 && tokens > max_tokens_ ? seconds * tokens / max_tokens_ : seconds;
}

}  // namespace pagoda::scheduler
