// Progress: one status line on stderr while a run goes.
//
// On a terminal the line redraws in place (at most ten times a second); otherwise (a log file,
// CI) a line is printed at every tenth of the run, so logs stay short. stdout is untouched: it
// carries the result tables.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace pagoda::loadgen {

struct ProgressState {
  int finished = 0;
  int failed = 0;
  int in_flight = 0;
  int64_t output_tokens = 0;
  double elapsed_s = 0;
};

class Progress {
 public:
  // `total_requests` > 0: progress is finished / total; else `duration_s` > 0: elapsed / duration.
  Progress(std::string label, int total_requests, double duration_s, bool enabled,
           std::FILE* out = stderr);

  void Update(const ProgressState& state);
  // Draws the final state and ends the line.
  void Finish(const ProgressState& state);

  // The line for a state (without "\r"), e.g.
  // "c=4 [########------------]  40/100 req  4 in flight  12.3 s  845 tok/s".
  std::string Line(const ProgressState& state) const;

 private:
  double Fraction(const ProgressState& state) const;

  std::string label_;
  int total_requests_;
  double duration_s_;
  bool enabled_;
  std::FILE* out_;
  bool tty_;
  int printed_tenths_ = -1;  // not a terminal: the last tenth printed
  double last_draw_s_ = -1;
};

}  // namespace pagoda::loadgen
