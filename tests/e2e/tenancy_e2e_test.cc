// End-to-end: tenants and predicted-wait admission seen from clients, with real processes on
// loopback and a synthetic worker (no model computed: every plan takes --synthetic-step-ms).
//  * A request names its tenant (gRPC GenerateRequest.tenant, HTTP X-Pagoda-Tenant, or the
//    tenant of its API key), is served, and is counted under its tenant's label in /metrics; a
//    bad tenant is refused naming the rule.
//  * With --max-predicted-wait-s tiny, once steps have been measured (a request completed) a
//    burst is refused: HTTP 429 with Retry-After >= 1, gRPC RESOURCE_EXHAUSTED with the
//    retry-after-s trailer, the same message on both.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;
using nlohmann::json;

struct CurlResult {
  int status = 0;  // HTTP status; 0 when curl got no answer
  std::string headers;
  std::string body;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// POSTs `body` to http://`address``path` with curl; `headers` are extra "Name: value" lines.
CurlResult Post(const std::string& dir, const std::string& address, const std::string& path,
                const json& body, const std::vector<std::string>& headers = {}) {
  static std::atomic<int> counter{0};
  const std::string base = absl::StrCat(dir, "/curl", counter++);
  std::ofstream(base + ".in", std::ios::binary) << body.dump();
  std::string command = absl::StrCat("curl -sS -D ", base, ".h -o ", base,
                                     ".b -w '%{http_code}' -H 'Content-Type: application/json' ");
  for (const std::string& h : headers) absl::StrAppend(&command, "-H '", h, "' ");
  absl::StrAppend(&command, "--data-binary @", base, ".in 'http://", address, path,
                  "' 2>/dev/null");
  CurlResult r;
  if (FILE* p = popen(command.c_str(), "r")) {
    char code[16] = {};
    if (fgets(code, sizeof(code), p) != nullptr) r.status = std::atoi(code);
    pclose(p);
  }
  r.headers = ReadAll(base + ".h");
  r.body = ReadAll(base + ".b");
  return r;
}

// A gRPC Generate call's status and trailing metadata.
struct GrpcOutcome {
  grpc::Status status;
  std::multimap<std::string, std::string> trailers;
  int tokens = 0;
};

GrpcOutcome Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& request) {
  GrpcOutcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) out.tokens += response.token_ids_size();
  out.status = reader->Finish();
  for (const auto& [key, value] : ctx.GetServerTrailingMetadata()) {
    out.trailers.emplace(std::string(key.data(), key.size()),
                         std::string(value.data(), value.size()));
  }
  return out;
}

v1::GenerateRequest IdsRequest(uint32_t max_tokens, const std::string& tenant = "") {
  v1::GenerateRequest r;
  for (int32_t id : {1, 2, 3, 4, 5}) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.set_tenant(tenant);
  return r;
}

json HttpRequest(int max_tokens) {
  return {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
}

// The value of the series written exactly as `series` in a scrape; nullopt when absent.
std::optional<double> Series(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) != 0) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
  }
  return std::nullopt;
}

// The value of the header `name` in curl's dump of the answer's headers; "" when absent.
std::string Header(const std::string& headers, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(headers, m, std::regex("(^|\n)" + name + ": *([^\r\n]*)"))) return "";
  return m[2];
}

class TenancyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tenancy");
    model_ = dir_ + "/model.gguf";
    std::string error;
    ASSERT_TRUE(MakeRandomModel(model_,
                                {"--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "1",
                                 "--ffn-dim", "64", "--vocab", "300", "--context", "1024"},
                                &error))
        << error;
  }

  void Start(std::vector<std::string> scheduler_flags, int step_ms) {
    scheduler_flags.insert(scheduler_flags.end(), {"--http-listen", "127.0.0.1:0",
                                                   "--http-port-file", dir_ + "/http-port"});
    ClusterOptions options;
    options.model = model_;
    options.scheduler_flags = std::move(scheduler_flags);
    options.worker_flags = {"--backend", "synthetic", "--synthetic-step-ms", absl::StrCat(step_ms)};
    options.metrics = true;
    std::string error;
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
    const int port = ReadPortFile(dir_ + "/http-port", cluster_->scheduler());
    ASSERT_GT(port, 0) << cluster_->Logs();
    http_ = absl::StrCat("127.0.0.1:", port);
  }

  std::string Metrics() {
    std::string body;
    EXPECT_EQ(
        HttpGet(absl::StrCat("127.0.0.1:", cluster_->scheduler_metrics_port()), "/metrics", &body),
        200);
    return body;
  }

  std::string dir_;
  std::string model_;
  std::string http_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(TenancyE2eTest, RequestsAreServedAndCountedUnderTheirTenant) {
  const std::string keys = dir_ + "/keys.txt";
  std::ofstream(keys) << "# two keys\nplain-key\nteam-key tenant=keyed-team\n";
  const std::string weights = dir_ + "/weights.txt";
  std::ofstream(weights) << "heavy 4  # never sends\nhttp-team 1\n";
  ASSERT_NO_FATAL_FAILURE(
      Start({"--api-key-file", keys, "--tenant-weights", weights, "--max-tenant-labels", "2"},
            /*step_ms=*/2));
  const std::string plain = "Authorization: Bearer plain-key";
  // HTTP: the header names the tenant; else the key's tenant; else "default".
  CurlResult by_header =
      Post(dir_, http_, "/v1/completions", HttpRequest(4), {plain, "X-Pagoda-Tenant: http-team"});
  ASSERT_EQ(by_header.status, 200) << by_header.body;
  CurlResult by_key =
      Post(dir_, http_, "/v1/completions", HttpRequest(3), {"Authorization: Bearer team-key"});
  ASSERT_EQ(by_key.status, 200) << by_key.body;
  CurlResult by_default = Post(dir_, http_, "/v1/completions", HttpRequest(2), {plain});
  ASSERT_EQ(by_default.status, 200) << by_default.body;
  // gRPC: the field (this server's gRPC API has no API keys).
  GrpcOutcome grpc = Generate(cluster_->stub(), IdsRequest(5, "grpc-team"));
  ASSERT_OK(grpc.status);
  EXPECT_EQ(grpc.tokens, 5);
  // Labels go first seen first, as scrapes see the tenants: keyed-team and grpc-team now.
  Metrics();
  // Two more unnamed tenants than --max-tenant-labels leaves room for: summed under "other".
  ASSERT_OK(Generate(cluster_->stub(), IdsRequest(1, "third")).status);
  ASSERT_OK(Generate(cluster_->stub(), IdsRequest(1, "fourth")).status);

  const std::string text = Metrics();
  auto served = [&](const std::string& tenant) {
    return Series(text, "pagoda_tenant_served_tokens_total{tenant=\"" + tenant + "\"}");
  };
  EXPECT_GE(served("http-team").value_or(0), 4) << text;
  EXPECT_GE(served("grpc-team").value_or(0), 5) << text;
  EXPECT_GE(served("keyed-team").value_or(0), 3) << text;
  EXPECT_GE(served("default").value_or(0), 2) << text;
  EXPECT_EQ(served("heavy"), 0) << "named in --tenant-weights: shown from the start";
  // grpc-team and keyed-team took the two free labels (first seen first); third and fourth
  // came later.
  EXPECT_FALSE(served("third")) << text;
  EXPECT_FALSE(served("fourth")) << text;
  EXPECT_GE(served("other").value_or(0), 2) << text;
  EXPECT_EQ(Series(text, R"(pagoda_tenant_queued_requests{tenant="http-team"})"), 0);
  EXPECT_EQ(Series(text, R"(pagoda_tenant_running_sequences{tenant="grpc-team"})"), 0);

  // A bad tenant is refused on both APIs, naming the header or the field and the rule.
  CurlResult bad = Post(dir_, http_, "/v1/completions", HttpRequest(2),
                        {plain, "X-Pagoda-Tenant: no spaces please"});
  EXPECT_EQ(bad.status, 400) << bad.body;
  const json error = json::parse(bad.body, nullptr, false);
  ASSERT_TRUE(error.contains("error")) << bad.body;
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["param"], "X-Pagoda-Tenant");
  EXPECT_NE(error["error"]["message"].get<std::string>().find(
                "the X-Pagoda-Tenant header must be 1 to 64 bytes of [A-Za-z0-9._:-]"),
            std::string::npos)
      << bad.body;
  GrpcOutcome bad_grpc = Generate(cluster_->stub(), IdsRequest(2, std::string(65, 't')));
  EXPECT_EQ(bad_grpc.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad_grpc.status.error_message().find("tenant must be 1 to 64 bytes"), std::string::npos)
      << bad_grpc.status.error_message();
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// The core predicts nothing before it has measured a step, so what arrives first is admitted:
// a short request and, right behind it, a burst of long ones that queue behind the one running
// slot. Once the short one has completed (steps measured), new requests are refused with the
// predicted wait and when to retry.
TEST_F(TenancyE2eTest, PredictedWaitAdmissionRefusesWithRetryAfter) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--max-predicted-wait-s", "0.001", "--max-running", "1"}, /*step_ms=*/20));
  std::optional<GrpcOutcome> first;
  std::thread short_one([&] { first = Generate(cluster_->stub(), IdsRequest(4)); });
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (cluster_->Status().requests_running() == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // The burst: admitted if it arrives before the first result (nothing measured yet), refused
  // after; either way the probes below see a measured, busy scheduler.
  std::vector<std::thread> burst;
  std::atomic<int> admitted{0};
  for (int i = 0; i < 3; ++i) {
    burst.emplace_back([&] {
      if (Generate(cluster_->stub(), IdsRequest(60)).status.ok()) ++admitted;
    });
  }
  short_one.join();
  ASSERT_OK(first->status) << "nothing measured yet, nothing predicted";

  CurlResult http = Post(dir_, http_, "/v1/completions", HttpRequest(8));
  EXPECT_EQ(http.status, 429) << http.headers << http.body;
  int64_t retry_after = 0;
  EXPECT_TRUE(absl::SimpleAtoi(Header(http.headers, "Retry-After"), &retry_after)) << http.headers;
  EXPECT_GE(retry_after, 1);
  const json error = json::parse(http.body, nullptr, false);
  ASSERT_TRUE(error.contains("error")) << http.body;
  EXPECT_EQ(error["error"]["type"], "rate_limit_error");
  EXPECT_EQ(error["error"]["code"], "predicted_wait_too_long");
  const std::string message = error["error"]["message"];
  // The message names the prediction and the limit.
  EXPECT_NE(message.find("predicted time to first token"), std::string::npos) << message;
  EXPECT_NE(message.find("--max-predicted-wait-s"), std::string::npos) << message;

  GrpcOutcome grpc = Generate(cluster_->stub(), IdsRequest(8));
  EXPECT_EQ(grpc.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << grpc.status.error_message();
  EXPECT_NE(grpc.status.error_message().find("--max-predicted-wait-s"), std::string::npos)
      << grpc.status.error_message();
  const auto trailer = grpc.trailers.find("retry-after-s");
  ASSERT_NE(trailer, grpc.trailers.end()) << "no retry-after-s trailer";
  int64_t seconds = 0;
  EXPECT_TRUE(absl::SimpleAtoi(trailer->second, &seconds)) << trailer->second;
  EXPECT_GE(seconds, 1);
  for (std::thread& t : burst) t.join();
  std::printf("refused: %s (Retry-After %lld s; %d of the burst were admitted)\n", message.c_str(),
              static_cast<long long>(retry_after), admitted.load());
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10)));
}

}  // namespace
}  // namespace pagoda::testing
