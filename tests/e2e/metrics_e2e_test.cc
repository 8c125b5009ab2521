// Metrics end to end: both endpoints pass `promtool check metrics`, and a real Prometheus
// server on loopback scrapes one scheduler and two workers (the topology of deploy/k8s) and
// finds the values that known traffic implies.
//
// Needs promtool and prometheus (Debian package `prometheus`, installed by
// scripts/install-deps.sh); the tests skip with a message without them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

std::optional<std::string> FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const auto& dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

std::string Loopback(int port) { return absl::StrCat("127.0.0.1:", port); }

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// Runs `promtool check metrics` over the text served at `host_port`/metrics.
void ExpectPromtoolAccepts(const std::string& promtool, const std::string& host_port,
                           const std::string& dir, const std::string& name) {
  std::string body;
  ASSERT_EQ(HttpGet(host_port, "/metrics", &body), 200) << name;
  const std::string file = absl::StrCat(dir, "/", name, ".prom");
  std::ofstream(file) << body;
  ChildProcess check({"/bin/sh", "-c", absl::StrCat(promtool, " check metrics < ", file)},
                     file + ".log");
  ASSERT_TRUE(check.Start());
  EXPECT_EQ(check.Wait(absl::Seconds(30)), 0) << name << ": promtool check metrics failed:\n"
                                              << check.Log() << "\n--- scraped text ---\n"
                                              << body;
}

// A Prometheus server on loopback with a fresh TSDB, scraping `targets` (job -> host:ports).
class PrometheusServer {
 public:
  static std::unique_ptr<PrometheusServer> Start(
      const std::string& binary, const std::string& dir,
      const std::map<std::string, std::vector<std::string>>& targets, std::string* error) {
    std::string config =
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n";
    for (const auto& [job, addresses] : targets) {
      absl::StrAppend(&config, "  - job_name: ", job, "\n    static_configs:\n      - targets: [");
      for (size_t i = 0; i < addresses.size(); ++i) {
        absl::StrAppend(&config, i ? ", " : "", "'", addresses[i], "'");
      }
      absl::StrAppend(&config, "]\n");
    }
    std::ofstream(dir + "/prometheus.yml") << config;
    // The port is picked before Prometheus binds it: retry if another process took it.
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto server = std::unique_ptr<PrometheusServer>(new PrometheusServer());
      server->address_ = Loopback(FreeLoopbackPort());
      server->process_ = std::make_unique<ChildProcess>(
          std::vector<std::string>{binary, "--config.file=" + dir + "/prometheus.yml",
                                   absl::StrCat("--storage.tsdb.path=", dir, "/tsdb", attempt),
                                   "--web.listen-address=" + server->address_},
          absl::StrCat(dir, "/prometheus", attempt, ".log"));
      if (!server->process_->Start()) break;
      for (int i = 0; i < 300 && server->process_->Running(); ++i) {
        std::string body;
        if (HttpGet(server->address_, "/-/ready", &body) == 200) return server;
        absl::SleepFor(absl::Milliseconds(100));
      }
      *error = "prometheus did not become ready:\n" + server->process_->Log();
    }
    return nullptr;
  }

  ~PrometheusServer() {
    process_->Signal(SIGTERM);
    process_->Wait(absl::Seconds(10));
  }

  // An instant query's samples: labels -> value. Empty when the query failed.
  std::map<std::map<std::string, std::string>, double> Query(const std::string& promql) {
    std::map<std::map<std::string, std::string>, double> out;
    std::string body;
    if (HttpGet(address_, "/api/v1/query?query=" + UrlEncode(promql), &body) != 200) return out;
    const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || json.value("status", "") != "success") return out;
    for (const auto& sample : json["data"]["result"]) {
      std::map<std::string, std::string> labels;
      for (const auto& [k, v] : sample["metric"].items()) labels[k] = v.get<std::string>();
      out[labels] = std::stod(sample["value"][1].get<std::string>());
    }
    return out;
  }

  // Polls a query that yields one sample until `ok(value)`, or ~30 s; returns the last value
  // (NaN when there was none).
  double Await(const std::string& promql, const std::function<bool(double)>& ok) {
    double value = std::nan("");
    for (int i = 0; i < 150; ++i) {
      const auto samples = Query(promql);
      value = samples.size() == 1 ? samples.begin()->second : std::nan("");
      if (samples.size() == 1 && ok(value)) return value;
      absl::SleepFor(absl::Milliseconds(200));
    }
    return value;
  }
  double AwaitEq(const std::string& promql, double want) {
    return Await(promql, [want](double v) { return v == want; });
  }

 private:
  PrometheusServer() = default;
  std::string address_;
  std::unique_ptr<ChildProcess> process_;
};

class MetricsTest : public TrainedModelTest {
 protected:
  void StartMetricsCluster(int workers, std::vector<std::string> scheduler_flags = {}) {
    ClusterOptions options;
    options.model = *model_;
    options.workers = workers;
    options.metrics = true;
    options.scheduler_flags = std::move(scheduler_flags);
    options.worker_flags = {"--kv-pages", std::to_string(kKvPages)};
    std::string error;
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  static constexpr int kKvPages = 128;
};

TEST_F(MetricsTest, PromtoolAcceptsBothEndpoints) {
  const auto promtool = FindInPath("promtool");
  if (!promtool) GTEST_SKIP() << "promtool not found (Debian package prometheus)";
  ASSERT_NO_FATAL_FAILURE(StartMetricsCluster(1));
  // Traffic first, so that every histogram and labelled counter has a series.
  const Generation ok = cluster_->Generate(TextRequest("Once upon a time", 8));
  ASSERT_OK(ok.status);
  const Generation bad = cluster_->Generate(TextRequest("", 8));
  ASSERT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string dir = MakeTempDir("promtool");
  ExpectPromtoolAccepts(*promtool, Loopback(cluster_->scheduler_metrics_port()), dir, "scheduler");
  ExpectPromtoolAccepts(*promtool, Loopback(cluster_->worker_metrics_port(0)), dir, "worker");
}

// One scheduler, two workers, scraped by Prometheus: N greedy requests of known lengths.
TEST_F(MetricsTest, PrometheusScrapesSchedulerAndTwoWorkers) {
  const auto prometheus = FindInPath("prometheus");
  if (!prometheus) GTEST_SKIP() << "prometheus not found (Debian package prometheus)";
  // At most two sequences per worker: six concurrent requests must use both workers.
  ASSERT_NO_FATAL_FAILURE(StartMetricsCluster(2, {"--max-running", "2"}));
  const std::string dir = MakeTempDir("prometheus");
  std::string error;
  auto prom = PrometheusServer::Start(
      *prometheus, dir,
      {{"pagoda-scheduler", {Loopback(cluster_->scheduler_metrics_port())}},
       {"pagoda-worker",
        {Loopback(cluster_->worker_metrics_port(0)), Loopback(cluster_->worker_metrics_port(1))}}},
      &error);
  ASSERT_NE(prom, nullptr) << error;

  const auto cases = LoadGolden(*golden_)["cases"];
  constexpr int kRequests = 6;
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    v1::GenerateRequest r =
        TextRequest(cases[i % cases.size()]["prompt"].get<std::string>(), 12 + 4 * i);
    r.set_ignore_eos(true);  // every request ends by length, with exactly max_tokens tokens
    requests.push_back(r);
  }
  const std::vector<Generation> results = cluster_->GenerateAll(requests);
  double prompt_tokens = 0;
  double generated = 0;
  double gaps = 0;  // inter-token intervals: one fewer than the tokens of each request
  double cached = 0;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_OK(results[i].status);
    ASSERT_EQ(results[i].tokens.size(), requests[i].max_tokens());
    prompt_tokens += results[i].finished.usage().prompt_tokens();
    cached += results[i].finished.usage().cached_tokens();
    generated += requests[i].max_tokens();
    gaps += requests[i].max_tokens() - 1;
  }
  const Generation bad = cluster_->Generate(TextRequest("", 8));
  ASSERT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Targets up, then the scheduler's counters (the success counter is the last to move).
  EXPECT_EQ(prom->AwaitEq("count(up == 1)", 3), 3);
  EXPECT_EQ(prom->AwaitEq(R"(pagoda_request_success_total{finish_reason="length"})", kRequests),
            kRequests);
  EXPECT_EQ(prom->AwaitEq(R"(pagoda_request_failure_total{code="INVALID_ARGUMENT"})", 1), 1);
  EXPECT_EQ(prom->AwaitEq("pagoda_generation_tokens_total", generated), generated);
  EXPECT_EQ(prom->AwaitEq("pagoda_prompt_tokens_total", prompt_tokens), prompt_tokens);
  for (const char* histogram :
       {"pagoda_time_to_first_token_seconds", "pagoda_e2e_request_latency_seconds",
        "pagoda_request_queue_time_seconds"}) {
    EXPECT_EQ(prom->AwaitEq(absl::StrCat(histogram, "_count"), kRequests), kRequests) << histogram;
  }
  EXPECT_EQ(prom->AwaitEq("pagoda_inter_token_latency_seconds_count", gaps), gaps);
  const double plans = prom->Await("pagoda_iteration_tokens_count", [](double v) { return v > 0; });
  EXPECT_GT(plans, 0);
  EXPECT_EQ(prom->AwaitEq("pagoda_iteration_planning_seconds_count", plans), plans);
  EXPECT_EQ(prom->AwaitEq("pagoda_preemptions_total", 0), 0);
  // Without preemptions every request was looked up in the prefix cache once, at admission.
  EXPECT_EQ(prom->AwaitEq("pagoda_prefix_cache_queries_total", prompt_tokens), prompt_tokens);
  EXPECT_EQ(prom->AwaitEq("pagoda_prefix_cache_hits_total", cached), cached);
  EXPECT_EQ(prom->AwaitEq("count(pagoda_kv_cache_pages_cached >= 0)", 2), 2);

  // State gauges, back to idle; pages per worker by name.
  EXPECT_EQ(prom->AwaitEq("pagoda_num_requests_running", 0), 0);
  EXPECT_EQ(prom->AwaitEq("pagoda_num_requests_waiting", 0), 0);
  EXPECT_EQ(prom->AwaitEq("pagoda_num_requests_preempted", 0), 0);
  EXPECT_EQ(prom->AwaitEq("pagoda_num_workers", 2), 2);
  EXPECT_EQ(prom->AwaitEq("pagoda_kv_cache_usage_ratio", 0), 0);
  for (const char* worker : {"w0", "w1"}) {
    EXPECT_EQ(
        prom->AwaitEq(absl::StrFormat(R"(pagoda_kv_cache_pages_capacity{worker="%s"})", worker),
                      kKvPages),
        kKvPages);
    EXPECT_EQ(
        prom->AwaitEq(absl::StrFormat(R"(pagoda_kv_cache_pages_used{worker="%s"})", worker), 0), 0);
  }

  // Both workers stepped, and together executed exactly the tokens the scheduler planned.
  EXPECT_EQ(prom->AwaitEq("count(pagoda_worker_step_seconds_count > 0)", 2), 2)
      << prom->Query("pagoda_worker_step_seconds_count").size() << " worker series";
  const double planned = prom->Await("pagoda_iteration_tokens_sum", [](double v) { return v > 0; });
  EXPECT_EQ(prom->AwaitEq("sum(pagoda_worker_step_tokens_sum)", planned), planned);
  EXPECT_EQ(prom->AwaitEq("sum(pagoda_worker_step_seconds_count)", plans), plans);
  EXPECT_EQ(prom->AwaitEq("count(pagoda_worker_kv_arena_bytes > 0)", 2), 2);
  EXPECT_EQ(prom->AwaitEq("sum(pagoda_worker_attached)", 2), 2);
  EXPECT_EQ(prom->AwaitEq("sum(pagoda_worker_step_failures_total)", 0), 0);
  EXPECT_EQ(prom->Query("pagoda_worker_device_memory_used_bytes").size(), 0u)
      << "CPU workers export no device memory";
  // CPU workers time their forward passes by part: eight parts each, every one of them seen,
  // and the products' and attention's FLOPs counted.
  EXPECT_EQ(prom->AwaitEq("count(pagoda_worker_forward_part_seconds_total > 0)", 16), 16);
  EXPECT_EQ(prom->AwaitEq("count(pagoda_worker_forward_part_flops_total > 0)", 12), 12);
  EXPECT_EQ(prom->AwaitEq(R"(sum(pagoda_worker_forward_part_flops_total{part="sampling"}))", 0), 0);
}

}  // namespace
}  // namespace pagoda::testing
