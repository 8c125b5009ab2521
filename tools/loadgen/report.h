// Report: the tables printed at the end of a benchmark and the --json document.
//
// A benchmark is a list of runs (one per concurrency level, plus baseline runs) and, with
// --baselines, one comparison row per level. Tables are for people (stdout, fixed columns);
// the JSON carries every number in the tables plus each request's own measurements.
#pragma once

#include <string>
#include <vector>

#include "tools/loadgen/pacer.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

namespace pagoda::loadgen {

// One measured run.
struct LevelResult {
  std::string role;  // "continuous", "static-batch", "static-shrink" or "sequential" (baselines)
  PacerOptions pacer;
  RunMetrics metrics;
  int waves = 0;                       // static batching
  std::vector<RequestRecord> records;  // by request index
  std::vector<std::string> errors;     // distinct error messages, the first few
};

// Output tokens/s of continuous batching against the baselines at one concurrency level.
struct BaselineRow {
  int concurrency = 0;
  double continuous = 0;  // output tokens/s
  double sequential = 0;  // the same requests one at a time
  // Waves of `concurrency`, each waiting for its slowest request: padded (every request of a
  // wave runs as long as its longest, as in a fixed-shape batch), and shrinking (a finished
  // request leaves the batch).
  double static_batch = 0;
  double static_shrinking = 0;

  double VsSequential() const { return sequential > 0 ? continuous / sequential : 0; }
  double VsStatic() const { return static_batch > 0 ? continuous / static_batch : 0; }
  double VsShrinking() const { return static_shrinking > 0 ? continuous / static_shrinking : 0; }
};

struct BenchReport {
  std::string server;
  std::string model;  // name and fingerprint from GetModelInfo
  WorkloadOptions workload;
  SamplingOptions sampling;
  Slo slo;
  int warmup_requests = 0;
  std::vector<LevelResult> runs;
  std::vector<BaselineRow> baselines;
};

// Distinct error messages of failed records, at most `limit`.
std::vector<std::string> DistinctErrors(const std::vector<RequestRecord>& records, int limit);

// "closed loop, 16 streams", "static batches of 16", "poisson 4 req/s, at most 8 in flight".
std::string DescribeLoad(const PacerOptions& pacer);

// The full table of one run.
std::string FormatRunTable(const LevelResult& run, const Slo& slo);
// One line per run: throughput and latency percentiles side by side.
std::string FormatSweepTable(const std::vector<LevelResult>& runs, const Slo& slo);
std::string FormatBaselineTable(const std::vector<BaselineRow>& rows);

std::string RenderJson(const BenchReport& report);

}  // namespace pagoda::loadgen
