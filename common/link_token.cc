#include "common/link_token.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pagoda::common {

absl::StatusOr<std::string> ReadLinkTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the link token file ", path));
  std::ostringstream content;
  content << in.rdbuf();
  std::string token = content.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the link token file ", path, " is empty"));
  }
  return token;
}

bool LinkTokensEqual(std::string_view a, std::string_view b) {
  // Every byte of the longer string is looked at whatever the first difference.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace pagoda::common
