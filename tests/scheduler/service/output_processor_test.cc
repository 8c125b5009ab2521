// The one output path of both APIs, without an engine or a network: tokens in, deltas out, as
// the calls drive it (the engine side under the owner's mutex, the writer side without).
#include "scheduler/service/output_processor.h"

#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "tests/scheduler/text/test_vocabs.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

using ::pagoda::testing::kFirstSyntheticPiece;
using ::pagoda::testing::MakeSyntheticVocab;
using ::pagoda::testing::SyntheticByteId;

// Pieces "ab", "cd", "ef" (ids kAb, kCd, kEf), and every byte.
constexpr int32_t kAb = kFirstSyntheticPiece;
constexpr int32_t kCd = kFirstSyntheticPiece + 1;
constexpr int32_t kEf = kFirstSyntheticPiece + 2;
const std::string kFffd = "\xEF\xBF\xBD";

text::Tokenizer MakeTokenizer() {
  absl::StatusOr<text::Tokenizer> tokenizer =
      text::Tokenizer::Create(MakeSyntheticVocab({{"ab", -1}, {"cd", -1}, {"ef", -1}}));
  EXPECT_OK(tokenizer);
  return *std::move(tokenizer);
}

Event End(FinishReason reason, int32_t completion_tokens) {
  Event e;
  e.kind = Event::Kind::kFinished;
  e.reason = reason;
  e.prompt_tokens = 4;
  e.completion_tokens = completion_tokens;
  return e;
}

TokenLogprob Logprob(float logprob) {
  TokenLogprob lp;
  lp.logprob = logprob;
  return lp;
}

// The text of a delta's events.
std::string Text(const CompletionDelta& d) {
  std::string text;
  for (const OutputEvent& e : d.events) {
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        text += e.text;
        break;
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kToolCallStart:
      case OutputEvent::Kind::kToolCallArguments:
      case OutputEvent::Kind::kToolCallInvalid:
        break;
    }
  }
  return text;
}

// The bytes of `text` as the synthetic vocabulary's byte tokens.
std::vector<int32_t> Bytes(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(SyntheticByteId(static_cast<uint8_t>(c)));
  return ids;
}

// Upper-cases the text and closes with "!": stands in for the reasoning and tool-call parser.
class ShoutingPostProcessor final : public TextPostProcessor {
 public:
  void Push(std::string_view text, std::vector<OutputEvent>* events) override {
    std::string upper(text);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    AppendText(upper, events);
  }
  void Finish(std::vector<OutputEvent>* events) override { AppendText("!", events); }
};

class OutputProcessorTest : public ::testing::Test {
 protected:
  OutputProcessorTest() : tokenizer_(MakeTokenizer()) {}

  void Make(int n, std::vector<std::string> stops, bool shout = false) {
    OutputProcessor::Options options{
        .n = n,
        .stops = std::move(stops),
        .on_stop_match = [this](int index) { stopped_.push_back(index); },
        .post_processor = nullptr,
        .rendered_tokens = {},
    };
    if (shout) {
      options.post_processor = [](int) { return std::make_unique<ShoutingPostProcessor>(); };
    }
    output_ = std::make_unique<OutputProcessor>(tokenizer_, std::move(options), &mu_);
  }

  // The engine's side.
  void Tokens(int index, const std::vector<int32_t>& tokens,
              const std::vector<TokenLogprob>& logprobs = {}) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      output_->AddToken(index, tokens[i], logprobs.empty() ? nullptr : &logprobs[i]);
    }
  }
  void Finished(int index, Event event) {
    absl::MutexLock lock(&mu_);
    output_->AddEnd(index, std::move(event));
  }

  // The writer's: takes completion `index`'s news and processes it.
  CompletionDelta Write(int index) {
    {
      absl::MutexLock lock(&mu_);
      output_->Take(index);
    }
    CompletionDelta d;
    EXPECT_TRUE(output_->Process(index, &d));
    return d;
  }

  const text::Tokenizer tokenizer_;
  absl::Mutex mu_;
  std::unique_ptr<OutputProcessor> output_;
  std::vector<int> stopped_;  // on_stop_match's calls
};

TEST_F(OutputProcessorTest, StopStringAcrossTokensEndsTheCompletion) {
  Make(1, {"bc"});
  Tokens(0, {kAb, kCd, kEf});
  CompletionDelta d = Write(0);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{kAb, kCd})) << "the matching token is sent, no more";
  EXPECT_EQ(Text(d), "a") << "the match and what follows are never sent";
  EXPECT_FALSE(d.end);
  EXPECT_EQ(stopped_, std::vector<int>{0}) << "the engine is told to finish the completion";

  Tokens(0, {kEf});  // generated before the engine learned of the match
  d = Write(0);
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_TRUE(d.events.empty());

  Finished(0, End(FinishReason::kCancelled, 4));
  d = Write(0);
  ASSERT_TRUE(d.end);
  EXPECT_EQ(d.end->event.reason, FinishReason::kStopString);
  EXPECT_EQ(d.end->event.completion_tokens, 2) << "the tokens sent";
  EXPECT_EQ(d.end->matched_stop, "bc");
  EXPECT_TRUE(d.events.empty());
  EXPECT_EQ(stopped_, std::vector<int>{0}) << "once";
  EXPECT_OK(output_->failure()) << "the stop string's end, not the engine's";
}

TEST_F(OutputProcessorTest, MatchWinsOverTheEndInTheSameDelta) {
  Make(1, {"cde"});
  Tokens(0, {kAb, kCd, kEf, kAb});
  Finished(0, End(FinishReason::kLength, 4));
  CompletionDelta d = Write(0);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{kAb, kCd, kEf}));
  EXPECT_EQ(Text(d), "ab");
  ASSERT_TRUE(d.end);
  EXPECT_EQ(d.end->event.reason, FinishReason::kStopString);
  EXPECT_EQ(d.end->event.completion_tokens, 3);
  EXPECT_EQ(d.end->matched_stop, "cde");
}

TEST_F(OutputProcessorTest, HeldTextThatNeverMatchedGoesOutAtTheEnd) {
  Make(1, {"dx"});
  Tokens(0, {kAb, kCd});
  CompletionDelta d = Write(0);
  EXPECT_EQ(Text(d), "abc") << "d could start the stop";
  Finished(0, End(FinishReason::kEos, 2));
  d = Write(0);
  EXPECT_EQ(Text(d), "d");
  ASSERT_TRUE(d.end);
  EXPECT_EQ(d.end->event.reason, FinishReason::kEos);
  EXPECT_EQ(d.end->event.completion_tokens, 2);
  EXPECT_EQ(d.end->matched_stop, "");
  EXPECT_TRUE(stopped_.empty());
}

TEST_F(OutputProcessorTest, MultiByteCharacterSplitAcrossTokens) {
  Make(1, {});
  Tokens(0, {kAb, SyntheticByteId(0xC3)});
  CompletionDelta d = Write(0);
  EXPECT_EQ(d.tokens.size(), 2u);
  EXPECT_EQ(Text(d), "ab") << "half a character is held";
  Tokens(0, {SyntheticByteId(0xA9)});
  d = Write(0);
  EXPECT_EQ(d.tokens.size(), 1u) << "a token with no text of its own is still sent";
  EXPECT_EQ(Text(d), "\xC3\xA9");
}

TEST_F(OutputProcessorTest, StopStringMatchesACharacterSplitAcrossTokens) {
  Make(1, {"\xC3\xA9"});
  Tokens(0, {kAb, SyntheticByteId(0xC3)});
  EXPECT_EQ(Text(Write(0)), "ab");
  EXPECT_TRUE(stopped_.empty());
  Tokens(0, {SyntheticByteId(0xA9), kCd});
  CompletionDelta d = Write(0);
  EXPECT_EQ(d.tokens, std::vector<int32_t>{SyntheticByteId(0xA9)});
  EXPECT_EQ(Text(d), "");
  EXPECT_EQ(stopped_, std::vector<int>{0});
}

TEST_F(OutputProcessorTest, HeldTextAndTrailingBytesKeepTheirOrderAtTheEnd) {
  Make(1, {"bq"});
  Tokens(0, {kAb, SyntheticByteId(0xC3)});  // "b" could start the stop; 0xC3 starts a character
  EXPECT_EQ(Text(Write(0)), "a");
  Finished(0, End(FinishReason::kLength, 2));
  EXPECT_EQ(Text(Write(0)), "b" + kFffd);
}

TEST_F(OutputProcessorTest, LogprobsAreDroppedWithTheTokensAfterAMatch) {
  Make(1, {"bc"});
  Tokens(0, {kAb, kCd, kEf}, {Logprob(-1), Logprob(-2), Logprob(-3)});
  CompletionDelta d = Write(0);
  EXPECT_EQ(d.logprobs, (std::vector<TokenLogprob>{Logprob(-1), Logprob(-2)}));
  Tokens(0, {kAb}, {Logprob(-4)});
  d = Write(0);
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_TRUE(d.logprobs.empty());
}

TEST_F(OutputProcessorTest, LogprobsGoWithTheirTokensOrNotAtAll) {
  Make(1, {});
  Tokens(0, {kAb, kCd}, {Logprob(-1), Logprob(-2)});
  EXPECT_EQ(Write(0).logprobs, (std::vector<TokenLogprob>{Logprob(-1), Logprob(-2)}));
  Tokens(0, {kAb, kCd});
  EXPECT_TRUE(Write(0).logprobs.empty()) << "not asked for";
}

TEST_F(OutputProcessorTest, CompletionsWithNewsTakeTurns) {
  Make(3, {});
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(output_->NextWithNews(), -1);
  output_->AddToken(0, kAb, nullptr);
  output_->AddToken(2, kAb, nullptr);
  ASSERT_EQ(output_->NextWithNews(), 0);
  output_->Take(0);
  output_->AddToken(0, kCd, nullptr);  // 0 has news again, but 2 has waited longer
  EXPECT_TRUE(output_->HasNews(0));
  ASSERT_EQ(output_->NextWithNews(), 2);
  output_->Take(2);
  ASSERT_EQ(output_->NextWithNews(), 0);
  output_->Take(0);
  EXPECT_EQ(output_->NextWithNews(), -1);
  output_->AddEnd(1, End(FinishReason::kEos, 0));
  EXPECT_EQ(output_->NextWithNews(), 1) << "an end is news";
  EXPECT_EQ(output_->ends_arrived(), 1);
}

TEST_F(OutputProcessorTest, ProcessWithoutTakeHasNothing) {
  Make(2, {});
  Tokens(1, {kAb});
  CompletionDelta d;
  EXPECT_FALSE(output_->Process(1, &d)) << "still buffered on the engine's side";
  EXPECT_EQ(Text(Write(1)), "ab");
  EXPECT_FALSE(output_->Process(1, &d)) << "already handed out";
}

TEST_F(OutputProcessorTest, EndBookkeepingOfNCompletions) {
  Make(3, {"bc"});
  Event first = End(FinishReason::kEos, 3);
  first.preemptions = 1;
  first.timings.finished = 5;
  Event second = End(FinishReason::kError, 2);
  second.message = "worker lost";
  second.timings.finished = 7;
  Event third = End(FinishReason::kCancelled, 9);  // after its stop string matched
  third.message = "not a failure: the stop string ended it";
  third.preemptions = 2;
  third.timings.finished = 6;
  Finished(0, first);
  Finished(1, second);
  Tokens(2, {kAb, kCd});
  Finished(2, third);
  Write(0);
  EXPECT_FALSE(output_->all_ended());
  Write(1);
  Write(2);
  EXPECT_TRUE(output_->all_ended());
  EXPECT_EQ(output_->ended(), 3);
  EXPECT_EQ(output_->failure(), absl::InternalError("worker lost")) << "the first failure";
  EXPECT_EQ(output_->end(2).event.reason, FinishReason::kStopString);
  const Event merged = output_->MergedEnd();
  EXPECT_EQ(merged.reason, FinishReason::kEos) << "completion 0's";
  EXPECT_EQ(merged.prompt_tokens, 4);
  EXPECT_EQ(merged.completion_tokens, 3 + 2 + 2);
  EXPECT_EQ(merged.preemptions, 3);
  EXPECT_EQ(merged.timings.finished, 7);
}

TEST_F(OutputProcessorTest, PostProcessorSitsBetweenStopsAndEvents) {
  Make(1, {"cd"}, /*shout=*/true);
  Tokens(0, {kAb});
  EXPECT_EQ(Text(Write(0)), "AB");
  Tokens(0, {kCd, kEf});
  Finished(0, End(FinishReason::kLength, 3));
  CompletionDelta d = Write(0);
  EXPECT_EQ(Text(d), "!") << "the stop matched the model's text; the end flushes the parser";
  ASSERT_TRUE(d.end);
  EXPECT_EQ(d.end->matched_stop, "cd");
  ASSERT_EQ(d.events.size(), 1u);
}

TEST(AppendTextTest, OneTextEventPerRun) {
  std::vector<OutputEvent> events;
  AppendText("", &events);
  EXPECT_TRUE(events.empty());
  AppendText("a", &events);
  AppendText("b", &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "ab");
}

// The parser as the post-processor: reasoning, a hermes call's start and its arguments, in
// order; the final delta releases what the parser held.
TEST_F(OutputProcessorTest, ParserPostProcessorSplitsReasoningAndToolCalls) {
  text::OutputParser::Options parsing{.reasoning = true,
                                      .starts_in_reasoning = false,
                                      .format = text::ToolCallFormat::kHermes,
                                      .tools_given = true,
                                      .id_seed = 5};
  OutputProcessor::Options options{
      .n = 1,
      .stops = {},
      .on_stop_match = [](int) {},
      .post_processor = [parsing](int) { return MakeParserPostProcessor(parsing); },
      .rendered_tokens = {},
  };
  output_ = std::make_unique<OutputProcessor>(tokenizer_, std::move(options), &mu_);
  const std::string output =
      "<think>hmm</think>Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
      "</tool_call>";
  std::vector<OutputEvent> events;
  for (int32_t id : Bytes(output)) {  // one token at a time
    Tokens(0, {id});
    CompletionDelta d = Write(0);
    for (OutputEvent& e : d.events) events.push_back(std::move(e));
  }
  Finished(0, End(FinishReason::kEos, static_cast<int32_t>(output.size())));
  CompletionDelta d = Write(0);
  for (OutputEvent& e : d.events) events.push_back(std::move(e));
  ASSERT_TRUE(d.end);
  std::string reasoning, content, arguments;
  int starts = 0;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kText:
        content += e.text;
        break;
      case OutputEvent::Kind::kReasoning:
        reasoning += e.text;
        break;
      case OutputEvent::Kind::kToolCallStart:
        ++starts;
        EXPECT_EQ(e.index, 0);
        EXPECT_EQ(e.name, "f");
        EXPECT_EQ(e.id, text::MakeToolCallId(text::ToolCallFormat::kHermes, 5, 0));
        EXPECT_TRUE(arguments.empty()) << "the start comes before the arguments";
        break;
      case OutputEvent::Kind::kToolCallArguments:
        EXPECT_EQ(e.index, 0);
        arguments += e.text;
        break;
      case OutputEvent::Kind::kToolCallInvalid:
        ADD_FAILURE() << "the call is valid";
        break;
    }
  }
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(content, "Sure.") << "no markup in the content";
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(arguments, "{\"a\": 1}");
}

// A control token listed in rendered_tokens reaches the text as its marker; others stay silent.
TEST_F(OutputProcessorTest, RenderedTokensBecomeText) {
  OutputProcessor::Options options{
      .n = 1,
      .stops = {},
      .on_stop_match = [](int) {},
      .post_processor = nullptr,
      .rendered_tokens = {{kCd, "[TOOL_CALLS]"}},
  };
  output_ = std::make_unique<OutputProcessor>(tokenizer_, std::move(options), &mu_);
  Tokens(0, {kAb, kCd, kEf});
  EXPECT_EQ(Text(Write(0)), "ab[TOOL_CALLS]ef");
}

}  // namespace
}  // namespace pagoda::scheduler
