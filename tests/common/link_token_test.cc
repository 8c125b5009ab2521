#include "common/link_token.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/status_assertions.h"

namespace pagoda::common {
namespace {

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(LinkTokenTest, ReadsTheFileWithoutTrailingWhitespace) {
  absl::StatusOr<std::string> t = ReadLinkTokenFile(WriteFile("token", "s3cret value\n\n"));
  ASSERT_OK(t);
  EXPECT_EQ(*t, "s3cret value");
}

TEST(LinkTokenTest, MissingOrEmptyFilesAreErrorsNamingTheFile) {
  absl::StatusOr<std::string> t = ReadLinkTokenFile("/nonexistent/token");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("/nonexistent/token"), std::string::npos);
  t = ReadLinkTokenFile(WriteFile("empty", " \n"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("is empty"), std::string::npos);
}

TEST(LinkTokenTest, ComparesWholeStrings) {
  EXPECT_TRUE(LinkTokensEqual("abc", "abc"));
  EXPECT_FALSE(LinkTokensEqual("abc", "abd"));
  EXPECT_FALSE(LinkTokensEqual("abc", "abcd"));
  EXPECT_FALSE(LinkTokensEqual("", "a"));
  EXPECT_FALSE(LinkTokensEqual(std::string("a\0b", 3), "a"));
}

}  // namespace
}  // namespace pagoda::common
