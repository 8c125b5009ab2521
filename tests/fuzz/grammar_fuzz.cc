// libFuzzer target: constrained-decoding grammars (common/grammar). The first input byte picks
// a mode; the rest is TEXT, optionally followed by a NUL byte and WALK bytes.
//   mode % 4 == 0: TEXT as GBNF -> Grammar::FromGbnf -> a Matcher fed WALK in chunks;
//   mode % 4 == 1: TEXT as GBNF -> FromGbnf -> a TokenMatcher walk over a small vocabulary;
//   mode % 4 == 2: TEXT as a JSON Schema -> JsonSchemaToGbnf -> FromGbnf -> a TokenMatcher walk;
//   mode % 4 == 3: TEXT as a regex -> RegexGrammar -> FromGbnf -> a TokenMatcher walk.
// Bits 2..4 of the mode byte vary the options (schema whitespace, regex search / json_string).
// Invariants (grammar.h, token_matcher.h, json_schema.h, regex.h):
//  * no input crashes, hangs or allocates without bound: errors are InvalidArgument;
//  * what JsonSchemaToGbnf and RegexGrammar emit compiles, or fails only on a FromGbnf limit
//    (InvalidArgument naming it): never a syntax error, undefined rule or left recursion;
//  * Advance is all-or-nothing and agrees with CanAdvance; feeding bytes in chunks or one at
//    a time gives the same state;
//  * every FillMask equals the brute force (each token's bytes through CanAdvance, plus the
//    end-token rules), and Accept takes exactly the allowed tokens;
//  * text a JSON Schema grammar accepts is JSON.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/regex.h"
#include "common/grammar/token_matcher.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

using grammar::Grammar;
using grammar::Matcher;
using grammar::TokenMatcher;
using grammar::Vocabulary;

constexpr int kMaxWalkSteps = 48;

// FromGbnf's limits, with a fifth of the default automaton states: reaching the default limit
// takes ~0.3 s in a release build but ~8 s instrumented, close to the 10 s timeout. The limit
// paths are the same.
grammar::Limits FuzzLimits() {
  grammar::Limits limits;
  limits.max_states = 100000;
  return limits;
}
constexpr int32_t kEos = 1;
constexpr int32_t kStopNewline = 2;  // a stop id that also has bytes ("\n")

// The 256 single bytes, then multi-byte pieces in the shapes real vocabularies have (JSON
// punctuation runs, words with a leading space, whole and split UTF-8 sequences), then an
// excluded token with bytes. Token 0 is empty (excluded), 1 is EOS (no bytes), 2 is "\n" (also a
// stop id). Small, so the brute force over it stays cheap.
std::shared_ptr<const Vocabulary> FuzzVocab() {
  static const std::shared_ptr<const Vocabulary> vocab = [] {
    std::vector<std::string> bytes = {"", "", "\n"};
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece : {"{\"",      "\":",          "\":\"",
                              "\",\"",    "\"}",          "},{",
                              "[{",       "}]",           "\\n",
                              "\\u00",    "\\\"",         "true",
                              "false",    "null",         " the",
                              "ab",       "abc",          "name",
                              "\"name\"", "0.",           "12",
                              "-1",       "e+",           "00",
                              "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
                              "\xF0\x9F", "\x98\x80",     "\xE2\x82",
                              "\xAC",     "  ",           "\n\n",
                              ":\"",      "T00:",         "-01-",
                              "@",        ".com",         "}\n",
                              "\t"}) {
      bytes.push_back(piece);
    }
    std::vector<bool> excluded(bytes.size(), false);
    excluded[0] = excluded[1] = true;
    bytes.push_back("{");  // excluded although it has bytes
    excluded.push_back(true);
    return Vocabulary::Create(std::move(bytes), std::move(excluded));
  }();
  return vocab;
}

bool Bit(const std::vector<uint32_t>& mask, int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1; }

std::vector<uint32_t> BruteForceMask(const TokenMatcher& tm, const Vocabulary& vocab) {
  std::vector<uint32_t> mask(vocab.mask_words(), 0);
  const auto& ends = tm.end_tokens();
  auto is_end = [&](int32_t t) { return std::find(ends.begin(), ends.end(), t) != ends.end(); };
  if (tm.Finished()) {
    for (int32_t t : ends) mask[t >> 5] |= 1u << (t & 31);
    return mask;
  }
  bool any = false;
  for (int32_t t = 0; t < vocab.size(); ++t) {
    if (is_end(t) || vocab.excluded(t)) continue;
    if (tm.matcher().CanAdvance(vocab.token_bytes(t))) {
      mask[t >> 5] |= 1u << (t & 31);
      any = true;
    }
  }
  if (tm.matcher().Accepting() || !any) {
    for (int32_t t : ends) mask[t >> 5] |= 1u << (t & 31);
  }
  return mask;
}

// Walks the grammar token by token, each WALK byte picking one of the allowed tokens (ends
// last, so walks go deep); every mask is checked against the brute force. Returns the text.
std::string TokenWalk(const std::shared_ptr<const Grammar>& g, std::string_view walk) {
  const auto vocab = FuzzVocab();
  TokenMatcher tm(g, vocab, {kEos, kStopNewline});
  std::vector<uint32_t> mask(vocab->mask_words());
  std::string text;
  for (size_t step = 0; step < std::min<size_t>(walk.size(), kMaxWalkSteps); ++step) {
    std::fill(mask.begin(), mask.end(), 0xFFFFFFFFu);  // FillMask overwrites every word
    tm.FillMask(mask);
    const std::vector<uint32_t> expected = BruteForceMask(tm, *vocab);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (Bit(mask, t) != Bit(expected, t)) {
        FuzzFail(absl::StrCat("mask bit of token ", t, " \"", absl::CEscape(vocab->token_bytes(t)),
                              "\" is ", static_cast<int>(Bit(mask, t)), ", brute force says ",
                              static_cast<int>(Bit(expected, t)), ", after \"", absl::CEscape(text),
                              "\""));
      }
      if (Bit(mask, t) && t != kEos && t != kStopNewline) allowed.push_back(t);
    }
    if (tm.Finished()) break;
    const auto pick_byte = static_cast<uint8_t>(walk[step]);
    int32_t pick;
    if (allowed.empty()) {
      if (!Bit(mask, kEos)) FuzzFail("nothing allowed, not even an end token");
      pick = kEos;
    } else if (pick_byte == 0xFF && Bit(mask, kEos)) {
      pick = kEos;  // end where the grammar may end
    } else {
      pick = allowed[pick_byte % allowed.size()];
    }
    // A token outside the mask is refused and changes nothing.
    for (int32_t t = 3; t < vocab->size(); t += 37) {
      if (!Bit(mask, t) && tm.Accept(t)) FuzzFail(absl::StrCat("Accept took masked token ", t));
    }
    if (!tm.Accept(pick)) FuzzFail(absl::StrCat("Accept refused allowed token ", pick));
    if (pick != kEos) text += vocab->token_bytes(pick);
  }
  return text;
}

// Feeds `walk` to a Matcher in chunks (sizes from the walk bytes), checking Advance against
// CanAdvance and the all-or-nothing rule, and against a byte-at-a-time Matcher.
void ByteWalk(const std::shared_ptr<const Grammar>& g, std::string_view walk) {
  Matcher chunked(g);
  Matcher bytewise(g);
  size_t pos = 0;
  while (pos < walk.size()) {
    const size_t len = std::min<size_t>(walk.size() - pos, 1 + static_cast<uint8_t>(walk[pos]) % 5);
    const std::string_view chunk = walk.substr(pos, len);
    pos += len;
    const bool can = chunked.CanAdvance(chunk);
    const bool accepting = chunked.Accepting();
    const bool complete = chunked.Complete();
    const bool did = chunked.Advance(chunk);
    if (can != did) FuzzFail("CanAdvance and Advance disagree");
    if (!did && (chunked.Accepting() != accepting || chunked.Complete() != complete)) {
      FuzzFail("a refused Advance changed the state");
    }
    if (!did) continue;
    Matcher probe = bytewise;
    bool each = true;
    for (char c : chunk) each = each && probe.Advance(std::string_view(&c, 1));
    // The stack cap may refuse a byte inside the chunk that a whole-chunk advance also refuses,
    // so only the successful case must agree.
    if (!each)
      FuzzFail(
          absl::StrCat("\"", absl::CEscape(std::string(chunk)), "\" advances whole, not bytewise"));
    bytewise = probe;
    if (bytewise.Accepting() != chunked.Accepting() || bytewise.Complete() != chunked.Complete()) {
      FuzzFail("chunked and bytewise matchers disagree");
    }
  }
}

void CheckError(const absl::Status& status, const char* what) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    FuzzFail(absl::StrCat(what, " failed with ", status.ToString(), " (want InvalidArgument)"));
  }
  if (status.message().empty()) FuzzFail(absl::StrCat(what, " failed without a message"));
}

// What the translators emit must compile, or fail only on one of FromGbnf's size limits (a
// regex or schema within the translators' own limits may still expand past max_states; that is
// the same clear InvalidArgument naming the limit). Returns null in that case.
std::shared_ptr<const Grammar> MustCompile(const std::string& gbnf, const char* from) {
  auto g = Grammar::FromGbnf(gbnf, FuzzLimits());
  if (g.ok()) return *g;
  if (g.status().code() == absl::StatusCode::kInvalidArgument &&
      absl::StrContains(g.status().message(), "max_")) {
    return nullptr;
  }
  FuzzFail(absl::StrCat("GBNF from ", from, " does not compile: ", g.status().ToString(), "\n",
                        gbnf.substr(0, 4000)));
}

void TestOneInput(std::string_view data) {
  if (data.empty()) return;
  const auto mode = static_cast<uint8_t>(data[0]);
  data.remove_prefix(1);
  const size_t nul = data.find('\0');
  const std::string_view text = data.substr(0, nul);
  const std::string_view walk = nul == std::string_view::npos ? "" : data.substr(nul + 1);
  switch (mode % 4) {
    case 0:
    case 1: {
      auto g = Grammar::FromGbnf(text, FuzzLimits());
      if (!g.ok()) {
        CheckError(g.status(), "FromGbnf");
        return;
      }
      if ((*g)->source() != text) FuzzFail("Grammar::source() is not the text");
      if (mode % 4 == 0) {
        ByteWalk(*g, walk);
      } else {
        TokenWalk(*g, walk);
      }
      return;
    }
    case 2: {
      const auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) return;
      grammar::SchemaOptions options;
      options.max_whitespace = (mode >> 2) & 3;
      if (mode & 0x10) options.max_string_length = 20;
      if (mode & 0x20) options.max_unbounded_items = 4;
      auto gbnf = grammar::JsonSchemaToGbnf(schema, options);
      if (!gbnf.ok()) {
        CheckError(gbnf.status(), "JsonSchemaToGbnf");
        return;
      }
      const auto g = MustCompile(*gbnf, "JsonSchemaToGbnf");
      if (g == nullptr) return;
      const std::string out = TokenWalk(g, walk);
      Matcher m(g);
      if (!m.Advance(out)) FuzzFail("the walk's text does not match its grammar");
      if (m.Accepting() && !nlohmann::json::accept(out)) {
        FuzzFail(absl::StrCat("schema grammar accepts non-JSON \"", absl::CEscape(out), "\""));
      }
      return;
    }
    case 3: {
      grammar::RegexOptions options;
      options.search = (mode >> 2) & 1;
      options.json_string = (mode >> 3) & 1;
      auto gbnf = grammar::RegexGrammar(text, options);
      if (!gbnf.ok()) {
        CheckError(gbnf.status(), "RegexGrammar");
        return;
      }
      if (const auto g = MustCompile(*gbnf, "RegexGrammar")) TokenWalk(g, walk);
      return;
    }
  }
}

}  // namespace
}  // namespace pagoda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagoda::fuzz::TestOneInput(pagoda::fuzz::AsText(data, size));
  return 0;
}
