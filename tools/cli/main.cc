// pagoda-cli: a command-line client for pagoda.v1.Generation.
//
//   pagoda-cli generate --server HOST:PORT --prompt TEXT [--max-tokens N] [--temperature T]
//              [--top-k K] [--top-p P] [--min-p P] [--seed S] [--presence-penalty X]
//              [--frequency-penalty X] [--repetition-penalty R] [--logprobs N] [--json]
//   pagoda-cli tokenize --server HOST:PORT --prompt TEXT
//   pagoda-cli info     --server HOST:PORT
//   pagoda-cli status   --server HOST:PORT
//
// Every command takes --tls-ca PEM (TLS, verifying the scheduler with that CA) and, for a
// scheduler that requires client certificates, --tls-cert PEM --tls-key PEM.
#include <grpcpp/grpcpp.h>

#include <cctype>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/tls.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "scheduler address");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(uint32_t, max_tokens, 64, "tokens to generate at most (0 = up to the context)");
ABSL_FLAG(float, temperature, 0, "0 = greedy");
ABSL_FLAG(int32_t, top_k, 0, "0 = off");
ABSL_FLAG(float, top_p, 1, "1 = off");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(float, min_p, 0, "0 = off");
ABSL_FLAG(float, presence_penalty, 0, "[-2, 2], 0 = off");
ABSL_FLAG(float, frequency_penalty, 0, "[-2, 2], 0 = off");
ABSL_FLAG(float, repetition_penalty, 0, "0 or 1 = off");
ABSL_FLAG(int32_t, logprobs, -1,
          "-1 = off; N in 0..20: each token's logprob and N alternatives (shown with --json)");
ABSL_FLAG(std::string, stop_token_ids, "", "comma-separated token ids that end generation");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "comma-separated stop strings: generation ends before the first match, which is not "
          "printed");
ABSL_FLAG(std::string, priority, "normal", "low, normal, high or critical");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past EOS");
ABSL_FLAG(std::string, request_id, "", "client request id, echoed back");
ABSL_FLAG(double, timeout_s, 0, "deadline in seconds (0 = none)");
ABSL_FLAG(bool, json, false, "one JSON object per line instead of plain text");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that verify the scheduler: connect over TLS (empty, with no "
          "--tls-cert either: plaintext)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain, for a scheduler that requires one");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");

namespace {

namespace v1 = pagoda::v1;
using nlohmann::json;

int Fail(const grpc::Status& status) {
  std::fprintf(stderr, "pagoda-cli: %s (%d): %s\n",
               status.error_code() == grpc::StatusCode::UNAVAILABLE ? "UNAVAILABLE" : "error",
               static_cast<int>(status.error_code()), status.error_message().c_str());
  return 1;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "pagoda-cli: %s\n%s\n", message.c_str(), absl::ProgramUsageMessage().data());
  return 2;
}

const char* ReasonName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    case v1::FINISH_REASON_CONTEXT:
      return "context";
    case v1::FINISH_REASON_STOP_STRING:
      return "stop_string";
    default:
      return "unspecified";
  }
}

bool BuildRequest(v1::GenerateRequest* req, std::string* error) {
  req->set_text(absl::GetFlag(FLAGS_prompt));
  req->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  req->mutable_sampling()->set_temperature(absl::GetFlag(FLAGS_temperature));
  req->mutable_sampling()->set_top_k(absl::GetFlag(FLAGS_top_k));
  req->mutable_sampling()->set_top_p(absl::GetFlag(FLAGS_top_p));
  req->mutable_sampling()->set_seed(absl::GetFlag(FLAGS_seed));
  req->mutable_sampling()->set_min_p(absl::GetFlag(FLAGS_min_p));
  req->mutable_sampling()->set_presence_penalty(absl::GetFlag(FLAGS_presence_penalty));
  req->mutable_sampling()->set_frequency_penalty(absl::GetFlag(FLAGS_frequency_penalty));
  req->mutable_sampling()->set_repetition_penalty(absl::GetFlag(FLAGS_repetition_penalty));
  if (absl::GetFlag(FLAGS_logprobs) >= 0) {
    req->set_logprobs(true);
    req->set_top_logprobs(static_cast<uint32_t>(absl::GetFlag(FLAGS_logprobs)));
  }
  req->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  req->set_request_id(absl::GetFlag(FLAGS_request_id));
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_stop_token_ids), ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      *error = "--stop-token-ids must be comma-separated integers";
      return false;
    }
    req->add_stop_token_ids(id);
  }
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) req->add_stop(stop);
  const std::string p = absl::GetFlag(FLAGS_priority);
  std::string upper;
  for (char c : p) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  v1::Priority priority;
  if (upper == "UNSPECIFIED" || !v1::Priority_Parse("PRIORITY_" + upper, &priority)) {
    *error = "--priority must be low, normal, high or critical";
    return false;
  }
  req->set_priority(priority);
  return true;
}

json FinishedJson(const v1::Finished& f) {
  return json{{"finish_reason", ReasonName(f.reason())},
              {"usage",
               {{"prompt_tokens", f.usage().prompt_tokens()},
                {"completion_tokens", f.usage().completion_tokens()},
                {"cached_tokens", f.usage().cached_tokens()}}},
              {"matched_stop", f.matched_stop()},
              {"stats",
               {{"queue_seconds", f.stats().queue_seconds()},
                {"time_to_first_token_s", f.stats().time_to_first_token_s()},
                {"mean_time_per_output_token_s", f.stats().mean_time_per_output_token_s()},
                {"e2e_seconds", f.stats().e2e_seconds()},
                {"preemptions", f.stats().preemptions()}}}};
}

int Generate(v1::Generation::Stub& stub) {
  v1::GenerateRequest req;
  std::string error;
  if (!BuildRequest(&req, &error)) return Usage(error);
  grpc::ClientContext ctx;
  if (absl::GetFlag(FLAGS_timeout_s) > 0) {
    ctx.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000)));
  }
  const bool as_json = absl::GetFlag(FLAGS_json);
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (as_json) {
      for (int i = 0; i < resp.token_ids_size(); ++i) {
        const bool last = i + 1 == resp.token_ids_size();
        json line{{"token_id", resp.token_ids(i)}, {"text", last ? resp.text() : ""}};
        if (i < resp.logprobs_size()) {
          json top = json::array();
          for (const auto& t : resp.logprobs(i).top()) {
            top.push_back({{"token_id", t.token_id()}, {"logprob", t.logprob()}});
          }
          line["logprob"] = resp.logprobs(i).logprob();
          line["top_logprobs"] = std::move(top);
        }
        std::cout << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
      }
      if (resp.has_finished()) std::cout << FinishedJson(resp.finished()).dump() << "\n";
    } else {
      std::cout << resp.text();
      if (resp.has_finished()) std::cout << "\n";
    }
    std::cout.flush();
  }
  grpc::Status status = reader->Finish();
  return status.ok() ? 0 : Fail(status);
}

int Tokenize(v1::Generation::Stub& stub) {
  v1::TokenizeRequest req;
  req.set_text(absl::GetFlag(FLAGS_prompt));
  req.set_add_bos(true);
  v1::TokenizeResponse resp;
  grpc::ClientContext ctx;
  grpc::Status status = stub.Tokenize(&ctx, req, &resp);
  if (!status.ok()) return Fail(status);
  json out{{"token_ids", resp.token_ids()}, {"pieces", resp.pieces()}};
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

int Info(v1::Generation::Stub& stub) {
  v1::ModelInfo info;
  grpc::ClientContext ctx;
  grpc::Status status = stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return Fail(status);
  json special = json::array();
  for (const v1::SpecialToken& t : info.special_tokens()) {
    special.push_back({{"id", t.id()}, {"piece", t.piece()}, {"control", t.control()}});
  }
  std::cout << json{{"name", info.name()},
                    {"architecture", info.architecture()},
                    {"fingerprint", info.fingerprint()},
                    {"vocab_size", info.vocab_size()},
                    {"context_length", info.context_length()},
                    {"bos_token_id", info.bos_token_id()},
                    {"eos_token_id", info.eos_token_id()},
                    {"eot_token_id", info.eot_token_id()},
                    {"eom_token_id", info.eom_token_id()},
                    {"end_of_generation_token_ids", info.end_of_generation_token_ids()},
                    {"tokenizer", info.tokenizer()},
                    {"pre_tokenizer", info.pre_tokenizer()},
                    {"special_tokens", special},
                    {"attached_workers", info.attached_workers()}}
                   .dump(-1, ' ', false, json::error_handler_t::replace)
            << "\n";
  return 0;
}

int Status(v1::Generation::Stub& stub) {
  v1::ServerStatus s;
  grpc::ClientContext ctx;
  grpc::Status status = stub.GetServerStatus(&ctx, v1::GetServerStatusRequest(), &s);
  if (!status.ok()) return Fail(status);
  json workers = json::array();
  for (const auto& w : s.workers()) {
    workers.push_back({{"worker_id", w.worker_id()},
                       {"name", w.name()},
                       {"page_size", w.page_size()},
                       {"kv_pages_total", w.kv_pages_total()},
                       {"kv_pages_free", w.kv_pages_free()}});
  }
  std::cout << json{{"requests_waiting", s.requests_waiting()},
                    {"requests_running", s.requests_running()},
                    {"workers", workers}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "usage: pagoda-cli generate|tokenize|info|status --server HOST:PORT [--prompt TEXT] "
      "[--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S] "
      "[--presence-penalty X] [--frequency-penalty X] [--repetition-penalty R] [--logprobs N] "
      "[--json] "
      "[--tls-ca PEM [--tls-cert PEM --tls-key PEM]]");
  std::vector<char*> args = pagoda::common::ParseFlags(argc, argv);
  if (args.size() != 2) return Usage("expected exactly one command");
  const std::string command = args[1];
  absl::StatusOr<pagoda::common::TlsConfig> tls = pagoda::common::LoadTlsConfig(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)},
      pagoda::common::TlsSide::kClient);
  if (!tls.ok()) return Usage(std::string(tls.status().message()));
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server),
                                     pagoda::common::MakeChannelCredentials(*tls));
  auto stub = v1::Generation::NewStub(channel);
  if (command == "generate") return Generate(*stub);
  if (command == "tokenize") return Tokenize(*stub);
  if (command == "info") return Info(*stub);
  if (command == "status") return Status(*stub);
  return Usage("unknown command \"" + command + "\"");
}
