// pagoda-scheduler: the public gRPC API, continuous batching and the KV page tables.
//
//   pagoda-scheduler --listen HOST:PORT --model PATH [--max-batch-tokens N] [--max-running N]
//                    [--max-prefill-chunk N] [--max-queued-requests N]
//                    [--max-queued-prompt-tokens N] [--aging-interval-s S]
//                    [--max-preemptions-in-row N] [--max-plans-in-flight N] [--log-level info]
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "scheduler/service/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "address to serve the API and worker link on");
ABSL_FLAG(std::string, model, "", "GGUF model file (the workers must load the same file)");
ABSL_FLAG(int32_t, max_batch_tokens, 2048, "input tokens per iteration per worker");
ABSL_FLAG(int32_t, max_running, 256, "running sequences per worker");
ABSL_FLAG(int32_t, max_prefill_chunk, 512, "prefill tokens per sequence per iteration");
ABSL_FLAG(int32_t, max_queued_requests, 4096,
          "requests waiting at most; past it new requests get RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_queued_prompt_tokens, int64_t{1} << 22,
          "prompt tokens waiting at most; past it new requests get RESOURCE_EXHAUSTED");
ABSL_FLAG(double, aging_interval_s, 10,
          "seconds of waiting that raise a request one priority class (bounds the wait of low "
          "priority under a stream of higher ones); 0 = off");
ABSL_FLAG(int32_t, max_preemptions_in_row, 3,
          "times a sequence may be preempted without generating a token before it is spared");
ABSL_FLAG(int32_t, max_plans_in_flight, 2,
          "plans per worker in flight: 2 overlaps planning with execution, 1 turns overlap off");
ABSL_FLAG(double, shutdown_grace_s, 5, "seconds in-flight calls get after SIGTERM/SIGINT");
ABSL_FLAG(std::string, port_file, "",
          "after binding, write the port here (for --listen HOST:0 in scripts and tests)");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "pagoda-scheduler: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::common::BlockTerminationSignals();
  absl::SetProgramUsageMessage("pagoda-scheduler --listen HOST:PORT --model PATH");
  pagoda::common::ParseFlags(argc, argv);
  pagoda::common::LogLevel level;
  if (!pagoda::common::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    return Fail("--log-level must be debug, info, warning or error");
  }
  pagoda::common::SetLogLevel(level);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) return Fail("--model PATH is required");

  pagoda::scheduler::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.scheduler.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  options.scheduler.max_prefill_chunk = absl::GetFlag(FLAGS_max_prefill_chunk);
  options.scheduler.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  options.scheduler.max_queued_prompt_tokens = absl::GetFlag(FLAGS_max_queued_prompt_tokens);
  options.scheduler.aging_interval = absl::GetFlag(FLAGS_aging_interval_s);
  options.scheduler.max_preemptions_in_row = absl::GetFlag(FLAGS_max_preemptions_in_row);
  options.scheduler.max_plans_in_flight = absl::GetFlag(FLAGS_max_plans_in_flight);
  const auto& o = options.scheduler;
  if (o.max_batch_tokens <= 0 || o.max_running <= 0 || o.max_prefill_chunk <= 0 ||
      o.max_queued_requests <= 0 || o.max_queued_prompt_tokens <= 0 ||
      o.max_preemptions_in_row <= 0) {
    return Fail(
        "--max-batch-tokens, --max-running, --max-prefill-chunk, --max-queued-requests, "
        "--max-queued-prompt-tokens and --max-preemptions-in-row must be positive");
  }
  if (o.max_plans_in_flight < 1 || o.max_plans_in_flight > 2) {
    return Fail("--max-plans-in-flight must be 1 (no overlap) or 2");
  }

  auto model = pagoda::scheduler::LoadServedModel(model_path);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  pagoda::scheduler::SchedulerServer server(std::move(options), *std::move(model));
  if (absl::Status s = server.Start(); !s.ok()) return Fail(std::string(s.message()));
  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    // Write then rename, so a reader never sees a partial file.
    const std::string tmp = port_file + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%d\n", server.port()) < 0 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      return Fail("cannot write --port-file " + port_file);
    }
  }

  const int sig = pagoda::common::WaitForTerminationSignal();
  PAGODA_LOG(kInfo, "scheduler", "signal %d: shutting down", sig);
  server.Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s)));
  server.Wait();
  PAGODA_LOG(kInfo, "scheduler", "stopped");
  return 0;
}
