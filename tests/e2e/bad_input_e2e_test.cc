// End-to-end bad input: every malformed request gets INVALID_ARGUMENT with a message naming the
// field and the limit, while a well-formed stream running beside them completes with exactly
// the tokens it gets alone, and the server serves normally afterwards.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kMaxRequestBytes = 65536;

// Sends `bytes` as the serialized request of Generate, through a generic stub (so they need not
// be a valid message), and reads the stream to its end.
grpc::Status GenerateRawBytes(const std::string& address, const std::string& bytes) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto call = stub.PrepareCall(&ctx, "/pagoda.v1.Generation/Generate", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  for (grpc::ByteBuffer response;;) {
    call->Read(&response, reinterpret_cast<void*>(3));
    if (!cq.Next(&tag, &ok) || !ok) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  return status;
}

class BadInputTest : public TrainedModelTest {
 protected:
  // INVALID_ARGUMENT whose message contains every one of `parts`.
  void ExpectInvalid(const grpc::Status& status, const std::vector<std::string>& parts) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    for (const std::string& part : parts) {
      EXPECT_NE(status.error_message().find(part), std::string::npos)
          << "\"" << part << "\" not in: " << status.error_message();
    }
  }

  void ExpectGenerateInvalid(const v1::GenerateRequest& r, const std::vector<std::string>& parts) {
    const Generation g = cluster_->Generate(r, absl::Seconds(30));
    EXPECT_TRUE(g.tokens.empty());
    ExpectInvalid(g.status, parts);
  }
};

TEST_F(BadInputTest, EachGetsInvalidArgumentWhileOthersAreServed) {
  // The test sends ill-formed UTF-8 on purpose; protobuf would log each one it serializes.
  google::protobuf::SetLogHandler(nullptr);
  ASSERT_NO_FATAL_FAILURE(
      StartCluster({"--max-request-bytes", std::to_string(kMaxRequestBytes)}, {"--threads", "1"}));
  v1::GenerateRequest good = TextRequest("Once upon a time", 400);
  good.set_ignore_eos(true);
  const Generation solo = cluster_->Generate(good);
  ASSERT_OK(solo.status);
  ASSERT_EQ(solo.tokens.size(), 400u);

  // The same request, again and again until the bad ones are done, so that one is always
  // streaming beside them; each must equal the solo run.
  absl::Notification streaming, bad_done;
  std::vector<Generation> beside;
  std::thread runner([&] {
    while (!bad_done.HasBeenNotified()) {
      Generation g;
      grpc::ClientContext ctx;
      auto reader = cluster_->stub().Generate(&ctx, good);
      for (v1::GenerateResponse resp; reader->Read(&resp);) {
        g.tokens.insert(g.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
        if (!streaming.HasBeenNotified()) streaming.Notify();
      }
      g.status = reader->Finish();
      beside.push_back(std::move(g));
    }
  });
  if (!streaming.WaitForNotificationWithTimeout(absl::Seconds(30))) {
    bad_done.Notify();
    runner.join();
    FAIL() << "the well-formed stream did not start\n" << cluster_->Logs();
  }

  // Ill-formed UTF-8: in the prompt, in a stop string; Tokenize too.
  ExpectGenerateInvalid(TextRequest("Once \xff\xfe upon", 8),
                        {"field text is not valid UTF-8", "byte 0xff at offset 5"});
  ExpectGenerateInvalid(TextRequest("Once \xe2\x82 upon", 8), {"field text", "offset 5"});
  v1::GenerateRequest r = TextRequest("Once upon a time", 8);
  r.add_stop("ok");
  r.add_stop("bad\xc0");
  ExpectGenerateInvalid(r, {"field stop[1] is not valid UTF-8", "offset 3"});
  {
    v1::TokenizeRequest t;
    t.set_text("\x80");
    v1::TokenizeResponse out;
    grpc::ClientContext ctx;
    ExpectInvalid(cluster_->stub().Tokenize(&ctx, t, &out), {"field text is not valid UTF-8"});
  }

  // Huge max_tokens.
  ExpectGenerateInvalid(TextRequest("Once upon a time", std::numeric_limits<uint32_t>::max()),
                        {"max_tokens (4294967295)", "model context of 512 tokens"});

  // Negative or NaN sampling parameters.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    float temperature, top_p;
    int32_t top_k;
    std::string message;
  } sampling[] = {
      {-0.5f, 1, 0, "temperature must be in [0, 100], got -0.5"},
      {nan, 1, 0, "temperature must be in [0, 100], got nan"},
      {0.7f, -0.1f, 0, "top_p must be in [0, 1], got -0.1"},
      {0.7f, nan, 0, "top_p must be in [0, 1], got nan"},
      {0.7f, 1, -5, "top_k must be >= 0, got -5"},
  };
  for (const auto& s : sampling) {
    r = TextRequest("Once upon a time", 8);
    r.mutable_sampling()->set_temperature(s.temperature);
    r.mutable_sampling()->set_top_p(s.top_p);
    r.mutable_sampling()->set_top_k(s.top_k);
    ExpectGenerateInvalid(r, {s.message});
  }

  // Unknown token ids, in the prompt and among the stop ids.
  r = v1::GenerateRequest();
  r.set_max_tokens(8);
  for (int32_t id : {1, 403, 512}) r.mutable_token_ids()->add_ids(id);
  ExpectGenerateInvalid(r, {"prompt token id 512 at index 2", "vocabulary [0, 512)"});
  r.mutable_token_ids()->set_ids(2, -7);
  ExpectGenerateInvalid(r, {"prompt token id -7 at index 2"});
  r = TextRequest("Once upon a time", 8);
  r.add_stop_token_ids(100000);
  ExpectGenerateInvalid(r, {"stop token id 100000", "vocabulary [0, 512)"});

  // Oversized: a request over --max-request-bytes; a text under it that cannot fit the context
  // (refused before tokenization); a token-id prompt longer than the context.
  ExpectGenerateInvalid(TextRequest(std::string(kMaxRequestBytes + 1000, 'a'), 8),
                        {"the limit is 65536 bytes (--max-request-bytes)"});
  ExpectGenerateInvalid(TextRequest(std::string(40000, 'a'), 8),
                        {"the prompt text has 40000 bytes", "context of 512 tokens holds at most"});
  r = v1::GenerateRequest();
  for (int i = 0; i < 600; ++i) r.mutable_token_ids()->add_ids(1);
  ExpectGenerateInvalid(r, {"the prompt has 600 tokens; the model context is 512 tokens"});

  // Bytes that are no GenerateRequest at all (gRPC alone would answer INTERNAL).
  ExpectInvalid(GenerateRawBytes(cluster_->address(), std::string("\x0a\xff\xff\xff\x0f", 5)),
                {"is not a valid serialized pagoda.v1.GenerateRequest"});
  // Beyond gRPC's own receive limit (twice --max-request-bytes, at least 4 MiB) gRPC refuses
  // before the service sees the request.
  const Generation huge = cluster_->Generate(TextRequest(std::string(5 << 20, 'a'), 8));
  EXPECT_EQ(huge.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << huge.status.error_message();

  bad_done.Notify();
  runner.join();
  for (const Generation& g : beside) {
    ASSERT_OK(g.status);
    EXPECT_EQ(g.tokens, solo.tokens);
  }
  const Generation after = cluster_->Generate(good);
  ASSERT_OK(after.status);
  EXPECT_EQ(after.tokens, solo.tokens);
  EXPECT_TRUE(cluster_->WaitIdleAndFree(absl::Seconds(10))) << cluster_->Status().DebugString();
  EXPECT_TRUE(cluster_->scheduler().Running());
}

}  // namespace
}  // namespace pagoda::testing
