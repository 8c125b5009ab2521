// SyntheticBackend: tokens are a function of the sequence's tokens read back from its pages,
// whatever the batching; unwritten pages are refused; every step lasts the step time.
#include "worker/backend/synthetic/synthetic_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "absl/time/clock.h"
#include "tests/support/status_assertions.h"

namespace pagoda::worker {
namespace {

constexpr int kPage = 4;

common::ModelConfig Config() {
  common::ModelConfig c;
  c.vocab_size = 97;
  c.context_length = 128;
  return c;
}

std::unique_ptr<SyntheticBackend> Make(int pages, absl::Duration step = absl::ZeroDuration()) {
  auto backend =
      SyntheticBackend::Create(Config(), {.page_size = kPage, .num_pages = pages, .step = step});
  EXPECT_OK(backend);
  return *std::move(backend);
}

// Generates `n` tokens for `prompt` on `pages`, prefilling in chunks of `chunk` tokens.
std::vector<int32_t> Generate(SyntheticBackend& b, std::vector<int32_t> seq,
                              const std::vector<int32_t>& pages, int chunk, int n) {
  std::vector<int32_t> out;
  int32_t done = 0;
  const SampleInput greedy;
  while (static_cast<int>(out.size()) < n) {
    const int32_t take = std::min<int32_t>(chunk, static_cast<int32_t>(seq.size()) - done);
    SeqInput in{std::span<const int32_t>(seq.data() + done, take), done, pages,
                done + take == static_cast<int32_t>(seq.size())};
    std::vector<int32_t> tokens;
    EXPECT_OK(b.ForwardSample(
        {&in, 1}, in.want_logits ? std::span(&greedy, 1) : std::span<SampleInput>(), &tokens));
    done += take;
    if (!in.want_logits) continue;
    out.push_back(tokens.at(0));
    seq.push_back(tokens.at(0));
  }
  return out;
}

TEST(SyntheticBackendTest, TokensFollowTheSequenceWhateverTheChunking) {
  auto b = Make(64);
  const std::vector<int32_t> prompt = {5, 17, 3, 88, 41, 2, 9};
  const std::vector<int32_t> pages = {7, 2, 30, 11, 40, 0};  // positions [0, 24)
  const std::vector<int32_t> whole = Generate(*b, prompt, pages, 64, 12);
  // The reference: each token is SyntheticNextToken of everything before it.
  std::vector<int32_t> seq = prompt;
  for (int32_t t : whole) {
    EXPECT_EQ(t, SyntheticNextToken(seq, Config().vocab_size));
    EXPECT_GE(t, 0);
    EXPECT_LT(t, Config().vocab_size);
    seq.push_back(t);
  }
  // Other pages, one-token chunks: the same tokens.
  EXPECT_EQ(Generate(*b, prompt, {1, 3, 5, 9, 13, 21}, 1, 12), whole);
  // A different prompt gives different tokens (a hash, not a constant).
  EXPECT_NE(Generate(*b, {5, 17, 3, 88, 41, 2, 10}, pages, 3, 12), whole);
}

TEST(SyntheticBackendTest, BatchedEqualsAlone) {
  auto b = Make(256);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> seqs(8);
  std::vector<std::vector<int32_t>> pages(8);
  std::vector<std::span<const int32_t>> chunks;
  std::vector<SeqInput> batch;
  for (int s = 0; s < 8; ++s) {
    for (int i = 0; i < 5 + s; ++i) seqs[s].push_back(static_cast<int32_t>(rng() % 97));
    for (int p = 0; p < 4; ++p) pages[s].push_back(s * 4 + p);
    batch.push_back({seqs[s], 0, pages[s], true});
  }
  std::vector<SampleInput> samples(8);
  std::vector<int32_t> tokens;
  ASSERT_OK(b->ForwardSample(batch, samples, &tokens));
  ASSERT_EQ(tokens.size(), 8u);
  for (int s = 0; s < 8; ++s) EXPECT_EQ(tokens[s], SyntheticNextToken(seqs[s], 97));
  // Forward's logits are one-hot at the same tokens.
  std::vector<float> logits;
  ASSERT_OK(b->Forward(batch, &logits));
  ASSERT_EQ(logits.size(), 8u * 97);
  for (int s = 0; s < 8; ++s) {
    const float* row = logits.data() + s * 97;
    EXPECT_EQ(std::max_element(row, row + 97) - row, tokens[s]);
  }
}

TEST(SyntheticBackendTest, RefusesUnwrittenPositionsAndBadBatches) {
  auto b = Make(16);
  const std::vector<int32_t> token = {4};
  const std::vector<int32_t> pages = {3, 4};
  // Decoding at position 5 on pages nothing wrote: the scheduler lost the prefill.
  SeqInput in{token, 5, pages, true};
  const SampleInput greedy;
  std::vector<int32_t> out;
  absl::Status s = b->ForwardSample({&in, 1}, {&greedy, 1}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("position 0"), std::string::npos) << s;
  // A page outside the arena is refused as by every backend.
  const std::vector<int32_t> bad_pages = {16};
  SeqInput bad{token, 0, bad_pages, true};
  EXPECT_EQ(b->ForwardSample({&bad, 1}, {&greedy, 1}, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SyntheticBackend::Create(Config(), {.page_size = 0, .num_pages = 4}).ok());
  EXPECT_FALSE(SyntheticBackend::Create(Config(), {.page_size = 4, .num_pages = 0}).ok());
}

// n > 1: a completion forks from the prompt's pages, its partial last page copied (copy on
// write) before it writes there: it generates the prompt's tokens, and its writes leave the
// original page alone.
TEST(SyntheticBackendTest, CopiedPagesCarryTheirTokens) {
  auto b = Make(16);
  const std::vector<int32_t> prompt = {5, 17, 3, 88, 41, 2};  // 1.5 pages of 4
  const std::vector<int32_t> reference = Generate(*b, prompt, {0, 1, 3}, 64, 5);
  // The parent computes the prompt on pages 2 and 7 and samples its first token.
  const std::vector<int32_t> parent_pages = {2, 7, 12};
  ASSERT_EQ(Generate(*b, prompt, parent_pages, 64, 1), std::vector<int32_t>{reference[0]});
  ASSERT_OK(b->CopyPages(std::vector<PageCopy>{{.src = 7, .dst = 9}}));
  // The child shares page 2, owns the copy 9, recomputes the last prompt token and decodes on.
  const std::vector<int32_t> child_pages = {2, 9, 11};
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> child;
  const SampleInput greedy;
  std::vector<int32_t> tokens;
  for (int32_t pos = static_cast<int32_t>(prompt.size()) - 1; child.size() < 5; ++pos) {
    SeqInput in{std::span<const int32_t>(seq.data() + pos, 1), pos, child_pages, true};
    ASSERT_OK(b->ForwardSample({&in, 1}, {&greedy, 1}, &tokens)) << "position " << pos;
    child.push_back(tokens.at(0));
    seq.push_back(tokens.at(0));
  }
  EXPECT_EQ(child, reference);
  // The parent decodes its first token at position 6: page 7 still holds the prompt.
  SeqInput parent{std::span<const int32_t>(seq.data() + 6, 1), 6, parent_pages, true};
  ASSERT_OK(b->ForwardSample({&parent, 1}, {&greedy, 1}, &tokens));
  EXPECT_EQ(tokens.at(0), reference[1]);
  // Without the copy, page 10 was never written: reading it is refused.
  const std::vector<int32_t> uncopied_pages = {2, 10};
  SeqInput uncopied{std::span<const int32_t>(prompt.data() + 5, 1), 5, uncopied_pages, true};
  EXPECT_FALSE(b->ForwardSample({&uncopied, 1}, {&greedy, 1}, &tokens).ok());
  EXPECT_EQ(b->CopyPages(std::vector<PageCopy>{{.src = 16, .dst = 0}}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Swap preemption: a sequence's pages go to swap slots, other tokens overwrite the pages, and
// the slots come back into other pages: decoding continues with the unswapped tokens.
TEST(SyntheticBackendTest, SwappedPagesCarryTheirTokens) {
  auto b = Make(16);
  ASSERT_OK(b->InitSwapSpace(4));
  EXPECT_EQ(b->num_swap_pages(), 4);
  const std::vector<int32_t> prompt = {5, 17, 3, 88, 41, 2};  // 1.5 pages of 4
  const std::vector<int32_t> reference = Generate(*b, prompt, {0, 1, 3}, 64, 5);
  ASSERT_EQ(Generate(*b, prompt, {2, 7}, 64, 1), std::vector<int32_t>{reference[0]});
  ASSERT_OK(b->SwapOut(std::vector<SwapCopy>{{.page = 2, .slot = 3}, {.page = 7, .slot = 0}}));
  Generate(*b, {9, 9, 9, 9, 9, 9, 9}, {7, 2}, 64, 1);  // another sequence takes the pages
  ASSERT_OK(b->SwapIn(std::vector<SwapCopy>{{.page = 10, .slot = 3}, {.page = 5, .slot = 0}}));
  std::vector<int32_t> seq = prompt;
  seq.push_back(reference[0]);
  const std::vector<int32_t> pages = {10, 5, 12};
  const SampleInput greedy;
  std::vector<int32_t> tokens, continued;
  for (int32_t pos = static_cast<int32_t>(prompt.size()); continued.size() < 4; ++pos) {
    SeqInput in{std::span<const int32_t>(seq.data() + pos, 1), pos, pages, true};
    ASSERT_OK(b->ForwardSample({&in, 1}, {&greedy, 1}, &tokens)) << "position " << pos;
    continued.push_back(tokens.at(0));
    seq.push_back(tokens.at(0));
  }
  EXPECT_EQ(continued, std::vector<int32_t>(reference.begin() + 1, reference.end()));
  EXPECT_EQ(b->SwapIn(std::vector<SwapCopy>{{.page = 0, .slot = 4}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->SwapOut(std::vector<SwapCopy>{{.page = 16, .slot = 0}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->InitSwapSpace(8).code(), absl::StatusCode::kFailedPrecondition);
  // Without a swap space, swaps are refused and an empty list is nothing to do.
  auto none = Make(16);
  EXPECT_EQ(none->num_swap_pages(), 0);
  EXPECT_OK(none->SwapOut({}));
  EXPECT_EQ(none->SwapOut(std::vector<SwapCopy>{{.page = 0, .slot = 0}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none->InitSwapSpace(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticBackendTest, EveryStepLastsAtLeastTheStepTime) {
  auto b = Make(16, absl::Milliseconds(20));
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> pages = {0};
  SeqInput in{prompt, 0, pages, true};
  const SampleInput greedy;
  std::vector<int32_t> out;
  const absl::Time start = absl::Now();
  ASSERT_OK(b->ForwardSample({&in, 1}, {&greedy, 1}, &out));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_EQ(b->name(), "synthetic");
}

// Masks still being filled when the step starts are awaited before they are read: here the
// pending set writes its mask only in Wait (as the runner's filler finishes its rows), and the
// row's token obeys that mask.
TEST(SyntheticBackendTest, PendingMasksAreAwaitedBeforeTheyAreRead) {
  auto b = Make(16);
  EXPECT_TRUE(b->OverlapsMasks());
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> pages = {0};
  SeqInput in{prompt, 0, pages, true};
  std::vector<uint32_t> mask((Config().vocab_size + 31) / 32, 0u);
  SampleInput sample;
  sample.allowed = mask;
  struct Pending final : PendingMasks {
    std::vector<uint32_t>* mask = nullptr;
    int waits = 0;
    void Wait() override {
      ++waits;
      (*mask)[1] = 1u << 8;  // token 40 alone
    }
  } pending;
  pending.mask = &mask;
  std::vector<int32_t> out;
  ASSERT_OK(b->ForwardSampleMasksPending({&in, 1}, {&sample, 1}, &out, nullptr, pending));
  EXPECT_EQ(out.at(0), 40);
  EXPECT_GE(pending.waits, 1);
}

// A constrained row gets its synthetic token when allowed, else the allowed id of rank
// token mod count: always an allowed id, varying with the synthetic token.
TEST(SyntheticBackendTest, AllowedTokenPicksAnAllowedId) {
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint32_t> mask(5);
    for (uint32_t& w : mask) w = round % 7 == 0 ? 0u : static_cast<uint32_t>(rng()) & rng();
    std::vector<int32_t> ids;
    for (int t = 0; t < 160; ++t) {
      if (mask[t / 32] >> (t % 32) & 1u) ids.push_back(t);
    }
    const int32_t token = static_cast<int32_t>(rng() % 160);
    const int32_t got = AllowedToken(token, mask);
    if (ids.empty()) {
      EXPECT_EQ(got, token);
    } else if (std::find(ids.begin(), ids.end(), token) != ids.end()) {
      EXPECT_EQ(got, token);
    } else {
      EXPECT_EQ(got, ids[token % ids.size()]);
    }
  }
  EXPECT_EQ(AllowedToken(9, {}), 9);
}

}  // namespace
}  // namespace pagoda::worker
