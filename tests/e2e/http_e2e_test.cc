// End-to-end over the OpenAI-compatible HTTP API (--http-listen), driven with curl: real
// scheduler and worker processes, the trained test model's golden text through /v1/completions,
// OpenAI's error JSON and statuses, n > 1, stop strings, response_format json_schema, a client that
// disconnects mid-stream, queue limits (429) and the drain (503) on synthetic workers.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/e2e/trained_model.h"

namespace pagoda::testing {
namespace {

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

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs curl with `args` against http://`address``path`; a POST when `body` is given.
CurlResult Curl(const std::string& dir, const std::string& address, const std::string& path,
                const std::optional<std::string>& body, const std::string& args = "") {
  static std::atomic<int> counter{0};
  const std::string base = absl::StrCat(dir, "/curl", counter++);
  std::string command =
      absl::StrCat("curl -sS -N -D ", base, ".h -o ", base, ".b -w '%{http_code}' ", args, " ");
  if (body) {
    std::ofstream(base + ".in", std::ios::binary) << *body;
    absl::StrAppend(&command, "-H 'Content-Type: application/json' --data-binary @", base, ".in ");
  }
  absl::StrAppend(&command, Quote(absl::StrCat("http://", address, path)), " 2>/dev/null");
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

// The JSON events of a server-sent-event body, and whether it ended with [DONE].
std::vector<json> Events(const std::string& body, bool* done) {
  std::vector<json> events;
  *done = false;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(json::parse(line));
  }
  return events;
}

class HttpE2eTest : public TrainedModelTest {
 protected:
  void StartHttp(std::vector<std::string> flags = {}) {
    dir_ = MakeTempDir("http");
    flags.insert(flags.end(), {"--http-listen", "127.0.0.1:0", "--http-port-file",
                               dir_ + "/http-port", "--served-model-name", "stories"});
    ASSERT_NO_FATAL_FAILURE(StartCluster(flags));
    const int port = ReadPortFile(dir_ + "/http-port", cluster_->scheduler());
    ASSERT_GT(port, 0) << cluster_->Logs();
    http_ = absl::StrCat("127.0.0.1:", port);
  }
  CurlResult Post(const std::string& path, const json& body, const std::string& args = "") {
    return Curl(dir_, http_, path, body.dump(), args);
  }

  std::string dir_;
  std::string http_;
};

// The golden greedy completions, whole and streamed, with the usage OpenAI defines.
TEST_F(HttpE2eTest, GoldenGreedyCompletions) {
  ASSERT_NO_FATAL_FAILURE(StartHttp());
  CurlResult health = Curl(dir_, http_, "/health", std::nullopt);
  EXPECT_EQ(health.status, 200) << health.body;
  CurlResult models = Curl(dir_, http_, "/v1/models", std::nullopt);
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "stories");
  // Response ids: "cmpl-", the process's random tag, the request's number; each answer its own,
  // every chunk of a stream the same.
  const std::regex id_form("cmpl-[0-9a-f]{16}-[0-9]+");
  std::set<std::string> ids;
  for (const auto& c : LoadGolden(*golden_)["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    json request = {{"model", "stories"},
                    {"prompt", c["prompt"]},
                    {"max_tokens", c["max_tokens"]},
                    {"temperature", 0}};
    CurlResult whole = Post("/v1/completions", request);
    ASSERT_EQ(whole.status, 200) << whole.body << cluster_->Logs();
    json answer = json::parse(whole.body);
    EXPECT_EQ(answer["object"], "text_completion");
    EXPECT_EQ(answer["choices"][0]["text"], c["expected_text"]);
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(answer["usage"]["prompt_tokens"], c["prompt_token_ids"].size());
    EXPECT_EQ(answer["usage"]["completion_tokens"], c["max_tokens"]);
    EXPECT_TRUE(answer["usage"]["prompt_tokens_details"].contains("cached_tokens"));
    EXPECT_TRUE(std::regex_match(answer["id"].get<std::string>(), id_form)) << answer["id"];
    EXPECT_TRUE(ids.insert(answer["id"]).second) << answer["id"];

    // The same prompt as token ids, streamed with the usage chunk.
    request["prompt"] = c["prompt_token_ids"];
    request["stream"] = true;
    request["stream_options"] = {{"include_usage", true}};
    CurlResult streamed = Post("/v1/completions", request);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    EXPECT_NE(streamed.headers.find("text/event-stream"), std::string::npos);
    bool done = false;
    std::vector<json> events = Events(streamed.body, &done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 2u);
    std::string text;
    EXPECT_TRUE(ids.insert(events[0]["id"]).second) << events[0]["id"];
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      text += events[i]["choices"][0]["text"].get<std::string>();
      EXPECT_TRUE(events[i]["usage"].is_null());
      EXPECT_EQ(events[i]["id"], events[0]["id"]);
    }
    EXPECT_EQ(text, c["expected_text"]);
    EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(events.back()["choices"].empty());
    EXPECT_EQ(events.back()["usage"]["completion_tokens"], c["max_tokens"]);
  }
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// n > 1 and stop strings: each choice has its index and end; a stop string ends the text
// before it with finish_reason "stop".
TEST_F(HttpE2eTest, SeveralChoicesAndStopStrings) {
  ASSERT_NO_FATAL_FAILURE(StartHttp());
  const json golden = LoadGolden(*golden_)["cases"][0];
  const std::string expected = golden["expected_text"];
  CurlResult r = Post("/v1/completions", {{"prompt", golden["prompt"]},
                                          {"max_tokens", 48},
                                          {"temperature", 0},
                                          {"n", 3},
                                          {"stop", "Lily"}});
  ASSERT_EQ(r.status, 200) << r.body;
  json answer = json::parse(r.body);
  ASSERT_EQ(answer["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(answer["choices"][i]["index"], i);
    EXPECT_EQ(answer["choices"][i]["text"], expected.substr(0, expected.find("Lily")));
    EXPECT_EQ(answer["choices"][i]["finish_reason"], "stop");
  }
  // Streamed with sampling: every choice streams to its own end.
  r = Post("/v1/completions", {{"prompt", golden["prompt"]},
                               {"max_tokens", 12},
                               {"temperature", 0.9},
                               {"seed", 7},
                               {"n", 4},
                               {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::vector<json> events = Events(r.body, &done);
  EXPECT_TRUE(done);
  std::vector<int> ends(4, 0);
  for (const json& e : events) {
    const json& choice = e["choices"][0];
    if (!choice["finish_reason"].is_null()) ++ends[choice["index"].get<int>()];
  }
  EXPECT_EQ(ends, std::vector<int>(4, 1));
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Structured outputs over HTTP: response_format json_schema gives JSON the schema accepts,
// whole and streamed, with finish_reason "stop"; a schema keyword that cannot be enforced is a
// 400 naming it.
TEST_F(HttpE2eTest, ResponseFormatJsonSchema) {
  ASSERT_NO_FATAL_FAILURE(StartHttp());
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"color", {{"enum", {"red", "green", "blue"}}}},
                         {"count", {{"type", "integer"}, {"minimum", 1}, {"maximum", 9}}}}},
                       {"required", {"color", "count"}},
                       {"additionalProperties", false}};
  json request = {{"prompt", "Once upon a time"},
                  {"max_tokens", 64},
                  {"temperature", 1.0},
                  {"seed", 5},
                  {"response_format",
                   {{"type", "json_schema"},
                    {"json_schema", {{"name", "pick"}, {"strict", true}, {"schema", schema}}}}}};
  auto check = [](const std::string& text) {
    const json answer = json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(answer.is_object()) << text;
    EXPECT_EQ(answer.size(), 2u) << text;
    EXPECT_TRUE(answer["color"] == "red" || answer["color"] == "green" || answer["color"] == "blue")
        << text;
    ASSERT_TRUE(answer["count"].is_number_integer()) << text;
    EXPECT_GE(answer["count"].get<int>(), 1);
    EXPECT_LE(answer["count"].get<int>(), 9);
  };
  CurlResult r = Post("/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.body << cluster_->Logs();
  json answer = json::parse(r.body);
  check(answer["choices"][0]["text"]);
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
  request["stream"] = true;
  request["seed"] = 6;
  r = Post("/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::string text;
  for (const json& e : Events(r.body, &done)) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(done);
  check(text);
  request["response_format"]["json_schema"]["schema"]["properties"]["count"]["multipleOf"] = 2;
  r = Post("/v1/completions", request);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("multipleOf"), std::string::npos) << r.body;
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// OpenAI's error JSON with the right statuses; the key is needed everywhere but /health.
TEST_F(HttpE2eTest, ErrorsAreOpenAiErrors) {
  const std::string key_file = MakeTempDir("http-key") + "/key";
  std::ofstream(key_file) << "sesame\n";
  ASSERT_NO_FATAL_FAILURE(StartHttp({"--api-key-file", key_file, "--http-max-body-bytes", "2048"}));
  const std::string auth = "-H 'Authorization: Bearer sesame'";
  auto expect_error = [&](const CurlResult& r, int status, const std::string& words,
                          const std::string& param) {
    SCOPED_TRACE(r.body);
    EXPECT_EQ(r.status, status);
    json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.contains("error"));
    EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos);
    EXPECT_TRUE(e["error"].contains("type") && e["error"].contains("code"));
    if (!param.empty()) {
      EXPECT_EQ(e["error"]["param"], param);
    }
  };
  const json ok = {{"prompt", "Once"}, {"max_tokens", 2}};
  EXPECT_EQ(Curl(dir_, http_, "/health", std::nullopt).status, 200);
  CurlResult r = Post("/v1/completions", ok);
  expect_error(r, 401, "API key", "");
  EXPECT_NE(r.headers.find("WWW-Authenticate: Bearer"), std::string::npos);
  expect_error(Post("/v1/completions", ok, "-H 'Authorization: Bearer nope'"), 401, "API key", "");
  EXPECT_EQ(Post("/v1/completions", ok, auth).status, 200);
  expect_error(Curl(dir_, http_, "/v1/completions", std::string("{\"prompt\": "), auth), 400,
               "not valid JSON", "");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", "2"}}, auth), 400,
               "max_tokens must be an integer", "max_tokens");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"temperature", 500}}, auth), 400,
               "temperature must be in [0, 100]", "temperature");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 100000}}, auth), 400,
               "exceeds the model context of 512 tokens", "");
  expect_error(Post("/v1/completions", {{"prompt", {"a", "b"}}}, auth), 400, "one prompt",
               "prompt");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"echo", true}}, auth), 400,
               "echo is not supported", "echo");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"max_tokenz", 3}}, auth), 400,
               "unknown field 'max_tokenz'", "max_tokenz");
  expect_error(Post("/v1/completions", {{"prompt", "Once"}, {"model", "gpt-4"}}, auth), 404,
               "'gpt-4' does not exist", "model");
  expect_error(
      Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, auth),
      400, "--chat-template", "");
  expect_error(Curl(dir_, http_, "/v1/nothing", std::nullopt, auth), 404, "no such path", "");
  r = Curl(dir_, http_, "/v1/completions", std::nullopt, auth);
  expect_error(r, 405, "POST", "");
  EXPECT_NE(r.headers.find("Allow: POST"), std::string::npos);
  expect_error(Post("/v1/completions", {{"prompt", std::string(4096, 'a')}}, auth), 413,
               "--http-max-body-bytes", "");
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Chat with --chat-template: the rendered conversation is the prompt (BOS written by the
// template, not doubled), whole and streamed answers agree, the first delta carries the role, and
// a template's raise_exception is a 400 with its message.
TEST_F(HttpE2eTest, ChatWithTemplate) {
  const std::string template_file = MakeTempDir("http-chat") + "/template.jinja";
  std::ofstream(template_file)
      << "{% if messages[0]['role'] != 'user' %}{{ raise_exception('the first message must be "
         "from the user') }}{% endif %}{{ bos_token }}{% for m in messages %}{{ m['content'] }}"
         "{% if not loop.last %} {% endif %}{% endfor %}";
  ASSERT_NO_FATAL_FAILURE(StartHttp({"--chat-template", template_file}));
  const json golden = LoadGolden(*golden_)["cases"][0];
  // The template renders "<s>Once upon a time": the golden case's prompt, with its one BOS.
  const json chat = {{"model", "stories"},
                     {"messages", {{{"role", "user"}, {"content", golden["prompt"]}}}},
                     {"max_completion_tokens", golden["max_tokens"]},
                     {"temperature", 0}};
  CurlResult r = Post("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body << cluster_->Logs();
  json answer = json::parse(r.body);
  EXPECT_EQ(answer["object"], "chat.completion");
  EXPECT_EQ(answer["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], golden["expected_text"]);
  EXPECT_EQ(answer["usage"]["prompt_tokens"], golden["prompt_token_ids"].size());

  json streamed = chat;
  streamed["stream"] = true;
  r = Post("/v1/chat/completions", streamed);
  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::vector<json> events = Events(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& e : events) {
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, golden["expected_text"]);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");

  r = Post("/v1/chat/completions",
           {{"messages", {{{"role", "system"}, {"content", "You tell stories."}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("the first message must be from the user"), std::string::npos) << r.body;
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

// Synthetic workers with slow steps: long streams that tests can interrupt.
class HttpSyntheticTest : public HttpE2eTest {
 protected:
  void SetUp() override {
    model_ = MakeTempDir("http-model") + "/model.gguf";
    std::string error;
    ASSERT_TRUE(MakeRandomModel(*model_,
                                {"--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "1",
                                 "--ffn-dim", "64", "--vocab", "300", "--context", "1024"},
                                &error))
        << error;
  }
  void StartSlow(std::vector<std::string> scheduler_flags) {
    dir_ = MakeTempDir("http-synthetic");
    scheduler_flags.insert(scheduler_flags.end(), {"--http-listen", "127.0.0.1:0",
                                                   "--http-port-file", dir_ + "/http-port"});
    ClusterOptions options;
    options.model = *model_;
    options.scheduler_flags = scheduler_flags;
    options.worker_flags = {"--backend", "synthetic", "--synthetic-step-ms", "20"};
    std::string error;
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
    const int port = ReadPortFile(dir_ + "/http-port", cluster_->scheduler());
    ASSERT_GT(port, 0);
    http_ = absl::StrCat("127.0.0.1:", port);
  }
  static json Long(bool stream) {
    return {{"prompt", {1, 2, 3}}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", stream}};
  }
};

// A client that goes away mid-stream (or while waiting for a whole answer) cancels its request:
// it leaves the engine and its pages are freed.
TEST_F(HttpSyntheticTest, DisconnectCancelsTheRequest) {
  ASSERT_NO_FATAL_FAILURE(StartSlow({}));
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "whole");
    const absl::Time start = absl::Now();
    CurlResult r = Post("/v1/completions", Long(stream), "--max-time 0.5");
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    if (stream) {
      EXPECT_NE(r.body.find("data: {"), std::string::npos);
    }
    // 1000 steps of 20 ms would take 20 s; the request leaves with the next plan (a step or
    // two; 500 ms leaves room for a loaded machine).
    const absl::Time gone = absl::Now();
    EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Milliseconds(500)))
        << cluster_->Status().DebugString();
    std::printf("idle %.0f ms after the client went away\n",
                absl::ToDoubleMilliseconds(absl::Now() - gone));
  }
  EXPECT_NE(cluster_->scheduler().Log().find("status=CANCELLED"), std::string::npos);
}

// Queue limits answer 429 with Retry-After; a drain answers 503 to new requests and /health
// while the admitted stream runs to its end.
TEST_F(HttpSyntheticTest, QueueLimitAndDrain) {
  ASSERT_NO_FATAL_FAILURE(StartSlow({"--max-running", "1", "--max-queued-requests", "1"}));
  json running = Long(true);
  running["max_tokens"] = 60;  // 1.2 s
  CurlResult first, second;
  std::thread a([&] { first = Post("/v1/completions", running); });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      if (cluster_->Status().requests_running() == 1) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }());
  std::thread b([&] { second = Post("/v1/completions", running); });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      if (cluster_->Status().requests_waiting() == 1) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }());
  CurlResult third = Post("/v1/completions", running);
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_NE(third.headers.find("Retry-After:"), std::string::npos);

  // The drain: the running and the queued stream finish; new requests get 503.
  cluster_->scheduler().Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(100));
  CurlResult refused = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(Curl(dir_, http_, "/health", std::nullopt).status, 503);
  a.join();
  b.join();
  for (const CurlResult* r : {&first, &second}) {
    EXPECT_EQ(r->status, 200);
    bool done = false;
    Events(r->body, &done);
    EXPECT_TRUE(done) << r->body;
  }
  EXPECT_EQ(cluster_->scheduler().Wait(absl::Seconds(10)), 0);
}

// 1,000 SSE streams held open at once, all answered to the end, with the scheduler's thread
// count independent of the number of streams.
TEST_F(HttpSyntheticTest, ThousandConcurrentStreams) {
  ASSERT_NO_FATAL_FAILURE(StartSlow({"--max-running", "1024", "--max-batch-tokens", "8192"}));
  auto threads = [&] {
    std::ifstream in(absl::StrCat("/proc/", cluster_->scheduler().pid(), "/status"));
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view rest(line);
      if (absl::ConsumePrefix(&rest, "Threads:")) return std::atoi(std::string(rest).c_str());
    }
    return -1;
  };
  const int idle_threads = threads();
  const std::string json_path = dir_ + "/load.json";
  ChildProcess load(
      {BinDir() + "/pagoda-http-load", "--address", http_, "--concurrency", "1000",
       "--num-requests", "1000", "--input-len", "8", "--output-len", "40", "--json", json_path},
      dir_ + "/load.log");
  ASSERT_TRUE(load.Start());
  int busy_threads = 0;
  for (int i = 0; i < 10 && load.Running(); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    busy_threads = std::max(busy_threads, threads());
  }
  EXPECT_EQ(load.Wait(absl::Seconds(60)), 0) << load.Log() << cluster_->Logs();
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << load.Log();
  const json result = json::parse(in);
  EXPECT_EQ(result["completed"], 1000);
  EXPECT_EQ(result["failed"], 0);
  EXPECT_EQ(result["output_tokens"], 40000);
  EXPECT_EQ(result["peak_open_streams"], 1000);
  // No thread per stream: a few more threads at most under load (gRPC may add one or two).
  EXPECT_LE(busy_threads, idle_threads + 8) << idle_threads << " idle";
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(5)));
}

}  // namespace
}  // namespace pagoda::testing
