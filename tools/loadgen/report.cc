#include "tools/loadgen/report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pagoda::loadgen {
namespace {

using nlohmann::json;

constexpr int kTableWidth = 72;

std::string Rule(char c) { return std::string(kTableWidth, c) + "\n"; }

std::string Row(const std::string& name, const std::string& value) {
  return absl::StrFormat("%-40s %s\n", name, value);
}

std::string LatencyRow(const std::string& name, const Summary& s) {
  if (s.count == 0) return absl::StrFormat("%-10s %12s\n", name, "n/a");
  return absl::StrFormat("%-10s %12.2f %12.2f %12.2f %12.2f\n", name, s.mean, s.p50, s.p90, s.p99);
}

std::string GoodputText(const RunMetrics& m, const Slo& slo) {
  if (!m.slo_given) return "n/a (no --slo-ttft-ms / --slo-tpot-ms / --slo-e2e-ms given)";
  const double share = m.completed > 0 ? 100.0 * m.good_requests / m.completed : 0;
  return absl::StrFormat("%.2f  (%d requests, %.1f%%, meet %s)", m.goodput, m.good_requests, share,
                         slo.Describe());
}

json SummaryJson(const Summary& s) {
  return json{{"count", s.count}, {"mean", s.mean}, {"p50", s.p50},
              {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

json MetricsJson(const RunMetrics& m) {
  json j{{"completed", m.completed},
         {"failed", m.failed},
         {"duration_s", m.duration_s},
         {"input_tokens", m.input_tokens},
         {"output_tokens", m.output_tokens},
         {"request_throughput", m.request_throughput},
         {"output_throughput", m.output_throughput},
         {"total_token_throughput", m.total_throughput},
         {"ttft_ms", SummaryJson(m.ttft_ms)},
         {"tpot_ms", SummaryJson(m.tpot_ms)},
         {"itl_ms", SummaryJson(m.itl_ms)},
         {"e2e_ms", SummaryJson(m.e2e_ms)}};
  // null, not 0, when no SLO was given: 0 would read as "nothing met the SLO".
  j["goodput"] = m.slo_given ? json(m.goodput) : json(nullptr);
  j["good_requests"] = m.slo_given ? json(m.good_requests) : json(nullptr);
  return j;
}

json OptionalMs(const std::optional<double>& seconds) {
  return seconds ? json(*seconds * 1e3) : json(nullptr);
}

json RequestJson(const RequestRecord& r) {
  const RequestMetrics m = ComputeRequestMetrics(r);
  json j{{"index", r.index},
         {"ok", r.ok},
         {"prompt_tokens", r.prompt_tokens},
         {"expected_output_tokens", r.expected_output_tokens},
         {"output_tokens", r.output_tokens},
         {"start_s", r.start_s},
         {"ttft_ms", OptionalMs(m.ttft_s)},
         {"tpot_ms", OptionalMs(m.tpot_s)},
         {"e2e_ms", m.e2e_s * 1e3}};
  if (r.padding_tokens > 0) j["padding_tokens"] = r.padding_tokens;
  if (!r.ok) j["error"] = r.error;
  return j;
}

json LoadJson(const PacerOptions& p) {
  json j{{"shape", LoadShapeName(p.shape)}};
  if (p.shape == LoadShape::kClosed || p.shape == LoadShape::kStaticBatch) {
    j["concurrency"] = p.concurrency;
    if (p.shape == LoadShape::kStaticBatch) j["padded"] = p.pad_waves;
  } else {
    j["max_in_flight"] = p.max_in_flight;
    // JSON has no infinity: a burst says so by its shape.
    if (p.shape == LoadShape::kPoisson) j["request_rate"] = p.request_rate;
  }
  if (p.duration_s > 0) {
    j["duration_s"] = p.duration_s;
  } else {
    j["num_requests"] = p.num_requests;
  }
  return j;
}

json LengthJson(const LengthSpec& s) {
  json j{{"dist", LengthDistName(s.dist)}, {"mean", s.mean}};
  if (s.dist == LengthDist::kUniform) j["range_ratio"] = s.range_ratio;
  if (s.dist == LengthDist::kShareGpt) {
    j["sigma"] = s.sigma;
    j["min"] = s.min;
    j["max"] = s.max > 0 ? s.max : 8 * s.mean;
  }
  return j;
}

json ConfigJson(const BenchReport& r) {
  json workload{{"input", LengthJson(r.workload.input)},
                {"output", LengthJson(r.workload.output)},
                {"prompts", PromptKindName(r.workload.prompts)},
                {"seed", r.workload.seed}};
  if (r.workload.prompts == PromptKind::kSharedPrefix) {
    workload["shared_prefix_len"] = r.workload.shared_prefix_len;
    workload["prefix_groups"] = r.workload.prefix_groups;
  }
  if (r.workload.prompts == PromptKind::kMultiTurn) {
    workload["conversations"] = r.workload.conversations;
    workload["turns"] = r.workload.turns;
  }
  json slo = json::object();
  if (r.slo.ttft_ms > 0) slo["ttft_ms"] = r.slo.ttft_ms;
  if (r.slo.tpot_ms > 0) slo["tpot_ms"] = r.slo.tpot_ms;
  if (r.slo.e2e_ms > 0) slo["e2e_ms"] = r.slo.e2e_ms;
  return json{{"server", r.server},
              {"model", r.model},
              {"workload", workload},
              {"sampling",
               {{"temperature", r.sampling.temperature},
                {"top_k", r.sampling.top_k},
                {"top_p", r.sampling.top_p},
                {"ignore_eos", r.sampling.ignore_eos}}},
              {"slo", slo},
              {"warmup_requests", r.warmup_requests}};
}

}  // namespace

std::vector<std::string> DistinctErrors(const std::vector<RequestRecord>& records, int limit) {
  std::vector<std::string> out;
  for (const RequestRecord& r : records) {
    if (r.ok || static_cast<int>(out.size()) >= limit) continue;
    if (std::find(out.begin(), out.end(), r.error) == out.end()) out.push_back(r.error);
  }
  return out;
}

std::string DescribeLoad(const PacerOptions& p) {
  std::string load;
  switch (p.shape) {
    case LoadShape::kClosed:
      load =
          absl::StrCat("closed loop, ", p.concurrency, p.concurrency == 1 ? " stream" : " streams");
      break;
    case LoadShape::kStaticBatch:
      load = absl::StrCat("static batches of ", p.concurrency,
                          p.pad_waves ? ", padded to the longest" : ", shrinking");
      break;
    case LoadShape::kPoisson:
      load = absl::StrFormat("poisson %.3g req/s", p.request_rate);
      break;
    case LoadShape::kBurst:
      load = "all at once";
      break;
  }
  const bool open = p.shape == LoadShape::kPoisson || p.shape == LoadShape::kBurst;
  if (open && p.max_in_flight > 0)
    absl::StrAppend(&load, ", at most ", p.max_in_flight, " in flight");
  return load;
}

std::string FormatRunTable(const LevelResult& run, const Slo& slo) {
  const RunMetrics& m = run.metrics;
  std::string title = absl::StrCat(" pagoda-bench: ", run.role, ", ", DescribeLoad(run.pacer), " ");
  const int pad = std::max(0, kTableWidth - static_cast<int>(title.size()));
  std::string out = std::string(pad / 2, '=') + title + std::string(pad - pad / 2, '=') + "\n";
  out += Row("Successful requests:", absl::StrCat(m.completed));
  out += Row("Failed requests:", absl::StrCat(m.failed));
  for (const std::string& e : run.errors) out += Row("  error:", e);
  if (run.waves > 0) out += Row("Waves (static batching):", absl::StrCat(run.waves));
  int64_t padding = 0;
  for (const RequestRecord& r : run.records) padding += r.padding_tokens;
  if (padding > 0) out += Row("Padding tokens (not counted):", absl::StrCat(padding));
  out += Row("Benchmark duration (s):", absl::StrFormat("%.2f", m.duration_s));
  out += Row("Total input tokens:", absl::StrCat(m.input_tokens));
  out += Row("Total output tokens:", absl::StrCat(m.output_tokens));
  out += Row("Request throughput (req/s):", absl::StrFormat("%.2f", m.request_throughput));
  out += Row("Output token throughput (tok/s):", absl::StrFormat("%.1f", m.output_throughput));
  out += Row("Total token throughput (tok/s):", absl::StrFormat("%.1f", m.total_throughput));
  out += Row("Goodput (req/s):", GoodputText(m, slo));
  out += Rule('-');
  out += absl::StrFormat("%-10s %12s %12s %12s %12s\n", "(ms)", "mean", "p50", "p90", "p99");
  out += LatencyRow("TTFT", m.ttft_ms);
  out += LatencyRow("TPOT", m.tpot_ms);
  out += LatencyRow("ITL", m.itl_ms);
  out += LatencyRow("E2E", m.e2e_ms);
  out += Rule('=');
  return out;
}

std::string FormatSweepTable(const std::vector<LevelResult>& runs, const Slo& slo) {
  std::string out = absl::StrFormat("%-13s %5s %7s %9s %8s %9s %9s %9s %9s %9s\n", "run", "conc",
                                    "req/s", "out tok/s", "goodput", "TTFT p50", "TTFT p99",
                                    "TPOT p50", "TPOT p99", "E2E p99");
  for (const LevelResult& r : runs) {
    const RunMetrics& m = r.metrics;
    const std::string goodput = m.slo_given ? absl::StrFormat("%.2f", m.goodput) : "-";
    const int conc = r.pacer.shape == LoadShape::kClosed || r.pacer.shape == LoadShape::kStaticBatch
                         ? r.pacer.concurrency
                         : r.pacer.max_in_flight;
    out += absl::StrFormat("%-13s %5d %7.2f %9.1f %8s %9.1f %9.1f %9.2f %9.2f %9.1f\n", r.role,
                           conc, m.request_throughput, m.output_throughput, goodput, m.ttft_ms.p50,
                           m.ttft_ms.p99, m.tpot_ms.p50, m.tpot_ms.p99, m.e2e_ms.p99);
  }
  out += "(latencies in ms";
  if (slo.Any()) absl::StrAppend(&out, "; goodput in req/s meeting ", slo.Describe());
  out += ")\n";
  return out;
}

std::string FormatBaselineTable(const std::vector<BaselineRow>& rows) {
  std::string out =
      "Output tokens/s: continuous batching vs. one at a time (sequential) and static batching\n"
      "(static: padded to each wave's longest output; shrink: finished requests leave the wave)\n";
  out += absl::StrFormat("%11s %11s %11s %11s %11s %16s %12s %12s\n", "concurrency", "continuous",
                         "sequential", "static", "shrink", "cont/sequential", "cont/static",
                         "cont/shrink");
  for (const BaselineRow& r : rows) {
    out += absl::StrFormat("%11d %11.1f %11.1f %11.1f %11.1f %15.2fx %11.2fx %11.2fx\n",
                           r.concurrency, r.continuous, r.sequential, r.static_batch,
                           r.static_shrinking, r.VsSequential(), r.VsStatic(), r.VsShrinking());
  }
  return out;
}

std::string RenderJson(const BenchReport& report) {
  json runs = json::array();
  for (const LevelResult& r : report.runs) {
    json requests = json::array();
    for (const RequestRecord& rec : r.records) requests.push_back(RequestJson(rec));
    json run{{"role", r.role},
             {"load", LoadJson(r.pacer)},
             {"metrics", MetricsJson(r.metrics)},
             {"errors", r.errors},
             {"requests", requests}};
    if (r.waves > 0) run["waves"] = r.waves;
    runs.push_back(std::move(run));
  }
  json baselines = json::array();
  for (const BaselineRow& b : report.baselines) {
    baselines.push_back({{"concurrency", b.concurrency},
                         {"continuous_output_throughput", b.continuous},
                         {"sequential_output_throughput", b.sequential},
                         {"static_batch_output_throughput", b.static_batch},
                         {"static_shrinking_output_throughput", b.static_shrinking},
                         {"continuous_over_static_shrinking", b.VsShrinking()},
                         {"continuous_over_sequential", b.VsSequential()},
                         {"continuous_over_static", b.VsStatic()}});
  }
  json doc{{"config", ConfigJson(report)}, {"runs", runs}, {"baselines", baselines}};
  return doc.dump(2) + "\n";
}

}  // namespace pagoda::loadgen
