#include "modelgen/synthetic_vocab.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pagoda::modelgen {
namespace {

constexpr int kMaxSyntheticVocab = 1000000;
constexpr size_t kMaxPieceBytes = 24;
const char kSpace[] = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr const char* kWords[] = {
    "the",    "and",   "was",  "she",   "he",    "to",   "a",     "it",     "said", "day",
    "little", "big",   "play", "time",  "once",  "upon", "happy", "friend", "dog",  "cat",
    "ball",   "park",  "tree", "house", "girl",  "boy",  "mom",   "dad",    "love", "saw",
    "went",   "had",   "with", "they",  "her",   "his",  "one",   "there",  "very", "wanted",
    "named",  "lily",  "tom",  "of",    "in",    "is",   "you",   "that",   "for",  "on",
    "are",    "as",    "at",   "be",    "this",  "have", "from",  "or",     "by",   "not",
    "but",    "what",  "all",  "were",  "when",  "we",   "can",   "out",    "up",   "so",
    "about",  "them",  "then", "some",  "would", "make", "like",  "into",   "time", "look",
    "two",    "more",  "go",   "see",   "no",    "way",  "could", "people", "my",   "than",
    "first",  "water", "been", "call",  "who",   "now",  "find",  "long",   "down", "did",
    "get",    "come",  "made", "may",   "part",  "sun",  "fun",   "toy",    "car",  "bird",
    "fish",   "home",  "good", "nice",  "sad",   "run",  "jump"};

constexpr const char* kSuffixes[] = {"ing", "ed", "er", "ly", "s", "es", "est", "ful", "tion"};

// Single-character pieces in priority order (so small vocabularies keep the most useful).
std::vector<std::string> SingleChars() {
  std::vector<std::string> out = {kSpace};
  for (char c = 'a'; c <= 'z'; ++c) out.emplace_back(1, c);
  for (char c : std::string(".,!?'\";:-()")) out.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) out.emplace_back(1, c);
  for (char c = '0'; c <= '9'; ++c) out.emplace_back(1, c);
  return out;
}

// Multi-character merge candidates: prefixes of "▁word" (so BPE can reach whole words), word
// substrings and suffixes; ordered by length, ties broken by a seeded hash.
std::vector<std::string> MergeCandidates(uint64_t seed) {
  std::set<std::string> unique;
  for (const char* w : kWords) {
    const std::string word = w;
    const std::string spaced = std::string(kSpace) + word;
    for (size_t n = 4; n <= spaced.size(); ++n) unique.insert(spaced.substr(0, n));  // "▁t"..
    for (size_t i = 0; i + 2 <= word.size(); ++i) unique.insert(word.substr(i, 2));
    for (const char* s : kSuffixes) unique.insert(word + s);
  }
  for (const char* s : kSuffixes) unique.insert(s);
  std::vector<std::pair<std::pair<size_t, uint64_t>, std::string>> keyed;
  for (const std::string& s : unique) {
    if (s.size() < 2) continue;
    uint64_t h = seed ^ 0x51ed27f1a3b5c7d9ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    keyed.push_back({{s.size(), SplitMix64(&h)}, s});
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::string> out;
  out.reserve(keyed.size());
  for (auto& [key, s] : keyed) out.push_back(std::move(s));
  return out;
}

}  // namespace

absl::StatusOr<SyntheticVocab> BuildSyntheticVocab(int vocab_size, uint64_t seed) {
  if (vocab_size < kMinSyntheticVocab || vocab_size > kMaxSyntheticVocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "synthetic vocabulary size %d out of range [%d, %d] (it needs 259 special and byte "
        "tokens plus printable characters)",
        vocab_size, kMinSyntheticVocab, kMaxSyntheticVocab));
  }
  SyntheticVocab v;
  std::set<std::string> seen;
  auto add = [&](std::string piece, float score, int32_t type) {
    if (static_cast<int>(v.tokens.size()) >= vocab_size || !seen.insert(piece).second) return;
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0.0f, kTokenTypeUnknown);
  add("<s>", 0.0f, kTokenTypeControl);
  add("</s>", 0.0f, kTokenTypeControl);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0.0f, kTokenTypeByte);
  float score = -1.0f;
  // Single characters get the lowest scores: they are never the result of a merge.
  for (const std::string& c : SingleChars()) add(c, -1e6f, kTokenTypeNormal);
  for (const std::string& piece : MergeCandidates(seed)) add(piece, score--, kTokenTypeNormal);
  // Beyond the word list: seeded concatenations of existing normal pieces.
  const size_t first_normal = kSyntheticFirstByteId + 256;
  uint64_t state = seed;
  for (int attempts = 0; static_cast<int>(v.tokens.size()) < vocab_size; ++attempts) {
    if (attempts > 100 * vocab_size) {
      return absl::InternalError(absl::StrCat("could not synthesize ", vocab_size, " pieces"));
    }
    const size_t n = v.tokens.size() - first_normal;
    std::string piece = v.tokens[first_normal + SplitMix64(&state) % n] +
                        v.tokens[first_normal + SplitMix64(&state) % n];
    if (piece.size() <= kMaxPieceBytes) add(std::move(piece), score--, kTokenTypeNormal);
  }
  return v;
}

}  // namespace pagoda::modelgen
