// DecodeRequest: sizes, ill-formed UTF-8 and unparsable bytes become INVALID_ARGUMENT naming
// the limit or the field; valid requests parse.
#include "scheduler/service/request_decoder.h"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include "pagoda/v1/generation.pb.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = pagoda::v1;

// Serialized `r`; protobuf serializes ill-formed UTF-8 as it is (and would log it).
std::string Bytes(const v1::GenerateRequest& r) {
  google::protobuf::SetLogHandler(nullptr);
  return r.SerializeAsString();
}

void ExpectInvalid(const std::string& bytes, size_t max, const std::string& message) {
  v1::GenerateRequest out;
  const absl::Status s = DecodeRequest(bytes, max, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(message), std::string::npos) << s;
}

TEST(RequestDecoderTest, ParsesValidRequests) {
  v1::GenerateRequest r;
  r.set_text("Once upon a time, ünïcödé");
  r.set_max_tokens(7);
  r.add_stop("end");
  v1::GenerateRequest out;
  ASSERT_OK(DecodeRequest(Bytes(r), 1 << 20, &out));
  EXPECT_EQ(out.text(), r.text());
  EXPECT_EQ(out.max_tokens(), 7u);
  EXPECT_EQ(out.stop(0), "end");
  EXPECT_OK(DecodeRequest("", 16, &out)) << "the empty message is a valid message";
}

TEST(RequestDecoderTest, OversizedRequestsNameTheLimit) {
  v1::GenerateRequest r;
  r.set_text(std::string(5000, 'a'));
  const std::string bytes = Bytes(r);
  ExpectInvalid(bytes, 4096,
                "the request is " + std::to_string(bytes.size()) +
                    " bytes; the limit is 4096 bytes (--max-request-bytes)");
  EXPECT_OK(CheckRequestSize(4096, 4096));
  EXPECT_FALSE(CheckRequestSize(4097, 4096).ok());
}

TEST(RequestDecoderTest, IllFormedUtf8NamesTheFieldAndTheByte) {
  v1::GenerateRequest r;
  r.set_text("ab\xff");
  ExpectInvalid(Bytes(r), 1 << 20,
                "field text is not valid UTF-8: ill-formed byte 0xff at offset 2");
  r.set_text("fine");
  r.add_stop("ok");
  r.add_stop("x\xed\xa0\x80");  // an encoded surrogate
  ExpectInvalid(Bytes(r), 1 << 20,
                "field stop[1] is not valid UTF-8: ill-formed byte 0xed at offset 1");
  r.clear_stop();
  r.set_request_id("\xc3");  // truncated character
  ExpectInvalid(Bytes(r), 1 << 20, "field request_id");
  // The tenant too is checked here first; its name rule is Validate's (tenants.h).
  v1::GenerateRequest t;
  t.set_tenant("team\xff");
  ExpectInvalid(Bytes(t), 1 << 20,
                "field tenant is not valid UTF-8: ill-formed byte 0xff at offset 4");

  const std::optional<IllFormedUtf8Field> found =
      FindIllFormedUtf8Field(Bytes(r), v1::GenerateRequest::descriptor());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->path, "request_id");
  EXPECT_EQ(found->offset, 0u);
  EXPECT_EQ(found->byte, 0xc3);
}

TEST(RequestDecoderTest, GarbageIsNoValidMessage) {
  ExpectInvalid(std::string("\x0a\xff\xff\xff\x0f", 5), 1 << 20,
                "the request (5 bytes) is not a valid serialized pagoda.v1.GenerateRequest");
  ExpectInvalid(std::string("\x12\x05\x08", 3), 1 << 20, "not a valid serialized");  // truncated
  ExpectInvalid(std::string("\x07", 1), 1 << 20, "not a valid serialized");          // field 0
}

}  // namespace
}  // namespace pagoda::scheduler
