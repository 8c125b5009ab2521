// Stats: what a run measured, and the serving metrics computed from it.
//
// Definitions (the same as vLLM's benchmark_serving, so numbers compare):
//  * TTFT  = first message carrying a token − request sent.
//  * E2E   = last message of the stream − request sent.
//  * TPOT  = (E2E − TTFT) / (output_tokens − 1), one value per request with > 1 output token.
//  * ITL   = gaps between successive messages carrying tokens, pooled over all requests (a
//            message carrying several tokens counts as one gap, since they arrive together).
//  * throughput = completed requests (or output tokens) / run duration, where the duration runs
//            from the first request sent to the last request finished.
//  * goodput = completed requests meeting every given SLO / run duration; a request with one
//            output token has TPOT 0 for this purpose. Without SLOs there is no goodput.
//  * percentiles interpolate linearly between closest ranks (numpy's default).
// Failed requests count in `failed` and nowhere else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::loadgen {

// Tokens that arrived together in one streamed message.
struct TokenChunk {
  double time_s = 0;  // arrival, seconds since the run began
  int tokens = 0;
};

// One request as the client saw it. Times are seconds since the run began.
struct RequestRecord {
  int index = 0;
  bool ok = false;
  std::string error;               // the gRPC status when !ok
  int prompt_tokens = 0;           // sent
  int expected_output_tokens = 0;  // max_tokens asked for
  int output_tokens = 0;           // received (padded static batching: those that count)
  int padding_tokens = 0;          // padded static batching: received after the counted ones
  double start_s = 0;
  double end_s = 0;
  std::vector<TokenChunk> chunks;  // messages that carried tokens, in order
};

struct RequestMetrics {
  std::optional<double> ttft_s;  // none when no token came
  double e2e_s = 0;
  std::optional<double> tpot_s;  // none with < 2 output tokens
  std::vector<double> itl_s;
};

RequestMetrics ComputeRequestMetrics(const RequestRecord& record);

// Percentile p in [0, 100] of `sorted` (ascending, non-empty), linear interpolation.
double Percentile(const std::vector<double>& sorted, double p);

struct Summary {
  int count = 0;
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// All zero when `values` is empty.
Summary Summarize(std::vector<double> values);

// Service-level objectives; 0 = not given.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;

  bool Any() const { return ttft_ms > 0 || tpot_ms > 0 || e2e_ms > 0; }
  // "TTFT <= 500 ms, TPOT <= 50 ms"
  std::string Describe() const;
};

bool MeetsSlo(const RequestMetrics& metrics, const Slo& slo);

struct RunMetrics {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  int64_t input_tokens = 0;       // of completed requests
  int64_t output_tokens = 0;      // of completed requests
  double request_throughput = 0;  // requests/s
  double output_throughput = 0;   // output tokens/s
  double total_throughput = 0;    // (input + output) tokens/s
  bool slo_given = false;
  int good_requests = 0;  // meeting every SLO
  double goodput = 0;     // good requests/s
  Summary ttft_ms;
  Summary tpot_ms;
  Summary itl_ms;
  Summary e2e_ms;
};

RunMetrics ComputeRunMetrics(const std::vector<RequestRecord>& records, double duration_s,
                             const Slo& slo);

// Run duration as defined above: first start to last end (0 without records).
double RunDuration(const std::vector<RequestRecord>& records);

// One window of a run, for plots over time.
struct TimeBucket {
  double begin_s = 0;
  double end_s = 0;
  double output_throughput = 0;  // tokens that arrived in the window / its width
  double mean_in_flight = 0;     // time-averaged requests in flight
  Summary ttft_ms;               // of completed requests sent in the window
  Summary tpot_ms;
};

// Splits [0, duration_s] into `buckets` equal windows.
std::vector<TimeBucket> BuildTimeSeries(const std::vector<RequestRecord>& records,
                                        double duration_s, int buckets);

}  // namespace pagoda::loadgen
