// libFuzzer target: arbitrary bytes as a serialized pagoda.v1.GenerateRequest, through
// DecodeRequest (what the service does with a request's bytes) and GenerationService::Validate
// (the scheduler's request validation and tokenization). Invariants:
//  * DecodeRequest accepts the bytes or answers INVALID_ARGUMENT with a message (ill-formed
//    UTF-8 in a named field, no valid message, over the size limit); never anything else;
//  * Validate returns OK or INVALID_ARGUMENT with a message; never a crash;
//  * an accepted request keeps every limit: a non-empty prompt of in-vocabulary ids (the text's
//    tokenization with BOS, or the given ids), prompt < context and prompt + max_tokens <=
//    context, stop ids in the vocabulary, finite sampling parameters in range (penalties,
//    min_p, logit_bias ids and values, top_logprobs with logprobs included), and the core
//    Scheduler accepts it as it is.
// The served model is synthetic (kSyntheticFuzzVocab tokens, kContext positions), so a finding
// reproduces everywhere.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"
#include "google/protobuf/stubs/logging.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/core/scheduler.h"
#include "scheduler/engine/engine.h"
#include "scheduler/service/generation_service.h"
#include "scheduler/service/request_decoder.h"
#include "scheduler/service/served_model.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

namespace v1 = pagoda::v1;
using scheduler::NewRequest;

constexpr int32_t kContext = 256;
// Small, so that the size check is reached too.
constexpr size_t kMaxRequestBytes = 4096;

// The synthetic model, its engine and service, built once.
struct Fixture {
  Fixture() {
    // Protobuf logs every ill-formed UTF-8 string it refuses to parse; that is expected here.
    google::protobuf::SetLogHandler(nullptr);
    model.path = "<fuzz>";
    model.fingerprint = "0000000000000000";
    model.config.architecture = "llama";
    model.config.n_layers = 1;
    model.config.dim = 8;
    model.config.n_heads = 1;
    model.config.n_kv_heads = 1;
    model.config.head_dim = 8;
    model.config.ffn_dim = 16;
    model.config.vocab_size = kSyntheticFuzzVocab;
    model.config.context_length = kContext;
    scheduler::SchedulerOptions options;
    options.context_length = kContext;
    options.eos_id = model.tokenizer.eos_id();
    engine = std::make_unique<scheduler::Engine>(options, [] { return 0.0; });
    service = std::make_unique<scheduler::GenerationService>(engine.get(), &model);
    core = std::make_unique<scheduler::Scheduler>(options);
  }

  scheduler::ServedModel model{.tokenizer = SyntheticTokenizer()};
  std::unique_ptr<scheduler::Engine> engine;
  std::unique_ptr<scheduler::GenerationService> service;
  std::unique_ptr<scheduler::Scheduler> core;  // checks that accepted requests are admissible
};

void CheckIdsInVocab(std::string_view what, const auto& ids, int32_t vocab) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      FuzzFail(absl::StrFormat("%s id %d outside [0, %d)", what, id, vocab));
    }
  }
}

void CheckPrompt(const scheduler::text::Tokenizer& tokenizer, const v1::GenerateRequest& request,
                 const NewRequest& r) {
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0 || prompt >= kContext || r.max_tokens < 0 || prompt + r.max_tokens > kContext ||
      r.max_tokens != static_cast<int64_t>(request.max_tokens())) {
    FuzzFail(
        absl::StrFormat("accepted prompt of %d tokens with max_tokens %d (asked %u), context %d",
                        prompt, r.max_tokens, request.max_tokens(), kContext));
  }
  CheckIdsInVocab("prompt", r.prompt, tokenizer.vocab_size());
  if (request.prompt_case() == v1::GenerateRequest::kText) {
    if (!common::IsValidUtf8(request.text()) ||
        r.prompt != tokenizer.Encode(request.text(), /*add_bos=*/true)) {
      FuzzFail("accepted text prompt is ill-formed or not its own tokenization");
    }
  } else if (request.prompt_case() != v1::GenerateRequest::kTokenIds ||
             !std::equal(r.prompt.begin(), r.prompt.end(), request.token_ids().ids().begin(),
                         request.token_ids().ids().end())) {
    FuzzFail("accepted token-id prompt differs from the request's ids");
  }
}

void CheckAccepted(Fixture& f, const v1::GenerateRequest& request, NewRequest r) {
  CheckPrompt(f.model.tokenizer, request, r);
  CheckIdsInVocab("stop token", r.stop_token_ids, f.model.tokenizer.vocab_size());
  const scheduler::SamplingParams& s = r.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0 || s.temperature > 100 || s.top_k < 0 ||
      !std::isfinite(s.top_p) || s.top_p <= 0 || s.top_p > 1) {
    FuzzFail(absl::StrFormat("accepted sampling temperature %g, top_k %d, top_p %g", s.temperature,
                             s.top_k, s.top_p));
  }
  const bool penalties_ok = std::abs(s.presence_penalty) <= 2 &&
                            std::abs(s.frequency_penalty) <= 2 && s.repetition_penalty > 0 &&
                            s.repetition_penalty <= 10 && s.min_p >= 0 && s.min_p <= 1;
  if (!penalties_ok || s.logit_bias.size() > 300 || s.top_logprobs < 0 || s.top_logprobs > 20 ||
      (s.top_logprobs > 0 && !s.logprobs)) {
    FuzzFail(absl::StrFormat(
        "accepted min_p %g, penalties %g/%g/%g, %d logit_bias entries, top_logprobs %d", s.min_p,
        s.presence_penalty, s.frequency_penalty, s.repetition_penalty, s.logit_bias.size(),
        s.top_logprobs));
  }
  for (const auto& [token, bias] : s.logit_bias) {
    if (token < 0 || token >= f.model.tokenizer.vocab_size() || !(std::abs(bias) <= 100)) {
      FuzzFail(absl::StrFormat("accepted logit_bias %d -> %g", token, bias));
    }
  }
  if (request.stop_size() > 16 || request.request_id().size() > 256) {
    FuzzFail(absl::StrCat("accepted ", request.stop_size(), " stop strings and a request_id of ",
                          request.request_id().size(), " bytes"));
  }
  for (const std::string& stop : request.stop()) {
    if (stop.empty() || stop.size() > 256 || !common::IsValidUtf8(stop)) {
      FuzzFail("accepted an empty, oversized or ill-formed stop string");
    }
  }
  r.id = 1;
  const int32_t completions = std::max(r.n, 1);  // ids 1..n: one per completion
  if (absl::Status s = f.core->AddRequest(std::move(r), 0.0); !s.ok()) {
    FuzzFail(absl::StrCat("the core rejects a validated request: ", s.ToString()));
  }
  for (int32_t i = 0; i < completions; ++i) {
    f.core->Finish(1 + i, scheduler::FinishReason::kCancelled, "fuzz", 0.0);
  }
  (void)f.core->TakeEvents();
}

void TestOneInput(const uint8_t* data, size_t size) {
  static Fixture* const fixture = new Fixture();
  v1::GenerateRequest request;
  const absl::Status decoded = scheduler::DecodeRequest(
      std::string_view(reinterpret_cast<const char*>(data), size), kMaxRequestBytes, &request);
  if (!decoded.ok()) {
    if (decoded.code() != absl::StatusCode::kInvalidArgument || decoded.message().empty()) {
      FuzzFail(absl::StrCat("DecodeRequest failed with ", decoded.ToString(),
                            "; expected INVALID_ARGUMENT with a message"));
    }
    return;
  }
  absl::StatusOr<NewRequest> r = fixture->service->Validate(request);
  if (r.ok()) {
    CheckAccepted(*fixture, request, *std::move(r));
  } else if (r.status().code() != absl::StatusCode::kInvalidArgument ||
             r.status().message().empty()) {
    FuzzFail(absl::StrCat("Validate failed with ", r.status().ToString(),
                          "; expected INVALID_ARGUMENT with a message"));
  }
}

}  // namespace
}  // namespace pagoda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagoda::fuzz::TestOneInput(data, size);
  return 0;
}
