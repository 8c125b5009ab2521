#include "tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pagoda::loadgen {

RequestMetrics ComputeRequestMetrics(const RequestRecord& record) {
  RequestMetrics m;
  m.e2e_s = record.end_s - record.start_s;
  if (record.chunks.empty()) return m;
  m.ttft_s = record.chunks.front().time_s - record.start_s;
  if (record.output_tokens > 1) {
    m.tpot_s = (m.e2e_s - *m.ttft_s) / (record.output_tokens - 1);
  }
  for (size_t i = 1; i < record.chunks.size(); ++i) {
    m.itl_s.push_back(record.chunks[i].time_s - record.chunks[i - 1].time_s);
  }
  return m;
}

double Percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(below);
  return sorted[below] + frac * (sorted[above] - sorted[below]);
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / s.count;
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.max = values.back();
  return s;
}

std::string Slo::Describe() const {
  std::vector<std::string> parts;
  if (ttft_ms > 0) parts.push_back(absl::StrCat("TTFT <= ", ttft_ms, " ms"));
  if (tpot_ms > 0) parts.push_back(absl::StrCat("TPOT <= ", tpot_ms, " ms"));
  if (e2e_ms > 0) parts.push_back(absl::StrCat("E2E <= ", e2e_ms, " ms"));
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

bool MeetsSlo(const RequestMetrics& m, const Slo& slo) {
  // A request that produced no token has no TTFT and meets no TTFT objective.
  if (slo.ttft_ms > 0 && (!m.ttft_s || *m.ttft_s * 1e3 > slo.ttft_ms)) return false;
  if (slo.tpot_ms > 0 && m.tpot_s.value_or(0) * 1e3 > slo.tpot_ms) return false;
  if (slo.e2e_ms > 0 && m.e2e_s * 1e3 > slo.e2e_ms) return false;
  return true;
}

double RunDuration(const std::vector<RequestRecord>& records) {
  if (records.empty()) return 0;
  double first = records.front().start_s;
  double last = records.front().end_s;
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_s);
    last = std::max(last, r.end_s);
  }
  return last - first;
}

namespace {

std::vector<double> Millis(const std::vector<double>& seconds) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1e3);
  return ms;
}

void SetRates(RunMetrics& m) {
  if (m.duration_s <= 0) return;
  m.request_throughput = m.completed / m.duration_s;
  m.output_throughput = static_cast<double>(m.output_tokens) / m.duration_s;
  m.total_throughput = static_cast<double>(m.input_tokens + m.output_tokens) / m.duration_s;
  m.goodput = m.good_requests / m.duration_s;
}

}  // namespace

RunMetrics ComputeRunMetrics(const std::vector<RequestRecord>& records, double duration_s,
                             const Slo& slo) {
  RunMetrics m;
  m.duration_s = duration_s;
  m.slo_given = slo.Any();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.input_tokens += r.prompt_tokens;
    m.output_tokens += r.output_tokens;
    const RequestMetrics rm = ComputeRequestMetrics(r);
    if (rm.ttft_s) ttft.push_back(*rm.ttft_s);
    if (rm.tpot_s) tpot.push_back(*rm.tpot_s);
    itl.insert(itl.end(), rm.itl_s.begin(), rm.itl_s.end());
    e2e.push_back(rm.e2e_s);
    if (m.slo_given && MeetsSlo(rm, slo)) ++m.good_requests;
  }
  m.ttft_ms = Summarize(Millis(ttft));
  m.tpot_ms = Summarize(Millis(tpot));
  m.itl_ms = Summarize(Millis(itl));
  m.e2e_ms = Summarize(Millis(e2e));
  SetRates(m);
  return m;
}

std::vector<TimeBucket> BuildTimeSeries(const std::vector<RequestRecord>& records,
                                        double duration_s, int buckets) {
  std::vector<TimeBucket> out;
  if (duration_s <= 0 || buckets < 1) return out;
  const double width = duration_s / buckets;
  std::vector<std::vector<double>> ttft(buckets), tpot(buckets);
  std::vector<double> tokens(buckets, 0), busy(buckets, 0);
  auto bucket_of = [&](double t) {
    return std::clamp(static_cast<int>(t / width), 0, buckets - 1);
  };
  for (const RequestRecord& r : records) {
    for (const TokenChunk& c : r.chunks) tokens[bucket_of(c.time_s)] += c.tokens;
    // Time in flight, split over the windows the request overlaps.
    for (int b = bucket_of(r.start_s); b <= bucket_of(r.end_s); ++b) {
      const double lo = std::max(r.start_s, b * width);
      const double hi = std::min(r.end_s, (b + 1) * width);
      if (hi > lo) busy[b] += hi - lo;
    }
    if (!r.ok) continue;
    const RequestMetrics m = ComputeRequestMetrics(r);
    if (m.ttft_s) ttft[bucket_of(r.start_s)].push_back(*m.ttft_s * 1e3);
    if (m.tpot_s) tpot[bucket_of(r.start_s)].push_back(*m.tpot_s * 1e3);
  }
  for (int b = 0; b < buckets; ++b) {
    TimeBucket t;
    t.begin_s = b * width;
    t.end_s = (b + 1) * width;
    t.output_throughput = tokens[b] / width;
    t.mean_in_flight = busy[b] / width;
    t.ttft_ms = Summarize(std::move(ttft[b]));
    t.tpot_ms = Summarize(std::move(tpot[b]));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace pagoda::loadgen
