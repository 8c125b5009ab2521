// Runner: plans in, sampled tokens out, on the CPU backend with the trained model.
#include "worker/runner/runner.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/gguf_reader.h"
#include "common/grammar/grammar.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"
#include "tests/worker/model_fixtures.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/synthetic/synthetic_backend.h"
#include "worker/model/llama_model.h"

namespace pagoda::worker {
namespace {

namespace wv1 = pagoda::worker::v1;

std::unique_ptr<Runner> MakeRunner(const std::string& path, int page_size, int pages) {
  auto model = LlamaModel::Load(path);
  EXPECT_OK(model);
  CpuBackendOptions options;
  options.page_size = page_size;
  options.num_pages = pages;
  options.num_threads = 1;
  auto backend = CpuBackend::Create(*model, options);
  EXPECT_OK(backend);
  return std::make_unique<Runner>(*std::move(backend));
}

wv1::SequenceStep* AddStep(wv1::IterationPlan& plan, uint64_t seq,
                           const std::vector<int32_t>& tokens, int start,
                           const std::vector<uint32_t>& pages, bool sample, int index) {
  auto* s = plan.add_steps();
  s->set_seq_id(seq);
  s->mutable_tokens()->Add(tokens.begin(), tokens.end());
  s->set_start_pos(start);
  s->mutable_new_pages()->Add(pages.begin(), pages.end());
  s->set_sample(sample);
  s->set_sample_index(index);
  s->set_first_sight(start == 0);
  return s;
}

// Chunked prefill then decode through Execute reproduces llama.cpp's greedy tokens, with two
// sequences interleaved in the same plans on scattered pages.
TEST(RunnerTest, ExecutesChunkedPrefillAndDecodesGolden) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model, "stories260K-f32.gguf");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  std::ifstream in(*golden_path);
  const auto cases = nlohmann::json::parse(in)["cases"];
  const auto a_prompt = cases[0]["prompt_token_ids"].get<std::vector<int32_t>>();
  const auto a_expect = cases[0]["expected_token_ids"].get<std::vector<int32_t>>();
  const auto b_prompt = cases[1]["prompt_token_ids"].get<std::vector<int32_t>>();
  const auto b_expect = cases[1]["expected_token_ids"].get<std::vector<int32_t>>();
  constexpr int kPage = 4;
  auto runner = MakeRunner(*model, kPage, 64);
  // Pages handed out alternately so the two sequences' tables interleave.
  uint32_t next_page = 63;
  std::vector<int32_t> a = a_prompt, b = b_prompt;
  int a_pages = 0, b_pages = 0;
  auto grow = [&](int& have, int positions) {
    std::vector<uint32_t> out;
    while (have * kPage < positions) out.push_back(next_page--), ++have;
    return out;
  };
  wv1::IterationPlan plan;
  plan.set_iteration(1);
  AddStep(plan, 1, std::vector<int32_t>(a.begin(), a.begin() + 3), 0, grow(a_pages, 3), false, 0);
  AddStep(plan, 2, b, 0, grow(b_pages, b.size()), true, 0);
  plan.mutable_steps(0)->mutable_sampling()->set_temperature(0);
  wv1::IterationResult r = runner->Execute(plan);
  ASSERT_TRUE(r.error().empty()) << r.error();
  ASSERT_EQ(r.sampled_size(), 1);
  b.push_back(r.sampled(0).token_id());
  plan.Clear();
  plan.set_iteration(2);
  AddStep(plan, 1, std::vector<int32_t>(a.begin() + 3, a.end()), 3, grow(a_pages, a.size()), true,
          0);
  for (int step = 0; step < 10; ++step) {
    const int bpos = static_cast<int>(b.size()) - 1;
    AddStep(plan, 2, {b.back()}, bpos, grow(b_pages, bpos + 1), true, bpos - b_prompt.size() + 1);
    r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    for (const auto& t : r.sampled()) (t.seq_id() == 1 ? a : b).push_back(t.token_id());
    plan.Clear();
    plan.set_iteration(3 + step);
    const int apos = static_cast<int>(a.size()) - 1;
    AddStep(plan, 1, {a.back()}, apos, grow(a_pages, apos + 1), true, apos - a_prompt.size() + 1);
  }
  EXPECT_EQ(std::vector<int32_t>(a.begin() + a_prompt.size(), a.end()),
            std::vector<int32_t>(a_expect.begin(), a_expect.begin() + 10));
  EXPECT_EQ(std::vector<int32_t>(b.begin() + b_prompt.size(), b.end()),
            std::vector<int32_t>(b_expect.begin(), b_expect.begin() + 11));
  EXPECT_EQ(runner->num_sequences(), 2u);
  plan.Clear();
  plan.add_free_seq_ids(1);
  plan.add_free_seq_ids(2);
  EXPECT_TRUE(runner->Execute(plan).error().empty());
  EXPECT_EQ(runner->num_sequences(), 0u);
}

TEST(RunnerTest, BadPlansGiveErrorsNotCrashes) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model, "stories260K-f32.gguf");
  auto runner = MakeRunner(*model, 4, 8);
  wv1::IterationPlan unknown;
  AddStep(unknown, 9, {5}, 3, {}, true, 0)->set_first_sight(false);
  EXPECT_NE(runner->Execute(unknown).error().find("does not know"), std::string::npos);
  wv1::IterationPlan bad_page;
  AddStep(bad_page, 1, {1, 2}, 0, {8}, true, 0);
  EXPECT_NE(runner->Execute(bad_page).error().find("outside the arena of 8 pages"),
            std::string::npos);
  wv1::IterationPlan bad_token;
  AddStep(bad_token, 2, {1, 100000}, 0, {0}, true, 0);
  EXPECT_FALSE(runner->Execute(bad_token).error().empty());
}

}  // namespace
}  // namespace pagoda::worker

namespace pagoda::worker {
namespace {

// Copy on write as n > 1 uses it: sequence 2 shares sequence 1's whole prompt pages and a copy
// of its partial last page, recomputes the last prompt token and samples what sequence 1
// sampled; sequence 1 keeps decoding in its own page, and both continue like the golden run.
TEST(RunnerTest, PageCopiesLetAForkContinueFromSharedPages) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model, "stories260K-f32.gguf");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  std::ifstream in(*golden_path);
  const auto cases = nlohmann::json::parse(in)["cases"];
  const auto prompt = cases[2]["prompt_token_ids"].get<std::vector<int32_t>>();
  const auto expect = cases[2]["expected_token_ids"].get<std::vector<int32_t>>();
  const int p = static_cast<int>(prompt.size());
  // A page size that leaves a whole page to share and several positions in the partial one.
  int kPage = std::max(3, (p + 1) / 2);
  while ((p - 1) % kPage == 0) ++kPage;
  auto runner = MakeRunner(*model, kPage, 64);
  std::vector<uint32_t> pages;  // room for two decode steps
  for (int i = 0; i < (p + 2 + kPage - 1) / kPage; ++i) pages.push_back(10 + i);
  wv1::IterationPlan plan;
  plan.set_iteration(1);
  AddStep(plan, 1, prompt, 0, pages, true, 0);
  wv1::IterationResult r = runner->Execute(plan);
  ASSERT_TRUE(r.error().empty()) << r.error();
  ASSERT_EQ(r.sampled(0).token_id(), expect[0]);
  // The fork: whole pages shared, the partial one (holding position p - 1) copied to page 40.
  const int partial = (p - 1) / kPage;
  std::vector<uint32_t> fork_pages(pages.begin(), pages.begin() + partial);
  fork_pages.push_back(40);
  fork_pages.push_back(41);  // room for one decode step
  plan.Clear();
  plan.set_iteration(2);
  auto* copy = plan.add_page_copies();
  copy->set_src(pages[partial]);
  copy->set_dst(40);
  AddStep(plan, 1, {expect[0]}, p, {}, true, 1);
  AddStep(plan, 2, {prompt.back()}, p - 1, fork_pages, true, 0)->set_first_sight(true);
  r = runner->Execute(plan);
  ASSERT_TRUE(r.error().empty()) << r.error();
  ASSERT_EQ(r.sampled_size(), 2);
  EXPECT_EQ(r.sampled(0).token_id(), expect[1]);
  EXPECT_EQ(r.sampled(1).token_id(), expect[0]) << "the fork sees the copied prompt KV";
  // Both continue: sequence 2's writes land in its copy, never in sequence 1's page.
  plan.Clear();
  plan.set_iteration(3);
  AddStep(plan, 1, {expect[1]}, p + 1, {}, true, 2);
  AddStep(plan, 2, {expect[0]}, p, {}, true, 1);
  r = runner->Execute(plan);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.sampled(0).token_id(), expect[2]);
  EXPECT_EQ(r.sampled(1).token_id(), expect[1]);
  // Bad copies are refused before anything runs.
  plan.Clear();
  plan.set_iteration(4);
  copy = plan.add_page_copies();
  copy->set_src(3);
  copy->set_dst(64);
  r = runner->Execute(plan);
  EXPECT_NE(r.error().find("below 64"), std::string::npos) << r.error();
}

constexpr int kPage = 4;

// A runner on a small random-weights model (no file needed), with `swap_slots` of swap space.
std::unique_ptr<Runner> MakeRandomRunner(int page_size, int pages, int swap_slots) {
  auto model = testing::RandomModel(testing::SmallRandomOptions(64, 4, 2, 2, 7));
  CpuBackendOptions options;
  options.page_size = page_size;
  options.num_pages = pages;
  options.num_threads = 1;
  auto backend = CpuBackend::Create(model, options);
  EXPECT_OK(backend);
  if (swap_slots > 0) {
    EXPECT_OK((*backend)->InitSwapSpace(swap_slots));
  }
  return std::make_unique<Runner>(*std::move(backend));
}

std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>((seed + 37u * i * i) % 320));
  return out;
}

// Decodes sequence 1 (greedy, `seq` its tokens so far) `decodes` more steps on the pages it
// has, appending each sample to `seq` and `out`.
void Decode(Runner& runner, uint64_t& iteration, std::vector<int32_t>& seq, int prompt_len,
            int decodes, std::vector<int32_t>* out) {
  for (int i = 0; i < decodes; ++i) {
    wv1::IterationPlan plan;
    plan.set_iteration(iteration++);
    const int pos = static_cast<int>(seq.size()) - 1;
    AddStep(plan, 1, {seq.back()}, pos, {}, true, pos - prompt_len + 1);
    wv1::IterationResult r = runner.Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    seq.push_back(r.sampled(0).token_id());
    out->push_back(seq.back());
  }
}

// Swap preemption end to end: sequence 1's pages go to swap slots (the same plan frees it and
// hands its pages to sequence 2, whose prefill overwrites them), then come back into other pages
// (the same plan resumes it, first sight again): greedy decoding continues with exactly the
// tokens of an unswapped run. Without the swap in, its new pages hold no KV: other tokens.
TEST(RunnerTest, SwappedSequenceContinuesWithTheSameTokens) {
  const std::vector<int32_t> prompt = Prompt(11, 3), other = Prompt(16, 11);
  const std::vector<uint32_t> first_pages = {3, 7, 5, 9, 2};  // positions [0, 20)
  std::vector<int32_t> reference;
  {
    auto runner = MakeRandomRunner(kPage, 16, 0);
    wv1::IterationPlan plan;
    plan.set_iteration(1);
    AddStep(plan, 1, prompt, 0, first_pages, true, 0);
    wv1::IterationResult r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    std::vector<int32_t> seq = prompt;
    seq.push_back(r.sampled(0).token_id());
    reference.push_back(seq.back());
    uint64_t iteration = 2;
    Decode(*runner, iteration, seq, 11, 8, &reference);
  }
  for (bool swap_in : {true, false}) {
    SCOPED_TRACE(swap_in ? "swapped in" : "not swapped in");
    auto runner = MakeRandomRunner(kPage, 16, 8);
    std::vector<StepTiming> timings;
    runner->SetStepObserver([&](const StepTiming& t) { timings.push_back(t); });
    wv1::IterationPlan plan;
    plan.set_iteration(1);
    AddStep(plan, 1, prompt, 0, first_pages, true, 0);
    wv1::IterationResult r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    std::vector<int32_t> seq = prompt, got;
    seq.push_back(r.sampled(0).token_id());
    got.push_back(seq.back());
    uint64_t iteration = 2;
    Decode(*runner, iteration, seq, 11, 3, &got);  // positions [0, 14) computed
    // Preempt: pages 3, 7, 5, 9 (positions [0, 16)) out, and sequence 2 prefills into them.
    plan.Clear();
    plan.set_iteration(iteration++);
    const std::vector<std::pair<uint32_t, uint32_t>> out = {{3, 5}, {7, 0}, {5, 2}, {9, 6}};
    for (const auto& [page, slot] : out) {
      auto* c = plan.add_swap_out();
      c->set_page(page);
      c->set_slot(slot);
    }
    plan.add_free_seq_ids(1);
    AddStep(plan, 2, other, 0, {9, 5, 7, 3}, true, 0);
    r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    EXPECT_GT(r.swap_seconds(), 0);
    EXPECT_EQ(runner->num_sequences(), 1u);
    // Resume into pages 11, 12, 1, 14 (+ 0 for room), feeding its last sample.
    plan.Clear();
    plan.set_iteration(iteration++);
    const std::vector<std::pair<uint32_t, uint32_t>> in = {{11, 5}, {12, 0}, {1, 2}, {14, 6}};
    for (const auto& [page, slot] : in) {
      if (!swap_in) break;
      auto* c = plan.add_swap_in();
      c->set_page(page);
      c->set_slot(slot);
    }
    const int pos = static_cast<int>(seq.size()) - 1;
    AddStep(plan, 1, {seq.back()}, pos, {11, 12, 1, 14, 0}, true, pos - 10)->set_first_sight(true);
    r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    seq.push_back(r.sampled(0).token_id());
    got.push_back(seq.back());
    Decode(*runner, iteration, seq, 11, 4, &got);
    if (swap_in) {
      EXPECT_EQ(got, reference);
      ASSERT_GE(timings.size(), 6u);
      EXPECT_EQ(timings[4].pages_swapped_out, 4);
      EXPECT_EQ(timings[5].pages_swapped_in, 4);
      EXPECT_GT(timings[5].swap_seconds, 0);
      EXPECT_EQ(timings[5].pages_swapped_out, 0);
    } else {
      EXPECT_NE(got, reference);
    }
  }
}

TEST(RunnerTest, BadSwapsGiveErrorsBeforeAnythingRuns) {
  auto plan_with = [](const char* list, uint32_t page, uint32_t slot) {
    wv1::IterationPlan plan;
    plan.set_iteration(7);
    auto* c = std::string(list) == "out" ? plan.add_swap_out() : plan.add_swap_in();
    c->set_page(page);
    c->set_slot(slot);
    return plan;
  };
  auto none = MakeRandomRunner(kPage, 8, 0);
  std::string error = none->Execute(plan_with("out", 0, 0)).error();
  EXPECT_NE(error.find("no swap space"), std::string::npos) << error;
  auto runner = MakeRandomRunner(kPage, 8, 4);
  wv1::IterationPlan plan;
  plan.set_iteration(1);
  AddStep(plan, 1, Prompt(5, 1), 0, {0, 1}, true, 0);
  ASSERT_TRUE(runner->Execute(plan).error().empty());
  error = runner->Execute(plan_with("in", 2, 4)).error();
  EXPECT_NE(error.find("swap_in entry 0: page 2, slot 4"), std::string::npos) << error;
  EXPECT_NE(error.find("slots below 4"), std::string::npos) << error;
  // A bad entry after a good one: the plan's free is not applied either.
  plan = plan_with("out", 0, 0);
  auto* bad = plan.add_swap_out();
  bad->set_page(8);
  bad->set_slot(1);
  plan.add_free_seq_ids(1);
  error = runner->Execute(plan).error();
  EXPECT_NE(error.find("pages must be below 8"), std::string::npos) << error;
  EXPECT_EQ(runner->num_sequences(), 1u);
}

TEST(RunnerTest, MeasuresTheSwapTimeOfOnePage) {
  auto none = MakeRandomRunner(kPage, 8, 0);
  ASSERT_OK(none->MeasureSwap());
  EXPECT_EQ(none->swap_seconds_per_page(), 0);
  auto runner = MakeRandomRunner(kPage, 8, 3);
  ASSERT_OK(runner->MeasureSwap());
  EXPECT_GT(runner->swap_seconds_per_page(), 0);
  EXPECT_LT(runner->swap_seconds_per_page(), 1);
}

}  // namespace
}  // namespace pagoda::worker

namespace pagoda::worker {
namespace {

// The stories260K vocabulary as the scheduler would send it (SentencePiece: "▁" is a space,
// <0xHH> pieces their byte; control tokens are special).
wv1::Vocabulary StoriesVocabulary(const std::string& path) {
  auto file = common::GgufFile::Open(path);
  EXPECT_OK(file);
  const auto pieces = (*file)->GetStringArray("tokenizer.ggml.tokens").value();
  const auto types = (*file)->GetInt32Array("tokenizer.ggml.token_type").value();
  wv1::Vocabulary v;
  for (size_t id = 0; id < pieces.size(); ++id) {
    std::string bytes = pieces[id];
    if (types[id] == 6) {  // byte
      bytes = std::string(1, static_cast<char>(std::stoi(pieces[id].substr(3, 2), nullptr, 16)));
    } else if (types[id] == 3) {  // control: no text
      bytes.clear();
      v.add_special_ids(static_cast<int32_t>(id));
    } else {
      for (size_t at; (at = bytes.find("\u2581")) != std::string::npos;) bytes.replace(at, 3, " ");
    }
    v.add_token_bytes(bytes);
  }
  return v;
}

// Constrained sequences on the trained model, sampled at temperature 1: every answer is a
// sentence of the grammar and ends with EOS, also when the sequence is freed midway and
// resumed on first sight from its history (a preemption or a failover).
TEST(RunnerTest, ConstrainedSamplesStayInTheGrammarAndEnd) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(model, "stories260K-f32.gguf");
  PAGODA_SKIP_WITHOUT_TEST_MODELS(golden_path, "golden.json");
  std::ifstream in(*golden_path);
  const auto prompt =
      nlohmann::json::parse(in)["cases"][0]["prompt_token_ids"].get<std::vector<int32_t>>();
  const wv1::Vocabulary vocab = StoriesVocabulary(*model);
  constexpr int kPage = 16, kEos = 2;
  const std::string gbnf =
      "root ::= \"{\\\"name\\\":\\\"\" [a-z ]{1,12} \"\\\",\\\"age\\\":\" [1-9] [0-9]? \"}\"\n";
  auto grammar = grammar::Grammar::FromGbnf(gbnf);
  ASSERT_OK(grammar);
  for (uint64_t seed = 0; seed < 6; ++seed) {
    SCOPED_TRACE(seed);
    auto runner = MakeRunner(*model, kPage, 64);
    runner->SetVocabulary(vocab);
    std::vector<int32_t> tokens = prompt;
    const uint64_t seq = 7;
    auto first_step = [&](wv1::IterationPlan& plan, int start, std::vector<uint32_t> pages) {
      wv1::SequenceStep* s =
          AddStep(plan, seq, std::vector<int32_t>(tokens.begin() + start, tokens.end()), start,
                  pages, true, static_cast<int>(tokens.size() - prompt.size()));
      s->set_first_sight(true);
      s->mutable_sampling()->set_temperature(1.0f);
      s->mutable_sampling()->set_seed(seed);
      s->mutable_sampling()->mutable_constraint()->set_grammar(gbnf);
      s->mutable_sampling()->mutable_constraint()->add_end_token_ids(kEos);
      s->set_prompt_tokens(static_cast<uint32_t>(prompt.size()));
      s->mutable_history()->Add(tokens.begin(), tokens.begin() + start);
    };
    wv1::IterationPlan plan;
    plan.set_iteration(1);
    first_step(plan, 0, {0, 1, 2, 3});
    bool ended = false;
    for (int step = 0; step < 60 && !ended; ++step) {
      wv1::IterationResult r = runner->Execute(plan);
      ASSERT_TRUE(r.error().empty()) << r.error();
      ASSERT_EQ(r.sampled_size(), 1);
      const int32_t t = r.sampled(0).token_id();
      ended = t == kEos;
      tokens.push_back(t);
      plan.Clear();
      plan.set_iteration(step + 2);
      if (step == 4) {  // freed and seen again: the matcher is rebuilt from the history
        plan.add_free_seq_ids(seq);
        first_step(plan, static_cast<int>(tokens.size()) - 1, {});
        for (uint32_t page : {0u, 1u, 2u, 3u}) plan.mutable_steps(0)->add_new_pages(page);
      } else {
        const int pos = static_cast<int>(tokens.size()) - 1;
        AddStep(plan, seq, {t}, pos, {}, true, pos - static_cast<int>(prompt.size()) + 1)
            ->set_first_sight(false);
      }
    }
    ASSERT_TRUE(ended) << "no EOS within 60 tokens";
    std::string text;
    for (size_t i = prompt.size(); i + 1 < tokens.size(); ++i) {
      text += vocab.token_bytes(tokens[i]);
    }
    grammar::Matcher m(*grammar);
    EXPECT_TRUE(m.Advance(text) && m.Accepting()) << text;
  }
}

// A small vocabulary for JSON-like text (id 0: the end token, special) and a grammar over it,
// for constrained sequences on the synthetic backend.
constexpr int kSmallEos = 0;
const char kSmallGbnf[] =
    "root ::= \"{\\\"name\\\":\\\"\" [a-z ]{0,40} \"\\\",\\\"n\\\":\" [0-9]{1,5} \"}\"\n";

wv1::Vocabulary SmallVocabulary() {
  wv1::Vocabulary vocab;
  vocab.add_token_bytes("");  // kSmallEos
  vocab.add_special_ids(kSmallEos);
  for (char c : std::string("{}\":, -abcdefghijklmnopqrstuvwxyz0123456789ABC")) {
    vocab.add_token_bytes(std::string(1, c));
  }
  for (const char* piece : {"{\"", "\":\"", "\",\"", "\":", "ab", "the", " of", "ing", "12", "345",
                            "\"}", "na", "me", "\",\"n", "xyz", "  ", "q1", "a\""}) {
    vocab.add_token_bytes(piece);
  }
  return vocab;
}

std::unique_ptr<Runner> SyntheticRunner(int vocab_size, int pages, int mask_threads) {
  common::ModelConfig config;
  config.vocab_size = vocab_size;
  config.context_length = 1024;
  auto backend = SyntheticBackend::Create(
      config, {.page_size = 16, .num_pages = pages, .step = absl::ZeroDuration()});
  EXPECT_OK(backend);
  return std::make_unique<Runner>(*std::move(backend), mask_threads);
}

// Constrained sequences on the synthetic backend, whose forward pass overlaps the masks: the
// tokens are the same whether the runner fills the masks alone or with helper threads, also
// for sequences freed midway and seen again (their matchers rebuilt from the history), and
// every answer is a sentence of the grammar.
TEST(RunnerTest, MaskThreadsGiveTheSameTokens) {
  constexpr int kPagesPerSeq = 6, kSeqs = 24, kPrompt = 5, kEos = kSmallEos;
  const wv1::Vocabulary vocab = SmallVocabulary();
  const int vocab_size = vocab.token_bytes_size();
  const std::string gbnf = kSmallGbnf;
  auto grammar = grammar::Grammar::FromGbnf(gbnf);
  ASSERT_OK(grammar);
  auto run = [&](int mask_threads) {
    auto runner_ptr = SyntheticRunner(vocab_size, kSeqs * kPagesPerSeq, mask_threads);
    Runner& runner = *runner_ptr;
    runner.SetVocabulary(vocab);
    std::vector<std::vector<int32_t>> seqs(kSeqs);
    std::vector<bool> ended(kSeqs, false);
    for (int i = 0; i < kSeqs; ++i) {
      for (int p = 0; p < kPrompt; ++p) seqs[i].push_back(1 + (i * 7 + p * 3) % (vocab_size - 1));
    }
    auto first_sight = [&](wv1::IterationPlan& plan, int i, int start) {
      std::vector<uint32_t> pages;
      for (int p = 0; p < kPagesPerSeq; ++p) pages.push_back(i * kPagesPerSeq + p);
      const std::vector<int32_t>& seq = seqs[i];
      wv1::SequenceStep* s = AddStep(plan, i, std::vector<int32_t>(seq.begin() + start, seq.end()),
                                     start, pages, true, static_cast<int>(seq.size()) - kPrompt);
      s->set_first_sight(true);
      s->mutable_sampling()->mutable_constraint()->set_grammar(gbnf);
      s->mutable_sampling()->mutable_constraint()->add_end_token_ids(kEos);
      s->set_prompt_tokens(kPrompt);
      s->mutable_history()->Add(seq.begin(), seq.begin() + start);
    };
    for (int step = 0; step < 80; ++step) {
      wv1::IterationPlan plan;
      plan.set_iteration(step + 1);
      for (int i = 0; i < kSeqs; ++i) {
        if (ended[i]) continue;
        const int pos = static_cast<int>(seqs[i].size()) - 1;
        if (step == 0) {
          first_sight(plan, i, 0);
        } else if (step == 6 + i % 5 && i % 3 == 0) {  // freed and seen again
          plan.add_free_seq_ids(i);
          first_sight(plan, i, pos);
        } else {
          AddStep(plan, i, {seqs[i].back()}, pos, {}, true, pos - kPrompt + 1)
              ->set_first_sight(false);
        }
      }
      if (plan.steps_size() == 0) break;
      wv1::IterationResult r = runner.Execute(plan);
      EXPECT_TRUE(r.error().empty()) << r.error();
      for (const wv1::SampledToken& t : r.sampled()) {
        seqs[t.seq_id()].push_back(t.token_id());
        if (t.token_id() == kEos) ended[t.seq_id()] = true;
      }
    }
    for (int i = 0; i < kSeqs; ++i) {
      EXPECT_TRUE(ended[i]) << "sequence " << i << " did not end";
      std::string text;
      for (size_t k = kPrompt; k + 1 < seqs[i].size(); ++k) text += vocab.token_bytes(seqs[i][k]);
      grammar::Matcher m(*grammar);
      EXPECT_TRUE(m.Advance(text) && m.Accepting()) << text;
    }
    return seqs;
  };
  const auto alone = run(0);
  EXPECT_EQ(run(1), alone);
  EXPECT_EQ(run(3), alone);
}

// A token the constraint refuses (only a scheduler out of step would send one) leaves the
// sequence nothing but its end token, with helper threads feeding the matcher.
TEST(RunnerTest, RefusedTokenLeavesOnlyTheEnd) {
  const wv1::Vocabulary vocab = SmallVocabulary();
  auto runner = SyntheticRunner(vocab.token_bytes_size(), 8, 2);
  runner->SetVocabulary(vocab);
  const int32_t upper_a = 1 + static_cast<int32_t>(std::string("{}\":, -").size()) + 26 + 10;
  ASSERT_EQ(vocab.token_bytes(upper_a), "A");
  wv1::IterationPlan plan;
  plan.set_iteration(1);
  wv1::SequenceStep* s = AddStep(plan, 1, {5, 6, 7}, 0, {0, 1}, true, 0);
  s->mutable_sampling()->mutable_constraint()->set_grammar(kSmallGbnf);
  s->mutable_sampling()->mutable_constraint()->add_end_token_ids(kSmallEos);
  s->set_prompt_tokens(3);
  wv1::IterationResult r = runner->Execute(plan);
  ASSERT_TRUE(r.error().empty()) << r.error();
  ASSERT_EQ(r.sampled_size(), 1);
  EXPECT_NE(r.sampled(0).token_id(), kSmallEos);
  for (int step = 0; step < 3; ++step) {  // "A" is never allowed: only the end remains
    plan.Clear();
    plan.set_iteration(2 + step);
    AddStep(plan, 1, {upper_a}, 3 + step, {}, true, 1 + step)->set_first_sight(false);
    r = runner->Execute(plan);
    ASSERT_TRUE(r.error().empty()) << r.error();
    ASSERT_EQ(r.sampled_size(), 1);
    EXPECT_EQ(r.sampled(0).token_id(), kSmallEos) << step;
  }
}

}  // namespace
}  // namespace pagoda::worker
