#include "tools/loadgen/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pagoda::loadgen {
namespace {

constexpr int kBarWidth = 24;
constexpr double kRedrawPeriodS = 0.1;

}  // namespace

Progress::Progress(std::string label, int total_requests, double duration_s, bool enabled,
                   std::FILE* out)
    : label_(std::move(label)),
      total_requests_(total_requests),
      duration_s_(duration_s),
      enabled_(enabled),
      out_(out),
      tty_(isatty(fileno(out)) != 0) {}

double Progress::Fraction(const ProgressState& state) const {
  if (total_requests_ > 0) return std::min(1.0, double(state.finished) / total_requests_);
  if (duration_s_ > 0) return std::min(1.0, state.elapsed_s / duration_s_);
  return 0;
}

std::string Progress::Line(const ProgressState& state) const {
  const int filled = static_cast<int>(Fraction(state) * kBarWidth);
  std::string bar = std::string(filled, '#') + std::string(kBarWidth - filled, '-');
  std::string count = total_requests_ > 0
                          ? absl::StrFormat("%4d/%d req", state.finished, total_requests_)
                          : absl::StrFormat("%4d req", state.finished);
  const double rate = state.elapsed_s > 0 ? state.output_tokens / state.elapsed_s : 0;
  std::string line = absl::StrFormat("%s [%s] %s  %3d in flight  %6.1f s  %7.1f tok/s", label_, bar,
                                     count, state.in_flight, state.elapsed_s, rate);
  if (state.failed > 0) absl::StrAppend(&line, "  ", state.failed, " failed");
  return line;
}

void Progress::Update(const ProgressState& state) {
  if (!enabled_) return;
  if (tty_) {
    if (state.elapsed_s - last_draw_s_ < kRedrawPeriodS) return;
    last_draw_s_ = state.elapsed_s;
    // Clear to the end of the line: a shorter line must not leave old characters behind.
    std::fprintf(out_, "\r%s\033[K", Line(state).c_str());
    std::fflush(out_);
    return;
  }
  const int tenths = static_cast<int>(Fraction(state) * 10);
  if (tenths <= printed_tenths_) return;
  printed_tenths_ = tenths;
  std::fprintf(out_, "%s\n", Line(state).c_str());
  std::fflush(out_);
}

void Progress::Finish(const ProgressState& state) {
  if (!enabled_) return;
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K\n", Line(state).c_str());
  } else if (printed_tenths_ < 10) {
    std::fprintf(out_, "%s\n", Line(state).c_str());
  }
  std::fflush(out_);
}

}  // namespace pagoda::loadgen
