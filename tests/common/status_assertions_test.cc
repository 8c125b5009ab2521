// EXPECT_OK / ASSERT_OK / ASSERT_OK_AND_ASSIGN (tests/support/status_assertions.h): a failure
// names the expression, the status's code and message, and any streamed context; the argument is
// evaluated once.
#include "tests/support/status_assertions.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pagoda::testing {
namespace {

// grpc::Status's shape without gRPC: the macros find it by its members.
struct FakeGrpcStatus {
  enum class Code { kOk = 0, kResourceExhausted = 8 };
  Code code = Code::kOk;
  std::string message;
  bool ok() const { return code == Code::kOk; }
  Code error_code() const { return code; }
  std::string error_message() const { return message; }
};

absl::Status Invalid() { return absl::InvalidArgumentError("top_k is -1, the limit is 0"); }
absl::StatusOr<int> NotFound() { return absl::NotFoundError("no model named llama"); }

TEST(StatusAssertionsTest, PassOnOk) {
  EXPECT_OK(absl::OkStatus());
  ASSERT_OK(absl::OkStatus()) << "never printed";
  absl::StatusOr<int> value = 3;
  EXPECT_OK(value);
  EXPECT_OK(FakeGrpcStatus{});
}

TEST(StatusAssertionsTest, ExpectOkPrintsCodeAndMessageOfStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Invalid()), "INVALID_ARGUMENT: top_k is -1, the limit is 0");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Invalid()), "Value of: Invalid()");
}

TEST(StatusAssertionsTest, ExpectOkPrintsTheStatusOfStatusOr) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NotFound()), "NOT_FOUND: no model named llama");
}

TEST(StatusAssertionsTest, ExpectOkPrintsGrpcShapedStatus) {
  const FakeGrpcStatus exhausted{FakeGrpcStatus::Code::kResourceExhausted, "queue is full (64)"};
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(exhausted), "RESOURCE_EXHAUSTED (gRPC 8): queue is full (64)");
}

TEST(StatusAssertionsTest, StreamedContextFollowsTheStatus) {
  const int request = 7;
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Invalid()) << "request " << request,
                          "top_k is -1, the limit is 0\nrequest 7");
}

TEST(StatusAssertionsTest, AssertOkIsFatal) {
  EXPECT_FATAL_FAILURE(ASSERT_OK(Invalid()) << "while adding", "INVALID_ARGUMENT: top_k is -1");
  EXPECT_FATAL_FAILURE(ASSERT_OK(NotFound()), "NOT_FOUND: no model named llama");
}

TEST(StatusAssertionsTest, EvaluatesItsArgumentOnce) {
  int calls = 0;
  const auto counted = [&calls] {
    ++calls;
    return absl::OkStatus();
  };
  EXPECT_OK(counted());
  ASSERT_OK(counted());
  EXPECT_EQ(calls, 2);
}

void AssignFromNotFound() {
  ASSERT_OK_AND_ASSIGN(const int value, NotFound());
  ADD_FAILURE() << "reached with " << value;
}

TEST(StatusAssertionsTest, AssertOkAndAssign) {
  ASSERT_OK_AND_ASSIGN(auto owned, absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(5)));
  EXPECT_EQ(*owned, 5);
  int assigned = 0;
  ASSERT_OK_AND_ASSIGN(assigned, absl::StatusOr<int>(9));
  EXPECT_EQ(assigned, 9);
  EXPECT_FATAL_FAILURE(AssignFromNotFound(),
                       "Value of: NotFound()\nExpected: OK\n  Actual: "
                       "NOT_FOUND: no model named llama");
}

}  // namespace
}  // namespace pagoda::testing
