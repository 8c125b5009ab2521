#include "tools/loadgen/plot.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace pagoda::loadgen {
namespace {

// gnuplot single-quoted string: a quote is written twice, nothing else is special.
std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

// gnuplot reads "NaN" as a missing point, so empty windows leave gaps instead of zeros.
std::string Num(double v, bool present = true) {
  return present ? absl::StrFormat("%.6g", v) : "NaN";
}

std::string Header(const std::string& png, const std::string& title) {
  return absl::StrCat("set terminal pngcairo size 1400,1000 font ',11'\n", "set output ",
                      Quote(png), "\n", "set multiplot layout 2,2 title ", Quote(title),
                      " font ',14'\n", "set grid\nset key top left\nset style data linespoints\n",
                      // Axes from zero: a zoomed axis makes small changes look large.
                      "set yrange [0:*]\n");
}

// Three percentile series from consecutive columns.
std::string PercentilePlot(const std::string& file, int x, int first_column) {
  return absl::StrFormat(
      "plot %s using %d:%d title 'p50' pt 7, '' using %d:%d title 'p90' pt 7, "
      "'' using %d:%d title 'p99' pt 7",
      file, x, first_column, x, first_column + 1, x, first_column + 2);
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

// Runs gnuplot on `script` with the data files in `dir`; returns gnuplot's complaint on failure.
absl::Status RunGnuplot(const std::filesystem::path& dir, const std::string& script) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed: apt-get install gnuplot-nox (scripts/install-deps.sh does)");
  }
  if (absl::Status s = WriteFile(dir / "plot.gp", script); !s.ok()) return s;
  // `dir` comes from mkdtemp: no characters the shell would interpret.
  const std::string command =
      absl::StrCat("gnuplot ", (dir / "plot.gp").string(), " 2>", (dir / "err.txt").string());
  if (std::system(command.c_str()) != 0) {
    std::ifstream err(dir / "err.txt");
    std::stringstream text;
    text << err.rdbuf();
    return absl::InternalError(absl::StrCat("gnuplot failed: ", text.str()));
  }
  return absl::OkStatus();
}

// A temporary directory removed when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "pagoda-bench-plot-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

// Columns: 1 concurrency, 2-4 TTFT p50/p90/p99, 5-7 TPOT p50/p90/p99, 8 ITL p99,
// 9-11 E2E p50/p90/p99 (ms), 12 output tokens/s, 13 requests/s, 14 goodput (req/s).
std::string SweepData(const std::vector<LevelResult>& runs) {
  std::string out =
      "# conc ttft50 ttft90 ttft99 tpot50 tpot90 tpot99 itl99 e2e50 e2e90 e2e99 "
      "out_tok_s req_s goodput\n";
  for (const LevelResult& r : runs) {
    const RunMetrics& m = r.metrics;
    std::vector<std::string> cols = {absl::StrCat(r.pacer.concurrency),
                                     Num(m.ttft_ms.p50, m.ttft_ms.count > 0),
                                     Num(m.ttft_ms.p90, m.ttft_ms.count > 0),
                                     Num(m.ttft_ms.p99, m.ttft_ms.count > 0),
                                     Num(m.tpot_ms.p50, m.tpot_ms.count > 0),
                                     Num(m.tpot_ms.p90, m.tpot_ms.count > 0),
                                     Num(m.tpot_ms.p99, m.tpot_ms.count > 0),
                                     Num(m.itl_ms.p99, m.itl_ms.count > 0),
                                     Num(m.e2e_ms.p50, m.e2e_ms.count > 0),
                                     Num(m.e2e_ms.p90, m.e2e_ms.count > 0),
                                     Num(m.e2e_ms.p99, m.e2e_ms.count > 0),
                                     Num(m.output_throughput),
                                     Num(m.request_throughput),
                                     Num(m.goodput, m.slo_given)};
    out += absl::StrJoin(cols, " ") + "\n";
  }
  return out;
}

// Columns: 1 concurrency, 2 continuous, 3 sequential, 4 static batching (padded), 5 static
// batching (shrinking) (output tokens/s).
std::string BaselineData(const std::vector<BaselineRow>& rows) {
  std::string out = "# conc continuous sequential static shrink\n";
  for (const BaselineRow& r : rows) {
    out += absl::StrCat(r.concurrency, " ", Num(r.continuous), " ", Num(r.sequential), " ",
                        Num(r.static_batch), " ", Num(r.static_shrinking), "\n");
  }
  return out;
}

// Columns: 1 window middle (s), 2 output tokens/s, 3 mean in flight, 4-5 TTFT p50/p99,
// 6-7 TPOT p50/p99 (ms).
std::string TimeSeriesData(const std::vector<TimeBucket>& buckets) {
  std::string out = "# t out_tok_s in_flight ttft50 ttft99 tpot50 tpot99\n";
  for (const TimeBucket& b : buckets) {
    const bool ttft = b.ttft_ms.count > 0;
    const bool tpot = b.tpot_ms.count > 0;
    out += absl::StrCat(Num(0.5 * (b.begin_s + b.end_s)), " ", Num(b.output_throughput), " ",
                        Num(b.mean_in_flight), " ", Num(b.ttft_ms.p50, ttft), " ",
                        Num(b.ttft_ms.p99, ttft), " ", Num(b.tpot_ms.p50, tpot), " ",
                        Num(b.tpot_ms.p99, tpot), "\n");
  }
  return out;
}

std::string SweepScript(const std::vector<LevelResult>& runs, bool with_baselines, bool with_slo,
                        const std::string& dir, const std::string& png, const std::string& title) {
  const std::string data = Quote(dir + "/sweep.dat");
  std::vector<std::string> tics;
  for (const LevelResult& r : runs) {
    tics.push_back(absl::StrFormat("\"%d\" %d", r.pacer.concurrency, r.pacer.concurrency));
  }
  // Some room around the first and last level, so their points and labels are not on the border.
  const double lo = runs.empty() ? 1 : runs.front().pacer.concurrency / 1.4;
  const double hi = runs.empty() ? 2 : runs.back().pacer.concurrency * 1.4;
  std::string s = Header(png, title);
  absl::StrAppend(&s, "set logscale x 2\nset xtics (", absl::StrJoin(tics, ", "), ")\n",
                  absl::StrFormat("set xrange [%g:%g]\n", lo, hi),
                  "set xlabel 'concurrency (requests in flight)'\nset ylabel 'ms'\n");
  absl::StrAppend(&s, "set title 'Time to first token'\n", PercentilePlot(data, 1, 2), "\n");
  absl::StrAppend(&s, "set title 'Time per output token (ITL p99 dashed)'\n",
                  PercentilePlot(data, 1, 5), ", '' using 1:8 title 'ITL p99' dt 2 pt 6\n");
  absl::StrAppend(&s, "set title 'End-to-end latency'\n", PercentilePlot(data, 1, 9), "\n");
  std::string settings =
      "set title 'Throughput'\nset ylabel 'output tokens/s'\nset key bottom right\n";
  std::string plot =
      absl::StrCat("plot ", data, " using 1:12 title 'continuous batching' pt 7 lw 2");
  if (with_baselines) {
    const std::string base = Quote(dir + "/baselines.dat");
    absl::StrAppend(&plot, ", ", base, " using 1:3 title 'sequential (one at a time)' pt 5, ", base,
                    " using 1:4 title 'static batching (padded)' pt 9, ", base,
                    " using 1:5 title 'static batching (shrinking)' pt 11");
  }
  if (with_slo) {
    absl::StrAppend(&settings, "set y2label 'goodput (req/s)'\nset y2tics\n");
    absl::StrAppend(&plot, ", ", data, " using 1:14 axes x1y2 title 'goodput (right axis)' dt 3");
  }
  absl::StrAppend(&s, settings, plot);
  absl::StrAppend(&s, "\nunset multiplot\n");
  return s;
}

std::string TimeSeriesScript(const std::string& dir, const std::string& png,
                             const std::string& title) {
  const std::string data = Quote(dir + "/series.dat");
  std::string s = Header(png, title);
  absl::StrAppend(&s, "set xlabel 'time since the run began (s)'\n");
  absl::StrAppend(&s, "set title 'Output throughput'\nset ylabel 'tokens/s'\n", "plot ", data,
                  " using 1:2 title 'output tokens/s' pt 7\n");
  absl::StrAppend(&s, "set title 'Requests in flight'\nset ylabel 'requests'\n", "plot ", data,
                  " using 1:3 title 'mean in flight' pt 7\n");
  absl::StrAppend(&s, "set ylabel 'ms'\nset title 'TTFT of requests sent in each window'\n",
                  "plot ", data, " using 1:4 title 'p50' pt 7, '' using 1:5 title 'p99' pt 7\n");
  absl::StrAppend(&s, "set title 'TPOT of requests sent in each window'\n", "plot ", data,
                  " using 1:6 title 'p50' pt 7, '' using 1:7 title 'p99' pt 7\n");
  absl::StrAppend(&s, "unset multiplot\n");
  return s;
}

absl::Status PlotSweep(const std::vector<LevelResult>& runs,
                       const std::vector<BaselineRow>& baselines, bool with_slo,
                       const std::string& png, const std::string& title) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a temporary directory");
  if (absl::Status s = WriteFile(dir.path() / "sweep.dat", SweepData(runs)); !s.ok()) return s;
  if (absl::Status s = WriteFile(dir.path() / "baselines.dat", BaselineData(baselines)); !s.ok()) {
    return s;
  }
  return RunGnuplot(
      dir.path(), SweepScript(runs, !baselines.empty(), with_slo, dir.path().string(), png, title));
}

absl::Status PlotOverTime(const LevelResult& run, const std::string& png,
                          const std::string& title) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a temporary directory");
  // About two requests per window, between 5 and 60 windows: enough points to see a trend,
  // enough requests per window for its percentiles to mean something.
  const int buckets = std::clamp(static_cast<int>(run.records.size()) / 2, 5, 60);
  double end_s = 0;
  for (const RequestRecord& r : run.records) end_s = std::max(end_s, r.end_s);
  const std::string data = TimeSeriesData(BuildTimeSeries(run.records, end_s, buckets));
  if (absl::Status s = WriteFile(dir.path() / "series.dat", data); !s.ok()) return s;
  return RunGnuplot(dir.path(), TimeSeriesScript(dir.path().string(), png, title));
}

}  // namespace pagoda::loadgen
