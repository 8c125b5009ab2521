#include "tools/loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::loadgen {
namespace {

// Streams of randomness carved out of one seed, so prompts, prefixes and sampling seeds never
// share draws (adding a draw to one never shifts the others).
constexpr uint64_t kRequestStream = 0x5265717565737431;   // "Request1"
constexpr uint64_t kPromptStream = 0x50726f6d70743031;    // "Prompt01"
constexpr uint64_t kPrefixStream = 0x5072656669783031;    // "Prefix01"
constexpr uint64_t kSamplingStream = 0x53616d706c653031;  // "Sample01"

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

// Solves for the log-normal location whose clamped mean is `mean`. The clamped mean grows
// monotonically with mu, so bisection converges; 200 halvings exhaust double precision.
double SolveLogNormalMu(double mean, double sigma, double lo, double hi) {
  double a = std::log(lo) - 10 * sigma - 10;
  double b = std::log(hi) + 10 * sigma + 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (a + b);
    if (ClampedLogNormalMean(mid, sigma, lo, hi) < mean) {
      a = mid;
    } else {
      b = mid;
    }
  }
  return 0.5 * (a + b);
}

}  // namespace

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Uniform01(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double StandardNormal(Rng& rng) {
  // 1 - u keeps the logarithm's argument in (0, 1].
  const double r = std::sqrt(-2.0 * std::log(1.0 - Uniform01(rng)));
  return r * std::cos(2.0 * std::numbers::pi * Uniform01(rng));
}

double Exponential(Rng& rng, double mean) { return -mean * std::log(1.0 - Uniform01(rng)); }

absl::StatusOr<LengthDist> ParseLengthDist(absl::string_view name) {
  if (name == "fixed") return LengthDist::kFixed;
  if (name == "uniform") return LengthDist::kUniform;
  if (name == "sharegpt") return LengthDist::kShareGpt;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown length distribution \"", name, "\": use fixed, uniform or sharegpt"));
}

absl::string_view LengthDistName(LengthDist dist) {
  switch (dist) {
    case LengthDist::kFixed:
      return "fixed";
    case LengthDist::kUniform:
      return "uniform";
    case LengthDist::kShareGpt:
      return "sharegpt";
  }
  return "?";
}

double ClampedLogNormalMean(double mu, double sigma, double lo, double hi) {
  const double a = (std::log(lo) - mu) / sigma;
  const double b = (std::log(hi) - mu) / sigma;
  // E[X; lo < X < hi] = e^(mu + sigma^2/2) * (Phi(b - sigma) - Phi(a - sigma)).
  const double middle =
      std::exp(mu + 0.5 * sigma * sigma) * (NormalCdf(b - sigma) - NormalCdf(a - sigma));
  return lo * NormalCdf(a) + middle + hi * (1.0 - NormalCdf(b));
}

absl::StatusOr<LengthSampler> LengthSampler::Create(const LengthSpec& spec) {
  if (spec.mean < 1) {
    return absl::InvalidArgumentError(absl::StrCat("mean length must be >= 1, got ", spec.mean));
  }
  LengthSampler s;
  s.spec_ = spec;
  switch (spec.dist) {
    case LengthDist::kFixed:
      s.lo_ = s.hi_ = spec.mean;
      break;
    case LengthDist::kUniform: {
      if (spec.range_ratio < 0 || spec.range_ratio > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("range ratio must be in [0, 1], got ", spec.range_ratio));
      }
      // Symmetric around the mean so the integer mean is exact.
      const int half = static_cast<int>(std::lround(spec.mean * spec.range_ratio));
      s.lo_ = std::max(1, spec.mean - half);
      s.hi_ = spec.mean + (spec.mean - s.lo_);
      break;
    }
    case LengthDist::kShareGpt: {
      s.lo_ = std::max(1, spec.min);
      s.hi_ = spec.max > 0 ? spec.max : 8 * spec.mean;
      if (spec.sigma <= 0 || s.lo_ >= s.hi_ || spec.mean <= s.lo_ || spec.mean >= s.hi_) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharegpt lengths need sigma > 0 and min < mean < max; got sigma ",
                         spec.sigma, ", min ", s.lo_, ", mean ", spec.mean, ", max ", s.hi_));
      }
      s.mu_ = SolveLogNormalMu(spec.mean, spec.sigma, s.lo_, s.hi_);
      break;
    }
  }
  return s;
}

int LengthSampler::Sample(Rng& rng) const {
  switch (spec_.dist) {
    case LengthDist::kFixed:
      return lo_;
    case LengthDist::kUniform:
      return lo_ + static_cast<int>(Uniform01(rng) * (hi_ - lo_ + 1));
    case LengthDist::kShareGpt: {
      const double x = std::exp(mu_ + spec_.sigma * StandardNormal(rng));
      return static_cast<int>(std::lround(std::clamp(x, double(lo_), double(hi_))));
    }
  }
  return lo_;
}

double LengthSampler::ExpectedMean() const {
  if (spec_.dist == LengthDist::kShareGpt) {
    return ClampedLogNormalMean(mu_, spec_.sigma, lo_, hi_);
  }
  return 0.5 * (lo_ + hi_);
}

absl::StatusOr<PromptKind> ParsePromptKind(absl::string_view name) {
  if (name == "random") return PromptKind::kRandom;
  if (name == "shared-prefix" || name == "shared_prefix") return PromptKind::kSharedPrefix;
  if (name == "multi-turn" || name == "multi_turn") return PromptKind::kMultiTurn;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown prompt kind \"", name, "\": use random, shared-prefix or multi-turn"));
}

absl::string_view PromptKindName(PromptKind kind) {
  switch (kind) {
    case PromptKind::kRandom:
      return "random";
    case PromptKind::kSharedPrefix:
      return "shared-prefix";
    case PromptKind::kMultiTurn:
      return "multi-turn";
  }
  return "?";
}

absl::StatusOr<Workload> Workload::Create(const WorkloadOptions& options,
                                          const ModelLimits& model) {
  // Ids 0, BOS and EOS are excluded, so the vocabulary needs at least one more.
  if (model.vocab_size < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's vocabulary has ", model.vocab_size, " ids; need >= 4"));
  }
  if (model.context_length < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's context is ", model.context_length, " tokens; need >= 2"));
  }
  if (options.prompts == PromptKind::kSharedPrefix &&
      (options.prefix_groups < 1 || options.shared_prefix_len < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-prefix prompts need --prefix-groups >= 1 and --shared-prefix-len >= 1; got ",
        options.prefix_groups, " and ", options.shared_prefix_len));
  }
  if (options.prompts == PromptKind::kMultiTurn &&
      (options.conversations < 1 || options.turns < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi-turn prompts need --conversations >= 1 and --turns >= 1; got ",
                     options.conversations, " and ", options.turns));
  }
  auto input = LengthSampler::Create(options.input);
  if (!input.ok())
    return absl::InvalidArgumentError(absl::StrCat("input: ", input.status().message()));
  auto output = LengthSampler::Create(options.output);
  if (!output.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("output: ", output.status().message()));
  }
  return Workload(options, model, *input, *output);
}

Workload::Workload(WorkloadOptions options, ModelLimits model, LengthSampler input,
                   LengthSampler output)
    : options_(std::move(options)), model_(model), input_(input), output_(output) {}

int32_t Workload::RandomId(Rng& rng) const {
  for (;;) {
    const auto id = static_cast<int32_t>(Uniform01(rng) * model_.vocab_size);
    if (id != 0 && id != model_.bos_token_id && id != model_.eos_token_id) return id;
  }
}

std::vector<int32_t> Workload::Prefix(int group, int len, uint64_t salt) const {
  Rng rng(MixSeed(MixSeed(options_.seed ^ kPrefixStream, salt), group));
  std::vector<int32_t> ids;
  ids.reserve(len);
  if (model_.bos_token_id >= 0 && len > 0) ids.push_back(model_.bos_token_id);
  while (static_cast<int>(ids.size()) < len) ids.push_back(RandomId(rng));
  return ids;
}

void Workload::Clamp(int* input_len, RequestSpec& r) const {
  // Keep the output (what throughput counts) and shorten the prompt; the output yields only
  // when it alone would fill the context.
  const int context = model_.context_length;
  if (r.output_len > context - 1) {
    r.output_len = context - 1;
    r.clamped = true;
  }
  if (*input_len + r.output_len > context) {
    *input_len = context - r.output_len;
    r.clamped = true;
  }
}

RequestSpec Workload::MakeTurn(int index, uint64_t salt) const {
  const int conversations = options_.conversations;
  const int round = index / conversations;
  const int turn = round % options_.turns;
  const uint64_t conversation =
      static_cast<uint64_t>(round / options_.turns) * conversations + index % conversations;
  // Every turn of a conversation draws the same history from the same streams.
  Rng length_rng(MixSeed(options_.seed ^ kRequestStream, conversation));
  Rng rng(MixSeed(MixSeed(options_.seed ^ kPromptStream, salt), conversation));
  RequestSpec r;
  r.index = index;
  if (model_.bos_token_id >= 0) r.prompt.push_back(model_.bos_token_id);
  for (int t = 0;; ++t) {
    const int user = input_.Sample(length_rng);
    const int answer = output_.Sample(length_rng);
    for (int i = 0; i < user; ++i) r.prompt.push_back(RandomId(rng));
    if (t == turn) {
      r.output_len = answer;
      break;
    }
    for (int i = 0; i < answer; ++i) r.prompt.push_back(RandomId(rng));
  }
  int input_len = static_cast<int>(r.prompt.size());
  Clamp(&input_len, r);
  r.prompt.resize(input_len);
  r.sampling_seed = MixSeed(options_.seed ^ kSamplingStream, index);
  return r;
}

RequestSpec Workload::Make(int index, uint64_t salt) const {
  if (options_.prompts == PromptKind::kMultiTurn) return MakeTurn(index, salt);
  Rng length_rng(MixSeed(options_.seed ^ kRequestStream, index));
  Rng rng(MixSeed(MixSeed(options_.seed ^ kPromptStream, salt), index));
  RequestSpec r;
  r.index = index;
  int input_len = input_.Sample(length_rng);
  r.output_len = output_.Sample(length_rng);
  Clamp(&input_len, r);
  // At least one id of a shared-prefix prompt is the request's own, so no two are identical.
  const int shared = options_.prompts == PromptKind::kSharedPrefix
                         ? std::min(options_.shared_prefix_len, input_len - 1)
                         : 0;
  if (shared > 0) {
    r.prompt = Prefix(index % options_.prefix_groups, shared, salt);
  } else if (model_.bos_token_id >= 0) {
    r.prompt.push_back(model_.bos_token_id);
  }
  while (static_cast<int>(r.prompt.size()) < input_len) r.prompt.push_back(RandomId(rng));
  r.sampling_seed = MixSeed(options_.seed ^ kSamplingStream, index);
  return r;
}

}  // namespace pagoda::loadgen
