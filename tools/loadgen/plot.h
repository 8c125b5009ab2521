// Plot: PNG figures of a benchmark, drawn by gnuplot (Debian package gnuplot-nox).
//
// Two figures, each a 2x2 grid:
//  * a sweep (several concurrency levels): TTFT, TPOT (+ ITL p99) and E2E percentiles, and
//    output throughput (with the sequential and static-batching baselines when measured, and
//    goodput when SLOs were given) against concurrency on a log2 axis;
//  * a single run: output throughput, requests in flight, and TTFT / TPOT percentiles of the
//    requests sent in each time window, over the run's time.
// The data files and script are written to a temporary directory that is removed afterwards;
// the script text is built by pure functions so tests can read it without gnuplot.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/loadgen/report.h"

namespace pagoda::loadgen {

// Whitespace-separated columns, one line per run (see plot.cc for the column list).
std::string SweepData(const std::vector<LevelResult>& runs);
std::string BaselineData(const std::vector<BaselineRow>& rows);
std::string TimeSeriesData(const std::vector<TimeBucket>& buckets);

// gnuplot scripts reading the data files from `dir`.
std::string SweepScript(const std::vector<LevelResult>& runs, bool with_baselines, bool with_slo,
                        const std::string& dir, const std::string& png, const std::string& title);
std::string TimeSeriesScript(const std::string& dir, const std::string& png,
                             const std::string& title);

// Draws the sweep figure (runs: the continuous runs, one per level, ascending concurrency).
absl::Status PlotSweep(const std::vector<LevelResult>& runs,
                       const std::vector<BaselineRow>& baselines, bool with_slo,
                       const std::string& png, const std::string& title);
// Draws the over-time figure of one run.
absl::Status PlotOverTime(const LevelResult& run, const std::string& png, const std::string& title);

}  // namespace pagoda::loadgen
