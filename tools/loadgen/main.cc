// pagoda-bench: drives a running pagoda-scheduler and reports serving metrics.
//
//   pagoda-bench --server HOST:PORT [--concurrency N | --request-rate R | --static-batch]
//       [--sweep-concurrency 1,4,16,64] [--baselines] [--num-requests N | --duration-s S]
//       [--input-len N --input-dist fixed|uniform|sharegpt] [--output-len N --output-dist ...]
//       [--prompts random|shared-prefix|multi-turn] [--temperature T] [--slo-ttft-ms MS]
//       [--slo-tpot-ms MS] [--json-schema SCHEMA_OR_CORPUS.json]
//       [--json FILE] [--plot FILE.png] [--tls-ca PEM [--tls-cert PEM --tls-key PEM]]
//
// docs/benchmarks.md documents every flag and every number.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tools/loadgen/pacer.h"
#include "tools/loadgen/plot.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/runner.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "scheduler address HOST:PORT");
ABSL_FLAG(int32_t, num_requests, 100, "requests per run (ignored when --duration-s > 0)");
ABSL_FLAG(double, duration_s, 0,
          "> 0: each run starts requests for this many seconds (then waits for them)");
ABSL_FLAG(int32_t, concurrency, 8,
          "closed loop: requests in flight; each stream sends its next request when its "
          "previous one finishes");
ABSL_FLAG(double, request_rate, 0,
          "> 0: open loop, Poisson arrivals at this many requests/s; inf: all requests at once; "
          "0: closed loop (--concurrency)");
ABSL_FLAG(int32_t, max_concurrency, 0, "open loop: at most this many requests in flight; 0 = none");
ABSL_FLAG(bool, static_batch, false,
          "static batching: waves of --concurrency requests, the next wave starting only when "
          "every request of the current one has finished");
ABSL_FLAG(bool, static_batch_padding, true,
          "static batching as a fixed-shape batch computes it: every request of a wave generates "
          "the wave's longest output, and only its own length counts (false: a finished request "
          "leaves the batch, and the wave shrinks)");
ABSL_FLAG(std::string, sweep_concurrency, "",
          "comma-separated closed-loop concurrency levels, run one after another (e.g. 1,4,16,64)");
ABSL_FLAG(bool, baselines, false,
          "also run every level one at a time (sequential) and as static batches (padded, and "
          "shrinking as requests finish), and print continuous/sequential and "
          "continuous/static output-throughput ratios");
ABSL_FLAG(int32_t, input_len, 128, "mean prompt length in tokens (BOS included)");
ABSL_FLAG(std::string, input_dist, "fixed", "prompt lengths: fixed, uniform or sharegpt");
ABSL_FLAG(int32_t, output_len, 128, "mean output length in tokens (max_tokens of each request)");
ABSL_FLAG(std::string, output_dist, "fixed", "output lengths: fixed, uniform or sharegpt");
ABSL_FLAG(double, range_ratio, 0.5, "uniform lengths: drawn from [len * (1 - r), len * (1 + r)]");
ABSL_FLAG(std::string, prompts, "random", "random, shared-prefix or multi-turn");
ABSL_FLAG(int32_t, shared_prefix_len, 64, "shared-prefix prompts: tokens in common");
ABSL_FLAG(int32_t, prefix_groups, 1,
          "shared-prefix prompts: distinct prefixes (request i uses prefix i mod groups)");
ABSL_FLAG(int32_t, conversations, 16,
          "multi-turn prompts: conversations; request i is a turn of conversation i mod this");
ABSL_FLAG(int32_t, turns, 4,
          "multi-turn prompts: turns per conversation, each resending the whole history");
ABSL_FLAG(double, temperature, 0, "0 = greedy; > 0 = sampled, each request with its own seed");
ABSL_FLAG(int32_t, top_k, 0, "sampled: keep the k most likely tokens; 0 = off");
ABSL_FLAG(double, top_p, 1, "sampled: nucleus mass; 1 = off");
ABSL_FLAG(bool, ignore_eos, true,
          "generate exactly the requested output length even past EOS (false: stop at EOS)");
ABSL_FLAG(uint64_t, seed, 0, "seed of prompts, lengths, arrivals and sampling");
ABSL_FLAG(int32_t, warmup_requests, 2,
          "requests sent one at a time before the first run, not measured");
ABSL_FLAG(double, timeout_s, 600, "deadline of each request in seconds");
ABSL_FLAG(double, slo_ttft_ms, 0, "goodput SLO: time to first token at most this (0 = none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "goodput SLO: time per output token at most this (0 = none)");
ABSL_FLAG(double, slo_e2e_ms, 0, "goodput SLO: end-to-end latency at most this (0 = none)");
ABSL_FLAG(std::string, json, "", "write every result (and each request's numbers) to FILE");
ABSL_FLAG(std::string, plot, "",
          "draw FILE.png with gnuplot: metrics over concurrency for sweeps, over time otherwise");
ABSL_FLAG(bool, progress, true, "progress bar on stderr");
ABSL_FLAG(bool, unique_cache_salts, false,
          "give every request its own cache_salt, so no request reuses another's prompt KV: "
          "the prefix cache's 'off' baseline on the same cluster");
ABSL_FLAG(std::string, tenant, "",
          "fair-share tenant of every request (GenerateRequest.tenant); empty: the scheduler's "
          "default");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that verify the scheduler: connect over TLS (empty, with no "
          "--tls-cert either: plaintext)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain, for a scheduler that requires one");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, json_schema, "",
          "constrain every request by a JSON Schema read from FILE: one schema, or a corpus (an "
          "array of schemas, or {\"schemas\": [{\"schema\": ...}, ...]}) cycled by request "
          "index; constrained requests do not ignore EOS (they end at --output-len or when the "
          "value is complete)");
ABSL_FLAG(double, wait_for_server_s, 30,
          "wait up to this long for the scheduler to answer with a worker attached");

namespace {

namespace v1 = pagoda::v1;
namespace loadgen = pagoda::loadgen;

// Warmup requests use indices far from any measured run's, so they warm the server without
// touching the measured prompts.
constexpr int kWarmupFirstIndex = 1 << 30;
constexpr int kErrorsShown = 3;

struct Options {
  std::string server;
  pagoda::common::TlsConfig tls;
  loadgen::WorkloadOptions workload;
  loadgen::SamplingOptions sampling;
  loadgen::PacerOptions load;  // concurrency is per level
  std::vector<int> levels;     // concurrency levels (one without a sweep)
  bool sweep = false;
  bool baselines = false;
  loadgen::Slo slo;
  int warmup_requests = 0;
  double timeout_s = 600;
  double wait_for_server_s = 30;
  bool progress = true;
  bool unique_cache_salts = false;
  std::string tenant;
  std::vector<std::string> json_schemas;  // --json-schema: one per request, cycled
  std::string json_path;
  std::string plot_path;
};

absl::StatusOr<std::vector<int>> ParseLevels(const std::string& text) {
  std::vector<int> levels;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int level = 0;
    if (!absl::SimpleAtoi(part, &level) || level < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sweep-concurrency must list integers >= 1 separated by commas; got \"", text, "\""));
    }
    levels.push_back(level);
  }
  if (levels.empty()) return absl::InvalidArgumentError("--sweep-concurrency lists no level");
  return levels;
}

absl::StatusOr<loadgen::WorkloadOptions> WorkloadFromFlags() {
  loadgen::WorkloadOptions w;
  ASSIGN_OR_RETURN(w.input.dist, loadgen::ParseLengthDist(absl::GetFlag(FLAGS_input_dist)));
  ASSIGN_OR_RETURN(w.output.dist, loadgen::ParseLengthDist(absl::GetFlag(FLAGS_output_dist)));
  w.input.mean = absl::GetFlag(FLAGS_input_len);
  w.output.mean = absl::GetFlag(FLAGS_output_len);
  w.input.range_ratio = w.output.range_ratio = absl::GetFlag(FLAGS_range_ratio);
  // Real chat prompts are more skewed than the answers (ShareGPT's long pasted inputs).
  w.input.sigma = 1.0;
  w.output.sigma = 0.8;
  ASSIGN_OR_RETURN(w.prompts, loadgen::ParsePromptKind(absl::GetFlag(FLAGS_prompts)));
  w.shared_prefix_len = absl::GetFlag(FLAGS_shared_prefix_len);
  w.prefix_groups = absl::GetFlag(FLAGS_prefix_groups);
  w.conversations = absl::GetFlag(FLAGS_conversations);
  w.turns = absl::GetFlag(FLAGS_turns);
  w.seed = absl::GetFlag(FLAGS_seed);
  return w;
}

absl::StatusOr<loadgen::PacerOptions> LoadFromFlags() {
  loadgen::PacerOptions p;
  const double rate = absl::GetFlag(FLAGS_request_rate);
  const bool static_batch = absl::GetFlag(FLAGS_static_batch);
  if (rate < 0 || std::isnan(rate)) {
    return absl::InvalidArgumentError(absl::StrCat("--request-rate must be >= 0, got ", rate));
  }
  if (rate > 0 && static_batch) {
    return absl::InvalidArgumentError("--static-batch is a closed-loop shape: drop --request-rate");
  }
  p.shape = static_batch       ? loadgen::LoadShape::kStaticBatch
            : rate == 0        ? loadgen::LoadShape::kClosed
            : std::isinf(rate) ? loadgen::LoadShape::kBurst
                               : loadgen::LoadShape::kPoisson;
  p.request_rate = rate;
  p.max_in_flight = absl::GetFlag(FLAGS_max_concurrency);
  p.num_requests = absl::GetFlag(FLAGS_num_requests);
  p.duration_s = absl::GetFlag(FLAGS_duration_s);
  p.seed = absl::GetFlag(FLAGS_seed);
  p.pad_waves = absl::GetFlag(FLAGS_static_batch_padding);
  if (p.duration_s <= 0 && p.num_requests < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-requests must be >= 1 (or give --duration-s), got ", p.num_requests));
  }
  return p;
}

// --json-schema FILE: the schemas' compact JSON text, in the file's order.
absl::StatusOr<std::vector<std::string>> ReadJsonSchemas(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--json-schema: cannot read ", path));
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(in, nullptr, false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("--json-schema: ", path, " is not JSON"));
  }
  std::vector<std::string> schemas;
  if (doc.is_object() && doc.contains("schemas") && doc["schemas"].is_array()) {
    for (const auto& entry : doc["schemas"]) {
      schemas.push_back(
          (entry.is_object() && entry.contains("schema") ? entry["schema"] : entry).dump());
    }
  } else if (doc.is_array()) {
    for (const auto& schema : doc) schemas.push_back(schema.dump());
  } else {
    schemas.push_back(doc.dump());
  }
  if (schemas.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--json-schema: ", path, " holds no schema"));
  }
  return schemas;
}

absl::Status CheckCombination(const Options& o) {
  const bool closed = o.load.shape == loadgen::LoadShape::kClosed;
  if (o.sweep && !closed && o.load.shape != loadgen::LoadShape::kStaticBatch) {
    return absl::InvalidArgumentError(
        "--sweep-concurrency sweeps closed-loop streams: drop --request-rate");
  }
  if (o.baselines && !closed) {
    return absl::InvalidArgumentError(
        "--baselines compares closed-loop continuous batching with its baselines: drop "
        "--request-rate and --static-batch");
  }
  if (o.sampling.temperature < 0 || o.sampling.top_p <= 0 || o.sampling.top_p > 1) {
    return absl::InvalidArgumentError("--temperature must be >= 0 and --top-p in (0, 1]");
  }
  return absl::OkStatus();
}

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.server = absl::GetFlag(FLAGS_server);
  ASSIGN_OR_RETURN(o.tls, pagoda::common::LoadTlsConfig(
                              {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                               absl::GetFlag(FLAGS_tls_ca)},
                              pagoda::common::TlsSide::kClient));
  ASSIGN_OR_RETURN(o.workload, WorkloadFromFlags());
  ASSIGN_OR_RETURN(o.load, LoadFromFlags());
  o.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  o.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  o.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  o.sampling.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  const std::string sweep = absl::GetFlag(FLAGS_sweep_concurrency);
  o.sweep = !sweep.empty();
  if (o.sweep) {
    ASSIGN_OR_RETURN(o.levels, ParseLevels(sweep));
  } else {
    o.levels = {absl::GetFlag(FLAGS_concurrency)};
  }
  if (o.levels.front() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency must be >= 1, got ", o.levels.front()));
  }
  o.baselines = absl::GetFlag(FLAGS_baselines);
  o.slo = {absl::GetFlag(FLAGS_slo_ttft_ms), absl::GetFlag(FLAGS_slo_tpot_ms),
           absl::GetFlag(FLAGS_slo_e2e_ms)};
  o.warmup_requests = absl::GetFlag(FLAGS_warmup_requests);
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o.wait_for_server_s = absl::GetFlag(FLAGS_wait_for_server_s);
  o.progress = absl::GetFlag(FLAGS_progress);
  o.unique_cache_salts = absl::GetFlag(FLAGS_unique_cache_salts);
  o.tenant = absl::GetFlag(FLAGS_tenant);
  if (const std::string path = absl::GetFlag(FLAGS_json_schema); !path.empty()) {
    ASSIGN_OR_RETURN(o.json_schemas, ReadJsonSchemas(path));
  }
  o.json_path = absl::GetFlag(FLAGS_json);
  o.plot_path = absl::GetFlag(FLAGS_plot);
  RETURN_IF_ERROR(CheckCombination(o));
  return o;
}

// Polls GetModelInfo until a worker is attached: a benchmark against a scheduler without
// workers would only measure queueing.
absl::StatusOr<v1::ModelInfo> WaitForServer(v1::Generation::Stub& stub, double timeout_s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  grpc::Status last;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ModelInfo info;
    last = stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (last.ok() && info.attached_workers() > 0) return info;
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (!last.ok()) {
    return absl::UnavailableError(absl::StrCat("the scheduler did not answer within ", timeout_s,
                                               " s: ", last.error_message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no worker attached to the scheduler within ", timeout_s, " s"));
}

// Short: it prefixes the progress bar.
std::string ProgressLabel(const std::string& role, loadgen::LoadShape shape, int concurrency) {
  switch (shape) {
    case loadgen::LoadShape::kPoisson:
      return absl::StrCat(role, " poisson");
    case loadgen::LoadShape::kBurst:
      return absl::StrCat(role, " burst");
    default:
      return absl::StrCat(role, " c=", concurrency);
  }
}

// Runs one load shape at one level and computes its metrics.
class BenchSession {
 public:
  BenchSession(const Options& options, v1::Generation::Stub& stub,
               const loadgen::Workload& workload)
      : options_(options), stub_(stub), workload_(workload) {}

  absl::Status Warmup() {
    if (options_.warmup_requests <= 0) return absl::OkStatus();
    loadgen::RunOptions run = BaseRunOptions("warmup");
    run.pacer.shape = loadgen::LoadShape::kClosed;
    run.pacer.concurrency = 1;
    run.pacer.duration_s = 0;
    run.pacer.num_requests = options_.warmup_requests;
    run.first_index = kWarmupFirstIndex;
    const loadgen::RunResult result = loadgen::RunLoad(stub_, workload_, run);
    for (const loadgen::RequestRecord& r : result.records) {
      if (r.ok) return absl::OkStatus();
    }
    return absl::UnavailableError(
        absl::StrCat("every warmup request failed; the first: ", result.records.front().error));
  }

  // `pad_waves` applies to static batches (none: the flag's choice).
  loadgen::LevelResult Run(const std::string& role, loadgen::LoadShape shape, int concurrency,
                           std::optional<bool> pad_waves = std::nullopt) {
    loadgen::RunOptions run = BaseRunOptions(ProgressLabel(role, shape, concurrency));
    run.pacer.shape = shape;
    run.pacer.concurrency = concurrency;
    if (pad_waves) run.pacer.pad_waves = *pad_waves;
    loadgen::RunResult result = loadgen::RunLoad(stub_, workload_, run);
    loadgen::LevelResult level;
    level.role = role;
    level.pacer = run.pacer;
    level.waves = result.waves;
    level.metrics = loadgen::ComputeRunMetrics(result.records, loadgen::RunDuration(result.records),
                                               options_.slo);
    level.errors = loadgen::DistinctErrors(result.records, kErrorsShown);
    level.records = std::move(result.records);
    std::printf("%s\n", loadgen::FormatRunTable(level, options_.slo).c_str());
    std::fflush(stdout);
    return level;
  }

 private:
  loadgen::RunOptions BaseRunOptions(const std::string& label) {
    loadgen::RunOptions run;
    run.pacer = options_.load;
    run.sampling = options_.sampling;
    run.timeout_s = options_.timeout_s;
    run.progress = options_.progress;
    run.unique_cache_salts = options_.unique_cache_salts;
    run.tenant = options_.tenant;
    run.json_schemas = options_.json_schemas;
    run.label = label;
    // Same request indices in every run (same lengths), fresh prompt ids (no cross-run cache).
    run.prompt_salt = next_salt_++;
    return run;
  }

  const Options& options_;
  v1::Generation::Stub& stub_;
  const loadgen::Workload& workload_;
  uint64_t next_salt_ = 0;
};

// Static batches that shrink as their requests finish are "static-shrink".
std::string RoleOf(const loadgen::PacerOptions& load) {
  if (load.shape != loadgen::LoadShape::kStaticBatch) return "continuous";
  return load.pad_waves ? "static-batch" : "static-shrink";
}

// Runs every level, and with --baselines the sequential run (once) and two static-batch runs
// per level (padded, shrinking); fills report.runs and report.baselines.
void RunAll(const Options& o, BenchSession& session, loadgen::BenchReport& report) {
  std::optional<double> sequential;  // output tokens/s one at a time
  std::map<int, double> continuous;
  for (int level : o.levels) {
    report.runs.push_back(session.Run(RoleOf(o.load), o.load.shape, level));
    continuous[level] = report.runs.back().metrics.output_throughput;
    // At concurrency 1 continuous batching, static batching and one-at-a-time are one thing.
    if (level == 1 && o.baselines) sequential = continuous[level];
  }
  if (!o.baselines) return;
  if (!sequential) {
    report.runs.push_back(session.Run("sequential", loadgen::LoadShape::kClosed, 1));
    sequential = report.runs.back().metrics.output_throughput;
  }
  for (int level : o.levels) {
    loadgen::BaselineRow row{level, continuous[level], *sequential, *sequential, *sequential};
    if (level > 1) {
      report.runs.push_back(
          session.Run("static-batch", loadgen::LoadShape::kStaticBatch, level, /*pad_waves=*/true));
      row.static_batch = report.runs.back().metrics.output_throughput;
      report.runs.push_back(session.Run("static-shrink", loadgen::LoadShape::kStaticBatch, level,
                                        /*pad_waves=*/false));
      row.static_shrinking = report.runs.back().metrics.output_throughput;
    }
    report.baselines.push_back(row);
  }
}

absl::Status WriteOutputs(const Options& o, const loadgen::BenchReport& report) {
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << loadgen::RenderJson(report);
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write --json ", o.json_path));
  }
  if (o.plot_path.empty()) return absl::OkStatus();
  std::vector<loadgen::LevelResult> main_runs;
  for (const loadgen::LevelResult& r : report.runs) {
    if (r.role == RoleOf(o.load)) main_runs.push_back(r);
  }
  const std::string title = absl::StrCat("pagoda-bench: ", report.model, " at ", o.server);
  if (main_runs.size() > 1) {
    std::sort(main_runs.begin(), main_runs.end(), [](const auto& a, const auto& b) {
      return a.pacer.concurrency < b.pacer.concurrency;
    });
    return loadgen::PlotSweep(main_runs, report.baselines, o.slo.Any(), o.plot_path, title);
  }
  return loadgen::PlotOverTime(
      main_runs.front(), o.plot_path,
      absl::StrCat(title, ", ", loadgen::DescribeLoad(main_runs[0].pacer)));
}

void PrintSummary(const Options& o, const loadgen::BenchReport& report) {
  if (report.runs.size() > 1) {
    std::printf("%s\n", loadgen::FormatSweepTable(report.runs, o.slo).c_str());
  }
  if (!report.baselines.empty()) {
    std::printf("%s\n", loadgen::FormatBaselineTable(report.baselines).c_str());
  }
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pagoda-bench: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Main(const Options& o) {
  auto channel = grpc::CreateChannel(o.server, pagoda::common::MakeChannelCredentials(o.tls));
  auto stub = v1::Generation::NewStub(channel);
  absl::StatusOr<v1::ModelInfo> info = WaitForServer(*stub, o.wait_for_server_s);
  if (!info.ok()) return Fail(info.status());
  const loadgen::ModelLimits limits{static_cast<int>(info->vocab_size()),
                                    static_cast<int>(info->context_length()), info->bos_token_id(),
                                    info->eos_token_id()};
  absl::StatusOr<loadgen::Workload> workload = loadgen::Workload::Create(o.workload, limits);
  if (!workload.ok()) return Fail(workload.status());
  loadgen::BenchReport report;
  report.server = o.server;
  report.model = absl::StrCat(info->name(), " (", info->fingerprint(), ")");
  report.workload = o.workload;
  report.sampling = o.sampling;
  report.slo = o.slo;
  report.warmup_requests = o.warmup_requests;
  BenchSession session(o, *stub, *workload);
  if (absl::Status s = session.Warmup(); !s.ok()) return Fail(s);
  RunAll(o, session, report);
  PrintSummary(o, report);
  if (absl::Status s = WriteOutputs(o, report); !s.ok()) return Fail(s);
  for (const loadgen::LevelResult& r : report.runs) {
    if (r.metrics.completed == 0) {
      return Fail(
          absl::UnavailableError(absl::StrCat("every request of the ", r.role, " run failed")));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "usage: pagoda-bench --server HOST:PORT [--concurrency N | --request-rate R] "
      "[--sweep-concurrency 1,4,16,64] [--baselines] [--num-requests N | --duration-s S] "
      "[--json FILE] [--plot FILE.png]; see docs/benchmarks.md");
  // absl's --help lists flags of files named after the program; ours live in main.cc.
  std::vector<char*> args = pagoda::common::ParseFlags(argc, argv);
  if (args.size() > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", args[1], "\" (every option is a --flag)")));
  }
  absl::StatusOr<Options> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  return Main(*options);
}
