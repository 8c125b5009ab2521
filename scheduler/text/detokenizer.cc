#include "scheduler/text/detokenizer.h"

#include <cassert>
#include <string_view>

#include "common/utf8.h"

namespace pagoda::scheduler::text {

using common::kMaxUtf8IncompleteLength;
using common::kUtf8Replacement;
using common::SanitizeUtf8;
using common::ScanUtf8Char;
using common::Utf8Char;
using common::Utf8CharKind;

std::string StreamingDetokenizer::Push(int32_t id) {
  pending_.append(tokenizer_->TokenBytes(id));
  std::string out;
  out.reserve(pending_.size());
  const std::string_view bytes = pending_;
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Char c = ScanUtf8Char(bytes.substr(i));
    if (c.kind == Utf8CharKind::kIncomplete) break;  // wait for the rest of the character
    if (c.kind == Utf8CharKind::kValid) {
      out.append(bytes.substr(i, c.length));
    } else {
      out.append(kUtf8Replacement);
    }
    i += c.length;
  }
  pending_.erase(0, i);
  assert(pending_.size() <= kMaxUtf8IncompleteLength);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace pagoda::scheduler::text
