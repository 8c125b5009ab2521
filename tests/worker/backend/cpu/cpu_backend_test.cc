#include "worker/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/model_fixtures.h"
#include "tests/worker/param_printers.h"
#include "tests/worker/reference_forward.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {
namespace {

using testing::ReferenceLlama;

int32_t Argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::shared_ptr<const LlamaModel> TrainedModel() {
  auto path = testing::TestModelFile("stories260K-f32.gguf");
  if (!path) return nullptr;
  auto model = LlamaModel::Load(*path);
  EXPECT_OK(model);
  return model.ok() ? *model : nullptr;
}

std::unique_ptr<CpuBackend> MakeBackend(std::shared_ptr<const LlamaModel> model, int page_size,
                                        int num_pages, int threads = 0) {
  auto backend = CpuBackend::Create(std::move(model), {page_size, num_pages, threads});
  EXPECT_OK(backend);
  return backend.ok() ? std::move(*backend) : nullptr;
}

// Greedy generation of one sequence: a prefill of the prompt, then one token per Forward.
std::vector<int32_t> GreedyGenerate(CpuBackend& backend, const std::vector<int32_t>& prompt,
                                    int max_tokens) {
  const int ps = backend.page_size();
  std::vector<int32_t> pages((prompt.size() + max_tokens + ps - 1) / ps);
  std::iota(pages.begin(), pages.end(), 0);
  std::vector<int32_t> out;
  std::vector<float> logits;
  SeqInput in{prompt, 0, pages, true};
  EXPECT_OK(backend.Forward({&in, 1}, &logits));
  int32_t next = Argmax(logits);
  for (int i = 0; i < max_tokens; ++i) {
    out.push_back(next);
    if (i + 1 == max_tokens) break;
    SeqInput step{{&out.back(), 1}, static_cast<int32_t>(prompt.size() + i), pages, true};
    auto status = backend.Forward({&step, 1}, &logits);
    EXPECT_OK(status);
    next = Argmax(logits);
  }
  return out;
}

struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> expected;
};

std::vector<GoldenCase> ReadGolden(const std::string& path) {
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    cases.push_back({c["prompt"].get<std::string>(),
                     c["prompt_token_ids"].get<std::vector<int32_t>>(),
                     c["expected_token_ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

TEST(CpuBackendGolden, MatchesLlamaCppGreedyTokens) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model_path, "stories260K-f32.gguf");
  auto model = TrainedModel();
  ASSERT_NE(model, nullptr);
  auto cases = ReadGolden(*golden_path);
  ASSERT_FALSE(cases.empty());
  auto backend = MakeBackend(model, 16, 64);
  for (const GoldenCase& c : cases) {
    EXPECT_EQ(GreedyGenerate(*backend, c.prompt_ids, static_cast<int>(c.expected.size())),
              c.expected)
        << "prompt: " << c.prompt;
  }
}

// All golden cases at once: one batched prefill, then batched decode steps.
TEST(CpuBackendGolden, BatchedGenerationMatchesToo) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model_path, "stories260K-f32.gguf");
  auto cases = ReadGolden(*golden_path);
  const int ps = 4;
  auto backend = MakeBackend(TrainedModel(), ps, 1024);
  ASSERT_NE(backend, nullptr);
  std::vector<std::vector<int32_t>> pages(cases.size()), out(cases.size());
  int next_page = 1023;  // hand pages out from the top, interleaved between sequences
  for (auto& p : pages) p.reserve(256);
  std::vector<int32_t> last(cases.size());
  size_t max_len = 0;
  for (const auto& c : cases) max_len = std::max(max_len, c.expected.size());
  std::vector<float> logits;
  for (size_t step = 0; step < max_len; ++step) {
    std::vector<SeqInput> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (out[i].size() >= cases[i].expected.size()) continue;
      const size_t pos = step == 0 ? 0 : cases[i].prompt_ids.size() + step - 1;
      const size_t n = step == 0 ? cases[i].prompt_ids.size() : 1;
      while (pages[i].size() * ps < pos + n) pages[i].push_back(next_page--);
      std::span<const int32_t> toks = step == 0 ? std::span<const int32_t>(cases[i].prompt_ids)
                                                : std::span<const int32_t>(&last[i], 1);
      batch.push_back({toks, static_cast<int32_t>(pos), pages[i], true});
      who.push_back(i);
    }
    ASSERT_OK(backend->Forward(batch, &logits));
    const int vocab = backend->config().vocab_size;
    for (size_t r = 0; r < who.size(); ++r) {
      last[who[r]] = Argmax({logits.data() + r * vocab, static_cast<size_t>(vocab)});
      out[who[r]].push_back(last[who[r]]);
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(out[i], cases[i].expected) << cases[i].prompt;
}

// Drives several sequences through ragged batches (chunked prefills of random sizes mixed with
// decode steps, pages handed out in shuffled order) and checks every returned logits row
// against the dense single-sequence reference, and greedy tokens for identity.
void CheckRaggedAgainstReference(std::shared_ptr<const LlamaModel> model, int page_size,
                                 uint64_t seed) {
  const common::ModelConfig& c = model->config();
  std::mt19937_64 rng(seed);
  const std::vector<int> prompt_lens = {1, 5, 17, 33, 9};
  const int decode_steps = 6, max_len = 33 + decode_steps + 1;
  const int pages_per_seq = (max_len + page_size - 1) / page_size;
  const int num_pages = pages_per_seq * static_cast<int>(prompt_lens.size()) + 3;
  auto backend = MakeBackend(model, page_size, num_pages, 2);
  ASSERT_NE(backend, nullptr);
  std::vector<int32_t> free_pages(num_pages);
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);

  struct Seq {
    std::vector<int32_t> tokens;  // prompt then generated
    size_t prompt_len = 0;
    size_t fed = 0;  // tokens already sent to the backend
    std::vector<int32_t> pages;
    std::unique_ptr<ReferenceLlama> ref;
    std::vector<float> ref_logits;  // after the last fed token
  };
  std::vector<Seq> seqs(prompt_lens.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int j = 0; j < prompt_lens[i]; ++j) seqs[i].tokens.push_back(rng() % c.vocab_size);
    seqs[i].prompt_len = seqs[i].tokens.size();
    seqs[i].ref = std::make_unique<ReferenceLlama>(*model);
  }
  std::vector<float> logits;
  int rows_checked = 0;
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<SeqInput> batch;
    std::vector<std::pair<size_t, size_t>> fed;  // (seq, count) per batch entry
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (s.fed >= s.prompt_len + decode_steps || s.fed == s.tokens.size() || rng() % 4 == 0) {
        continue;  // finished, waiting for a sampled token, or skipped this round
      }
      const size_t remaining = s.tokens.size() - s.fed;
      const size_t n = std::min<size_t>(remaining, 1 + rng() % 8);
      while (static_cast<int>(s.pages.size()) * page_size < static_cast<int>(s.fed + n)) {
        s.pages.push_back(free_pages.back());
        free_pages.pop_back();
      }
      const bool last_chunk = s.fed + n == s.tokens.size();
      batch.push_back({{s.tokens.data() + s.fed, n},
                       static_cast<int32_t>(s.fed),
                       s.pages,
                       last_chunk || rng() % 3 == 0});
      fed.push_back({i, n});
    }
    if (batch.empty()) {
      bool all_done = true;
      for (const Seq& s : seqs) all_done &= s.fed >= s.prompt_len + decode_steps;
      if (all_done) break;
      continue;
    }
    auto status = backend->Forward(batch, &logits);
    ASSERT_OK(status);
    size_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      Seq& s = seqs[fed[b].first];
      for (size_t j = 0; j < fed[b].second; ++j) s.ref_logits = s.ref->Step(s.tokens[s.fed + j]);
      s.fed += fed[b].second;
      if (!batch[b].want_logits) continue;
      std::span<const float> got(logits.data() + row++ * c.vocab_size, c.vocab_size);
      float max_ref = 1.0f, max_diff = 0.0f;
      for (int v = 0; v < c.vocab_size; ++v) {
        max_ref = std::max(max_ref, std::abs(s.ref_logits[v]));
        max_diff = std::max(max_diff, std::abs(got[v] - s.ref_logits[v]));
      }
      // Both round K and V to F16 for the cache; an element within float rounding of a halfway
      // point between two halves rounds to either, so a few cached values may differ by one F16
      // step (4.9e-4 relative) between them: 1e-3 of the largest logit, where the float cache
      // allowed 1e-4 (a kernel bug moves logits by far more).
      EXPECT_LE(max_diff, 1e-3f * max_ref) << "seq " << fed[b].first << " pos " << s.fed - 1;
      ++rows_checked;
      if (s.fed == s.tokens.size() && s.fed < s.prompt_len + decode_steps) {
        const int32_t token = Argmax(got);
        EXPECT_EQ(token, Argmax(s.ref_logits)) << "greedy token differs at pos " << s.fed;
        s.tokens.push_back(token);
      }
    }
    ASSERT_EQ(row * c.vocab_size, logits.size());
  }
  for (const Seq& s : seqs) EXPECT_EQ(s.fed, s.prompt_len + decode_steps);
  EXPECT_GT(rows_checked, 30);
}

TEST(CpuBackendRagged, TrainedModelMatchesReference) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "stories260K-f32.gguf");
  auto model = TrainedModel();
  ASSERT_NE(model, nullptr);
  for (int page_size : {1, 4, 16}) {
    SCOPED_TRACE(page_size);
    CheckRaggedAgainstReference(model, page_size, 7 + page_size);
  }
}

TEST(CpuBackendRagged, RandomModelsMatchReference) {
  struct Shape {
    int dim, heads, kv_heads, layers;
  };
  // head_dim 16 and 32; GQA ratios 1, 2 and 4.
  for (Shape s :
       {Shape{64, 4, 4, 2}, Shape{128, 4, 2, 2}, Shape{64, 4, 1, 3}, Shape{96, 3, 3, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << "dim " << s.dim << " heads " << s.heads << "/" << s.kv_heads);
    auto model = testing::RandomModel(
        testing::SmallRandomOptions(s.dim, s.heads, s.kv_heads, s.layers, s.dim + s.kv_heads));
    ASSERT_NE(model, nullptr);
    for (int page_size : {1, 4, 16}) {
      SCOPED_TRACE(page_size);
      CheckRaggedAgainstReference(model, page_size, 100 + page_size);
    }
  }
}

// A token's logits do not depend on what else shares its batch (bitwise).
TEST(CpuBackend, BatchInvariant) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(64, 4, 2, 2, 3));
  ASSERT_NE(model, nullptr);
  auto alone = MakeBackend(model, 4, 16, 1);
  auto shared = MakeBackend(model, 4, 16, 2);
  std::vector<int32_t> a = {5, 6, 7, 8, 9}, b = {10, 11, 12}, pa = {3, 1}, pb = {0, 2};
  std::vector<float> la, lb;
  SeqInput in_a{a, 0, pa, true};
  ASSERT_OK(alone->Forward({&in_a, 1}, &la));
  std::vector<SeqInput> batch = {{b, 0, pb, true}, {a, 0, pa, true}};
  ASSERT_OK(shared->Forward(batch, &lb));
  ASSERT_EQ(lb.size(), 2 * la.size());
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin() + la.size()));
}

// Every part of a forward pass and of its sampling is timed, and the products and attention
// carry the FLOPs the model's shapes give them; a take leaves the totals empty.
TEST(CpuBackend, TimesItsPartsWithTheirFlops) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(64, 4, 2, 2, 3));
  ASSERT_NE(model, nullptr);
  auto backend = MakeBackend(model, 4, 16, 2);
  std::vector<int32_t> prompt = {5, 6, 7}, pages = {0};
  const SeqInput in{prompt, 0, pages, true};
  const SampleInput greedy{};
  std::vector<int32_t> tokens;
  ASSERT_OK(backend->ForwardSample({&in, 1}, {&greedy, 1}, &tokens));
  ForwardPartTotals parts;
  ASSERT_TRUE(backend->TakeForwardParts(&parts));

  const common::ModelConfig& c = model->config();
  const auto flops = [&](std::initializer_list<const WeightMatrix*> ws, int tokens) {
    double f = 0;
    for (const WeightMatrix* w : ws) f += 2.0 * tokens * w->rows * w->cols;
    return f * c.n_layers;
  };
  const LlamaLayerWeights& w = model->layer(0);
  const auto at = [&](ForwardPart p) { return static_cast<int>(p); };
  EXPECT_EQ(parts.flops[at(ForwardPart::kQkvProducts)], flops({&w.wq, &w.wk, &w.wv}, 3));
  EXPECT_EQ(parts.flops[at(ForwardPart::kOutputProduct)], flops({&w.wo}, 3));
  EXPECT_EQ(parts.flops[at(ForwardPart::kGateUpProducts)], flops({&w.w_gate, &w.w_up}, 3));
  EXPECT_EQ(parts.flops[at(ForwardPart::kDownProduct)], flops({&w.w_down}, 3));
  // One row of logits: the prompt's last token.
  EXPECT_EQ(parts.flops[at(ForwardPart::kLogitsProduct)], 2.0 * c.dim * c.vocab_size);
  // Positions 0, 1 and 2 see 1 + 2 + 3 positions: scores and weighted values, every head.
  EXPECT_EQ(parts.flops[at(ForwardPart::kAttention)],
            4.0 * 6 * c.head_dim * c.n_heads * c.n_layers);
  EXPECT_EQ(parts.flops[at(ForwardPart::kElementwise)], 0);
  EXPECT_EQ(parts.flops[at(ForwardPart::kSampling)], 0);
  for (int i = 0; i < kNumForwardParts; ++i) {
    EXPECT_GT(parts.seconds[i], 0) << ForwardPartName(static_cast<ForwardPart>(i));
  }

  ForwardPartTotals again;
  ASSERT_TRUE(backend->TakeForwardParts(&again));
  for (int i = 0; i < kNumForwardParts; ++i) {
    EXPECT_EQ(again.seconds[i], 0);
    EXPECT_EQ(again.flops[i], 0);
  }
}

constexpr cpu::CpuIsa kIsas[] = {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512,
                                 cpu::CpuIsa::kAvx512Vnni, cpu::CpuIsa::kAvx512Amx};

// An instruction set as test names spell it ("Avx512Vnni").
std::string IsaLabel(cpu::CpuIsa isa) {
  switch (isa) {
    case cpu::CpuIsa::kPortable:
      return "Portable";
    case cpu::CpuIsa::kAvx2:
      return "Avx2";
    case cpu::CpuIsa::kAvx512:
      return "Avx512";
    case cpu::CpuIsa::kAvx512Vnni:
      return "Avx512Vnni";
    case cpu::CpuIsa::kAvx512Amx:
      return "Avx512Amx";
  }
  return "Unknown";
}

// The parameters' part of a test's name: "Avx512Vnni", "Avx512Vnni_Q4_K".
struct ParamName {
  std::string operator()(const ::testing::TestParamInfo<cpu::CpuIsa>& info) const {
    return IsaLabel(info.param);
  }
  std::string operator()(
      const ::testing::TestParamInfo<std::tuple<cpu::CpuIsa, common::GgmlType>>& info) const {
    return IsaLabel(std::get<0>(info.param)) + "_" + common::GgmlTypeName(std::get<1>(info.param));
  }
};

// The backend on one kernel table (and with one weight type), skipped where this CPU (or OS)
// lacks the table's instructions.
class OnTableAndType : public ::testing::TestWithParam<std::tuple<cpu::CpuIsa, common::GgmlType>> {
 protected:
  void SetUp() override {
    if (!cpu::IsaSupported(isa())) {
      GTEST_SKIP() << "this CPU (or OS) lacks the instructions of the " << cpu::CpuIsaName(isa())
                   << " kernel table";
    }
  }
  cpu::CpuIsa isa() const { return std::get<0>(GetParam()); }
  common::GgmlType type() const { return std::get<1>(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(
    CpuBackend, OnTableAndType,
    ::testing::Combine(::testing::ValuesIn(kIsas),
                       ::testing::Values(common::GgmlType::F32, common::GgmlType::F16,
                                         common::GgmlType::BF16, common::GgmlType::Q8_0,
                                         common::GgmlType::Q4_0, common::GgmlType::Q4_K,
                                         common::GgmlType::Q5_K, common::GgmlType::Q6_K)),
    ParamName());

class OnTable : public ::testing::TestWithParam<cpu::CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::IsaSupported(GetParam())) {
      GTEST_SKIP() << "this CPU (or OS) lacks the instructions of the "
                   << cpu::CpuIsaName(GetParam()) << " kernel table";
    }
  }
};
INSTANTIATE_TEST_SUITE_P(CpuBackend, OnTable, ::testing::ValuesIn(kIsas), ParamName());

// Logits are bitwise the same across batch compositions on every kernel table and weight type
// (quantized ones with 8-bit and with float activations), and every SIMD table stays within
// float rounding of the portable one.
TEST_P(OnTableAndType, BatchInvariantOnEveryPathAndType) {
  for (bool quantize_activations : {true, false}) {
    if (!quantize_activations && cpu::ActivationFormatFor(type()) == cpu::ActivationFormat::kNone) {
      continue;
    }
    SCOPED_TRACE(quantize_activations ? "8-bit activations" : "float activations");
    modelgen::RandomModelOptions o = testing::SmallRandomOptions(256, 4, 2, 1, 21);
    o.ffn_dim = 512;
    o.dtype = type();
    auto model = testing::RandomModel(o);
    ASSERT_NE(model, nullptr);
    auto make = [&](cpu::CpuIsa isa, int threads) {
      CpuBackendOptions options;
      options.page_size = 4;
      options.num_pages = 16;
      options.num_threads = threads;
      options.kernels = cpu::CpuIsaName(isa);
      options.quantize_activations = quantize_activations;
      return std::move(CpuBackend::Create(model, options).value());
    };
    std::vector<int32_t> a = {5, 6, 7, 8, 9}, b = {10, 11, 12}, c = {13};
    std::vector<int32_t> pa = {3, 1}, pb = {0, 2}, pc = {4};
    SeqInput in_a{a, 0, pa, true};
    auto alone = make(isa(), 1), shared = make(isa(), 2);
    std::vector<float> la, lb, lc;
    ASSERT_OK(alone->Forward({&in_a, 1}, &la));
    std::vector<SeqInput> batch = {{b, 0, pb, true}, {a, 0, pa, true}, {c, 0, pc, true}};
    ASSERT_OK(shared->Forward(batch, &lb));
    std::vector<SeqInput> other = {{c, 0, pc, false}, {a, 0, pa, true}};
    ASSERT_OK(shared->Forward(other, &lc));
    ASSERT_EQ(lb.size(), 3 * la.size());
    ASSERT_EQ(lc.size(), la.size());
    EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin() + la.size()));
    EXPECT_TRUE(std::equal(la.begin(), la.end(), lc.begin()));
    if (isa() != cpu::CpuIsa::kPortable) {
      std::vector<float> portable;
      ASSERT_OK(make(cpu::CpuIsa::kPortable, 1)->Forward({&in_a, 1}, &portable));
      ASSERT_EQ(portable.size(), la.size());
      for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], portable[i], 2e-3) << i;
    }
  }
}

// Unset, the activations of quantized weights are 8-bit on the tables with integer dot products
// and float on the others; set, they are what was asked.
TEST_P(OnTable, ActivationsFollowTheKernelTableUnlessAsked) {
  const cpu::CpuIsa isa = GetParam();
  modelgen::RandomModelOptions o = testing::SmallRandomOptions(64, 2, 2, 1, 3);
  o.ffn_dim = 128;
  o.dtype = common::GgmlType::Q8_0;
  auto model = testing::RandomModel(o);
  ASSERT_NE(model, nullptr);
  for (std::optional<bool> asked :
       {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    CpuBackendOptions options;
    options.num_pages = 8;
    options.num_threads = 1;
    options.kernels = cpu::CpuIsaName(isa);
    options.quantize_activations = asked;
    auto backend = CpuBackend::Create(model, options);
    ASSERT_OK(backend);
    const bool integer = isa == cpu::CpuIsa::kAvx512Vnni || isa == cpu::CpuIsa::kAvx512Amx;
    EXPECT_EQ((*backend)->quantizes_activations(), asked.value_or(integer))
        << (asked ? (*asked ? "asked 8-bit" : "asked float") : "not asked");
  }
}

TEST(CpuBackend, ValidatesInput) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(32, 2, 1, 1, 4));
  ASSERT_NE(model, nullptr);
  auto backend = MakeBackend(model, 4, 8);
  std::vector<float> logits;
  std::vector<int32_t> toks = {1, 2, 3}, pages = {0}, two_pages = {0, 1};
  auto forward = [&](SeqInput in) { return backend->Forward({&in, 1}, &logits); };
  auto expect_error = [](absl::Status s, const std::string& needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
  };
  std::vector<int32_t> bad_token = {1, 320, 3};
  expect_error(forward({bad_token, 0, pages, true}), "id 320, outside [0, vocab_size 320)");
  std::vector<int32_t> negative = {-1};
  expect_error(forward({negative, 0, pages, true}), "id -1");
  std::vector<int32_t> bad_page = {8};
  expect_error(forward({toks, 0, bad_page, true}), "id 8, outside [0, num_pages 8)");
  expect_error(forward({toks, 2, pages, true}), "needs 2 pages of 4 slots");
  expect_error(forward({{}, 0, pages, true}), "no tokens");
  expect_error(forward({toks, -1, pages, true}), "outside [0, context_length");
  std::vector<int32_t> many_pages(65, 0);
  expect_error(forward({toks, 254, many_pages, true}), "context_length 256");
  EXPECT_OK(forward({toks, 2, two_pages, true}));
  EXPECT_EQ(logits.size(), 320u);
  // Nothing wanted: no rows.
  EXPECT_OK(forward({toks, 0, pages, false}));
  EXPECT_TRUE(logits.empty());
  EXPECT_OK(backend->Forward({}, &logits));
}

TEST(CpuBackend, CreateRejectsBadOptions) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(32, 2, 1, 1, 4));
  EXPECT_FALSE(CpuBackend::Create(model, {16, 0, 0}).ok());
  EXPECT_FALSE(CpuBackend::Create(model, {0, 4, 0}).ok());
  EXPECT_FALSE(CpuBackend::Create(nullptr, {16, 4, 0}).ok());
  auto huge = CpuBackend::Create(model, {16, 1 << 30, 0});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
}

}  // namespace
}  // namespace pagoda::worker
