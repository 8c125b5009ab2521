// Plain value types shared by the scheduler core and the service layer.
//
// The core speaks in these structs, never in protobuf or gRPC types: the link layer converts a
// Plan into a pagoda.worker.v1.IterationPlan and the service converts Events into responses.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::scheduler {

using RequestId = uint64_t;  // assigned by the service, unique for the process lifetime
using WorkerId = uint32_t;   // assigned by the service when a worker attaches
using PageId = int32_t;      // index into one worker's KV arena

inline constexpr std::string_view kDefaultTenant = "default";

// Scheduling class; admission goes by class, then arrival.
enum class Priority : int { kLow = 0, kNormal = 1, kHigh = 2, kCritical = 3 };
inline constexpr int kNumPriorities = 4;

enum class FinishReason {
  kLength,      // max_tokens generated
  kStop,        // a stop token id was sampled
  kEos,         // the model's EOS was sampled
  kCancelled,   // the client cancelled or went away
  kError,       // a worker could not execute the request
  kContext,     // the model's context is full
  kStopString,  // a stop string appeared in the text (detected by the service)
  kDeadline,    // the request's deadline passed
};
const char* FinishReasonName(FinishReason reason);

// A request's constraint as the worker gets it (pagoda.worker.v1.Constraint): GBNF compiled and
// validated by the service, and the tokens that may end the text where the grammar accepts.
struct Constraint {
  std::string grammar;
  std::vector<int32_t> end_token_ids;
};

// Mirrors pagoda.v1.SamplingParams after validation (scheduler/service/generation_service.cc
// checks the ranges); the worker applies them (worker/sampling/sampler.h).
struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // >= 1: off
  uint64_t seed = 0;
  float min_p = 0.0f;                                 // 0: off
  float presence_penalty = 0.0f;                      // over generated tokens
  float frequency_penalty = 0.0f;                     // over generated tokens
  float repetition_penalty = 1.0f;                    // over prompt + generated tokens; 1: off
  std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by token id, each once
  bool logprobs = false;                              // return each token's logprob
  int32_t top_logprobs = 0;                           // and this many alternatives (needs logprobs)
  std::shared_ptr<const Constraint> constraint;       // null: unconstrained

  bool has_penalties() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
  // The worker then needs the sequence's token history (PlanStep::history): penalties count
  // tokens, and a constraint's matcher is rebuilt from the generated ones.
  bool needs_history() const { return has_penalties() || constraint != nullptr; }
};

// A request as the core sees it: already validated and tokenized by the service.
struct NewRequest {
  RequestId id = 0;
  std::vector<int32_t> prompt;  // non-empty, ids in range
  int32_t max_tokens = 0;       // 0: until the model's context is full
  // Absolute time (the core's clock, seconds) after which the request is dropped.
  double deadline = std::numeric_limits<double>::infinity();
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  Priority priority = Priority::kNormal;
  // Mixed into the prefix-cache hash chain: only requests with the same salt share cached KV.
  std::string cache_salt;
  // Completions of this prompt, 1..kMaxCompletions. Completion i is the sequence with id
  // `id + i` (the caller reserves the ids) and samples with seed `sampling.seed + i`; they share
  // the prompt's pages (see Scheduler).
  int32_t n = 1;
  // Fair-share account (RequestQueue): requests of one tenant share one virtual counter.
  std::string tenant = std::string(kDefaultTenant);
};
inline constexpr int32_t kMaxCompletions = 16;

// What a worker told us when it attached.
struct WorkerInfo {
  int32_t num_pages = 0;
  int32_t page_size = 0;
  int32_t max_batch_tokens = 0;
  int32_t max_prefill_chunk = 0;     // prefill tokens per sequence per plan it prefers; 0: none
  int32_t num_swap_pages = 0;        // host swap space in pages; 0: recompute only
  double swap_seconds_per_page = 0;  // the worker's measured copy out + in of one page; 0: unknown
};

// One sequence's work in one iteration (mirrors pagoda.worker.v1.SequenceStep).
struct PlanStep {
  RequestId seq_id = 0;
  std::vector<int32_t> tokens;  // new input tokens (empty when feed_last_sampled)
  // The single input token is the one the worker sampled for this sequence in the previous
  // plan, whose result the scheduler has not seen yet (overlap).
  bool feed_last_sampled = false;
  int32_t start_pos = 0;          // position of tokens[0]
  std::vector<PageId> new_pages;  // appended to the sequence's block table
  bool sample = false;            // sample after the last input token
  bool first_sight = false;       // the worker must (re)create its state for seq_id
  SamplingParams sampling;        // set when first_sight only
  int32_t sample_index = 0;       // index of the sampled token within the generation
  // First sight with SamplingParams::needs_history() only: the prompt's length and the tokens
  // at [0, start_pos).
  int32_t prompt_tokens = 0;
  std::vector<int32_t> history;
};

// Copy-on-write: the worker copies page `src` into page `dst` (K and V, every layer).
struct PageCopy {
  PageId src = 0;
  PageId dst = 0;
  bool operator==(const PageCopy&) const = default;
};

// Swap preemption: KV page `page` and swap slot `slot` of one worker (out: page -> slot; in:
// slot -> page).
struct SwapCopy {
  PageId page = 0;
  int32_t slot = 0;
  bool operator==(const SwapCopy&) const = default;
};

// The flat batch for one worker for one iteration. The worker executes, in order: swap_out,
// free_seq_ids, swap_in, page_copies, steps.
struct Plan {
  WorkerId worker = 0;
  uint64_t iteration = 0;
  std::vector<RequestId> free_seq_ids;  // applied by the worker before steps
  std::vector<SwapCopy> swap_out;       // applied first
  std::vector<SwapCopy> swap_in;        // applied after the frees
  std::vector<PageCopy> page_copies;    // applied after the swap-outs, before the frees
  std::vector<PlanStep> steps;
  int32_t num_tokens = 0;  // input tokens in steps (a feed_last_sampled step counts one)
};

// A token's log-probability and the most probable alternatives (descending), from the
// distribution the worker sampled it from (pagoda.worker.v1.SampledToken).
struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
  bool operator==(const TopLogprob&) const = default;
};
struct TokenLogprob {
  float logprob = 0;
  std::vector<TopLogprob> top;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampledToken {
  RequestId seq_id = 0;
  int32_t token = 0;
  std::optional<TokenLogprob> logprob = std::nullopt;  // when the request asked for logprobs
};

// What the worker measured while executing a plan (pagoda.worker.v1.IterationResult).
struct StepTimes {
  double forward_seconds = 0;  // forward pass and sampling
  double swap_seconds = 0;     // swap_out + swap_in copies
};

// Timings of a finished request, from the `now` values the core was given (seconds).
struct RequestTimings {
  double arrival = 0;
  double first_scheduled = -1;
  double first_token = -1;
  double finished = -1;
  // Seconds from arrival to the first token, as predicted at arrival (PredictFirstToken); < 0
  // when no prediction was made (no step measured yet).
  double predicted_first_token = -1;
};

// Output of the core, drained by the service after every call.
struct Event {
  enum class Kind { kToken, kFinished };
  Kind kind = Kind::kToken;
  RequestId id = 0;
  int32_t token = 0;                    // kToken: the new token (never EOS or a stop token)
  std::optional<TokenLogprob> logprob;  // kToken, when the request asked for logprobs
  // kFinished:
  FinishReason reason = FinishReason::kLength;
  std::string message;  // why, for kError / kCancelled
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  int32_t preemptions = 0;
  RequestTimings timings;
};

}  // namespace pagoda::scheduler
