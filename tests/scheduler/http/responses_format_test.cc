// ResponsesFormat: the Responses API's events and response object from the output path's
// events, streamed and whole, without an engine or a network.
#include "scheduler/http/responses_format.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/scheduler/text/test_vocabs.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

OutputEvent Text(OutputEvent::Kind kind, std::string text, int32_t index = -1) {
  OutputEvent e;
  e.kind = kind;
  e.text = std::move(text);
  e.index = index;
  return e;
}

OutputEvent CallStart(int32_t index, std::string id, std::string name) {
  OutputEvent e;
  e.kind = OutputEvent::Kind::kToolCallStart;
  e.index = index;
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}

// The events of a stream: each "event: T\ndata: {...}\n\n" as its parsed data.
std::vector<json> Events(const std::string& stream) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = stream.find("event: ", pos)) != std::string::npos) {
    const size_t type_end = stream.find('\n', pos);
    const std::string type = stream.substr(pos + 7, type_end - pos - 7);
    const size_t data = stream.find("data: ", type_end);
    const size_t end = stream.find("\n\n", data);
    json event = json::parse(stream.substr(data + 6, end - data - 6));
    EXPECT_EQ(event["type"], type);
    out.push_back(std::move(event));
    pos = end;
  }
  return out;
}

class ResponsesFormatTest : public ::testing::Test {
 protected:
  ResponsesFormatTest()
      : tokenizer_(*text::Tokenizer::Create(::pagoda::testing::MakeSyntheticVocab({}))) {}

  std::unique_ptr<ResponsesFormat> Make(bool stream) {
    ResponsesFormat::Options options{
        .echo = {{"instructions", nullptr}, {"store", true}},
        .model = "m",
        .id_tag = "tag",
        .stream = stream,
        .keep_alive = true,
        .on_final = [this](const json& response) { stored_.push_back(response); }};
    return std::make_unique<ResponsesFormat>(std::move(options));
  }

  // An output processor of one completion that ended with `reason`, for Closing.
  std::unique_ptr<OutputProcessor> Ended(FinishReason reason) {
    OutputProcessor::Options options{.n = 1,
                                     .stops = {},
                                     .on_stop_match = [](int) {},
                                     .post_processor = nullptr,
                                     .rendered_tokens = {}};
    auto output = std::make_unique<OutputProcessor>(tokenizer_, std::move(options), &mu_);
    Event end;
    end.kind = Event::Kind::kFinished;
    end.reason = reason;
    end.prompt_tokens = 40;
    end.cached_tokens = 32;
    end.completion_tokens = 9;
    {
      absl::MutexLock lock(&mu_);
      output->AddEnd(0, end);
      output->Take(0);
    }
    CompletionDelta d;
    EXPECT_TRUE(output->Process(0, &d));
    return output;
  }

  // Reasoning, text, then two calls (the second malformed), ending with `reason`.
  std::vector<CompletionDelta> Deltas(FinishReason reason) {
    std::vector<CompletionDelta> deltas(4);
    deltas[0].tokens = {1, 2};
    deltas[0].events = {Text(OutputEvent::Kind::kReasoning, "hmm")};
    deltas[1].tokens = {3, 4};
    deltas[1].events = {Text(OutputEvent::Kind::kReasoning, "."),
                        Text(OutputEvent::Kind::kText, "Hello")};
    deltas[2].tokens = {5, 6, 7};
    deltas[2].events = {Text(OutputEvent::Kind::kText, " you"), CallStart(0, "call_a", "get"),
                        Text(OutputEvent::Kind::kToolCallArguments, "{\"x\":", 0),
                        Text(OutputEvent::Kind::kToolCallArguments, "1}", 0)};
    deltas[3].tokens = {8, 9};
    deltas[3].events = {CallStart(1, "call_b", "put"),
                        Text(OutputEvent::Kind::kToolCallInvalid, "", 1),
                        Text(OutputEvent::Kind::kText, "<bad>")};
    deltas[3].end = CompletionEnd{.event = Event{}, .matched_stop = ""};
    deltas[3].end->event.reason = reason;
    return deltas;
  }

  const text::Tokenizer tokenizer_;
  absl::Mutex mu_;
  std::vector<json> stored_;
};

TEST_F(ResponsesFormatTest, StreamSendsTypedEventsInOrderWithSequenceNumbers) {
  std::unique_ptr<ResponsesFormat> format = Make(/*stream=*/true);
  std::string stream = format->Begin(0x2a, 1);
  EXPECT_EQ(format->id(), "resp_tag0000002a");
  for (const CompletionDelta& d : Deltas(FinishReason::kEos)) format->Consume(0, d, &stream);
  std::unique_ptr<OutputProcessor> output = Ended(FinishReason::kEos);
  stream += format->Closing(*output);
  EXPECT_EQ(stream.find("[DONE]"), std::string::npos);
  std::vector<json> events = Events(stream);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    types.push_back(events[i]["type"]);
  }
  const std::vector<std::string> expected = {
      "response.created",
      "response.in_progress",
      "response.output_item.added",  // reasoning
      "response.reasoning_text.delta",
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.output_item.done",
      "response.output_item.added",  // message
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",  // call a
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",  // call b, found malformed
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",  // its text, as a message
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
  };
  EXPECT_EQ(types, expected);
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[0]["response"]["output"], json::array());
  EXPECT_EQ(events[11]["text"], "Hello you");
  EXPECT_EQ(events[17]["arguments"], "{\"x\":1}");
  EXPECT_EQ(events[17]["item_id"], "fc_tag0000002a_2");
  EXPECT_EQ(events[21]["item"]["status"], "incomplete") << "announced, then found malformed";
  const json& response = events.back()["response"];
  EXPECT_EQ(response["status"], "completed");
  EXPECT_EQ(response["id"], "resp_tag0000002a");
  ASSERT_EQ(response["output"].size(), 5u);
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "hmm.");
  EXPECT_EQ(response["output"][1]["content"][0]["text"], "Hello you");
  EXPECT_EQ(response["output"][2]["call_id"], "call_a");
  EXPECT_EQ(response["output"][2]["status"], "completed");
  EXPECT_EQ(response["usage"], json::parse(R"({"input_tokens": 40,
      "input_tokens_details": {"cached_tokens": 32}, "output_tokens": 9,
      "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 49})"));
  ASSERT_EQ(stored_.size(), 1u);
  EXPECT_EQ(stored_[0], response) << "what is stored is what the client got";
}

TEST_F(ResponsesFormatTest, WholeAnswerLeavesMalformedCallsOutAndMarksTheLengthLimit) {
  std::unique_ptr<ResponsesFormat> format = Make(/*stream=*/false);
  std::string out = format->Begin(7, 1);
  EXPECT_EQ(out, "");
  for (const CompletionDelta& d : Deltas(FinishReason::kLength)) format->Consume(0, d, &out);
  EXPECT_EQ(out, "");
  std::unique_ptr<OutputProcessor> output = Ended(FinishReason::kLength);
  const std::string answer = format->Closing(*output);
  ASSERT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  const json response = json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(response["output"].size(), 4u);
  EXPECT_EQ(response["output"][3]["content"][0]["text"], "<bad>");
  EXPECT_EQ(response["output"][3]["status"], "incomplete") << "the item the limit cut";
  EXPECT_EQ(response["output"][1]["status"], "completed");
  EXPECT_EQ(response["model"], "m");
  EXPECT_EQ(response["store"], true);
  ASSERT_EQ(stored_.size(), 1u);
}

TEST_F(ResponsesFormatTest, AStreamCutShortEndsWithResponseFailed) {
  std::unique_ptr<ResponsesFormat> format = Make(/*stream=*/true);
  std::string stream = format->Begin(1, 1);
  CompletionDelta d;
  d.tokens = {1};
  d.events = {Text(OutputEvent::Kind::kText, "Hi")};
  format->Consume(0, d, &stream);
  stream += format->StreamFailure(absl::UnavailableError("the server is draining"));
  std::vector<json> events = Events(stream);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[events.size() - 2]["type"], "response.output_item.done");
  const json& failed = events.back();
  EXPECT_EQ(failed["type"], "response.failed");
  EXPECT_EQ(failed["response"]["status"], "failed");
  EXPECT_EQ(failed["response"]["error"]["message"], "the server is draining");
  EXPECT_TRUE(stored_.empty()) << "failed responses are not stored";
}

}  // namespace
}  // namespace pagoda::scheduler::http
