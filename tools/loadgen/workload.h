// Workload: the requests a benchmark sends, synthesized from a seed.
//
// Contract:
//  * Request i is a pure function of (options, i): the same seed gives the same prompts, lengths
//    and sampling seeds on every run, whatever order or concurrency the requests are sent in.
//    Sweeps therefore compare levels on identical requests.
//  * Prompts are token ids (no tokenizer in the loop), so a request's input length is exact.
//    They start with BOS when the model has one; other ids are drawn uniformly from the
//    vocabulary, never BOS, EOS or id 0 (often padding/unknown).
//  * prompt length + output length never exceeds the model's context: the prompt is shortened
//    first, then the output (clamped() says how many requests were cut).
//
// Randomness comes from std::mt19937_64 (its output sequence is fixed by the C++ standard) with
// Pagoda's own transforms to uniform, normal and exponential variates, because libstdc++'s
// <random> distributions may change between releases and break reproducibility.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pagoda::loadgen {

using Rng = std::mt19937_64;

// Mixes a seed with a stream number (SplitMix64 finalizer) so nearby ids give unrelated streams.
uint64_t MixSeed(uint64_t seed, uint64_t stream);
// Uniform in [0, 1) with 53 random bits.
double Uniform01(Rng& rng);
// Standard normal (Box-Muller).
double StandardNormal(Rng& rng);
// Exponential with the given mean.
double Exponential(Rng& rng, double mean);

enum class LengthDist {
  kFixed,     // always `mean`
  kUniform,   // integers uniform in [mean * (1 - range_ratio), mean * (1 + range_ratio)]
  kShareGpt,  // log-normal with a long tail, clamped to [min, max], mean solved to be `mean`
};

absl::StatusOr<LengthDist> ParseLengthDist(absl::string_view name);
absl::string_view LengthDistName(LengthDist dist);

struct LengthSpec {
  LengthDist dist = LengthDist::kFixed;
  int mean = 128;
  double range_ratio = 0.5;  // kUniform: half-width of the range relative to the mean
  double sigma = 1.0;        // kShareGpt: sigma of the underlying normal (tail heaviness)
  int min = 1;               // kShareGpt: lower clamp
  int max = 0;               // kShareGpt: upper clamp; 0 = 8 * mean
};

// Draws lengths from a LengthSpec. For kShareGpt the log-normal location is solved once, at
// construction, so that the mean *after clamping* equals the requested mean.
class LengthSampler {
 public:
  static absl::StatusOr<LengthSampler> Create(const LengthSpec& spec);

  int Sample(Rng& rng) const;
  int lo() const { return lo_; }
  int hi() const { return hi_; }
  // The distribution's exact mean before rounding to integers.
  double ExpectedMean() const;

 private:
  LengthSampler() = default;

  LengthSpec spec_;
  int lo_ = 1;
  int hi_ = 1;
  double mu_ = 0;  // kShareGpt: location of the underlying normal
};

// Mean of min(max(X, lo), hi) for X ~ LogNormal(mu, sigma).
double ClampedLogNormalMean(double mu, double sigma, double lo, double hi);

enum class PromptKind {
  kRandom,        // every prompt is fresh random ids
  kSharedPrefix,  // prompts of group g share their first shared_prefix_len ids
  // Conversations that resend their whole history every turn: request i is turn
  // (i / conversations) % turns of conversation i % conversations (a new set of conversations
  // starts every conversations * turns requests). Turn t's prompt is BOS, then for each earlier
  // turn its user part (an input length) and a stand-in for the model's answer (an output
  // length of random ids), then turn t's user part. Closed-loop at concurrency = conversations,
  // turn t + 1 of a conversation starts about when its turn t ends, as in a chat.
  kMultiTurn,
};

absl::StatusOr<PromptKind> ParsePromptKind(absl::string_view name);
absl::string_view PromptKindName(PromptKind kind);

struct ModelLimits {
  int vocab_size = 0;
  int context_length = 0;
  int bos_token_id = -1;  // -1 = none
  int eos_token_id = -1;
};

struct WorkloadOptions {
  LengthSpec input;
  LengthSpec output;
  PromptKind prompts = PromptKind::kRandom;
  int shared_prefix_len = 64;  // kSharedPrefix: ids in common (at most prompt length - 1)
  int prefix_groups = 1;       // kSharedPrefix: request i uses prefix i % prefix_groups
  int conversations = 16;      // kMultiTurn: conversations in parallel
  int turns = 4;               // kMultiTurn: turns per conversation
  uint64_t seed = 0;
};

// How every request of a run samples. temperature 0 is greedy; otherwise each request gets its
// own seed (RequestSpec::sampling_seed), so sampled runs are reproducible too.
struct SamplingOptions {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  bool ignore_eos = true;  // benchmarks want exact output lengths
};

struct RequestSpec {
  int index = 0;
  std::vector<int32_t> prompt;  // token ids, BOS first when the model has one
  int output_len = 0;           // max_tokens; exact with ignore_eos
  uint64_t sampling_seed = 0;
  bool clamped = false;  // shortened to fit the context
};

class Workload {
 public:
  static absl::StatusOr<Workload> Create(const WorkloadOptions& options, const ModelLimits& model);

  // Request number `index` (any index >= 0; duration runs ask for as many as they need).
  // Lengths and sampling seed depend on `index` only; the prompt ids (and shared prefixes) also
  // on `salt`. Runs that must compare on the same requests but must not find each other's
  // prompts in the server's prefix cache use the same indices with different salts.
  RequestSpec Make(int index, uint64_t salt = 0) const;

  const WorkloadOptions& options() const { return options_; }
  const ModelLimits& model() const { return model_; }

 private:
  Workload(WorkloadOptions options, ModelLimits model, LengthSampler input, LengthSampler output);

  int32_t RandomId(Rng& rng) const;
  // kMultiTurn: request `index`'s turn of its conversation.
  RequestSpec MakeTurn(int index, uint64_t salt) const;
  // Shortens the prompt (then the output) so that both fit the context.
  void Clamp(int* input_len, RequestSpec& r) const;
  std::vector<int32_t> Prefix(int group, int len, uint64_t salt) const;

  WorkloadOptions options_;
  ModelLimits model_;
  LengthSampler input_;
  LengthSampler output_;
};

}  // namespace pagoda::loadgen
