// libFuzzer target: arbitrary bytes through the tokenizer, the streaming detokenizer and the
// UTF-8 helpers. Invariants (see tokenizer.h, detokenizer.h, utf8.h):
//  * the bytes as text: Encode gives BOS then in-vocabulary, text-producing ids, and
//    Decode(Encode(x)) == x with "▁" read as a space (SentencePiece), for any bytes;
//  * the bytes as a token-id sequence (out-of-range ids included, characters split anywhere):
//    the streaming detokenizer only ever emits well-formed UTF-8 and loses nothing;
//  * SanitizeUtf8 yields well-formed UTF-8, and is the identity exactly on valid input.
//  * byte-level BPE (each pre-tokenizer): ids are normal tokens, Decode gives the (NFC'd) text
//    back, and with special-token parsing Decode(ids, render_special) gives the text back.
// Runs on the synthetic vocabulary, on a small byte-level BPE vocabulary per pre-tokenizer, and,
// where the test model is found, on its trained one.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

void CheckUtf8(std::string_view text) {
  const std::string sanitized = common::SanitizeUtf8(text);
  if (!common::IsValidUtf8(sanitized)) FuzzFail("SanitizeUtf8 produced ill-formed UTF-8");
  if (common::IsValidUtf8(text) != (sanitized == text)) {
    FuzzFail(absl::StrCat("IsValidUtf8 and SanitizeUtf8 disagree on \"",
                          absl::CEscape(std::string(text)), "\""));
  }
  size_t i = 0;
  while (i < text.size()) {
    const common::Utf8Char c = common::ScanUtf8Char(text.substr(i));
    if (c.length < 1 || c.length > 4 ||
        (c.kind == common::Utf8CharKind::kIncomplete && i + c.length != text.size())) {
      FuzzFail(absl::StrCat("ScanUtf8Char gave length ", c.length, " at ", i));
    }
    i += c.length;
  }
  const size_t tail = common::Utf8IncompleteSuffixLength(text);
  if (tail > common::kMaxUtf8IncompleteLength ||
      (tail > 0 && common::ScanUtf8Char(text.substr(text.size() - tail)).kind !=
                       common::Utf8CharKind::kIncomplete)) {
    FuzzFail(absl::StrCat("Utf8IncompleteSuffixLength gave ", tail, " for \"",
                          absl::CEscape(std::string(text)), "\""));
  }
}

// The bytes as 16-bit little-endian values mapped onto [-4, vocab_size + 4).
std::vector<int32_t> AsIds(std::string_view bytes, int32_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(bytes.size() / 2);
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) | static_cast<uint8_t>(bytes[i + 1]) << 8;
    ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab_size + 8)) - 4);
  }
  return ids;
}

void CheckTokenizer(const scheduler::text::Tokenizer& tokenizer, std::string_view bytes) {
  CheckRoundTrip(tokenizer, bytes);
  CheckStreaming(tokenizer, AsIds(bytes, tokenizer.vocab_size()));
}

void TestOneInput(std::string_view bytes) {
  CheckUtf8(bytes);
  CheckTokenizer(SyntheticTokenizer(), bytes);
  for (auto pre :
       {scheduler::text::PreTokenizerKind::kGpt2, scheduler::text::PreTokenizerKind::kLlama3,
        scheduler::text::PreTokenizerKind::kQwen2}) {
    CheckTokenizer(ByteLevelTokenizer(pre), bytes);
  }
  if (const scheduler::text::Tokenizer* trained = TestModelTokenizer())
    CheckTokenizer(*trained, bytes);
}

}  // namespace
}  // namespace pagoda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagoda::fuzz::TestOneInput(pagoda::fuzz::AsText(data, size));
  return 0;
}
