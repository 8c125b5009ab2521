#include "scheduler/text/bpe_encoder.h"

#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::scheduler::text {
namespace {

// GPT-2's bytes_to_unicode(): printable bytes (33..126, 161..172, 174..255) are their own code
// point; the other 68 bytes take 256, 257, ... in byte order.
struct ByteAlphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point; -1: not a byte character
  ByteAlphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* const alphabet = new ByteAlphabet();
  return *alphabet;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else {  // the byte alphabet ends at U+0143: two bytes suffice
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A symbol of a word being merged: a doubly linked list over the word's bytes.
struct Symbol {
  int32_t id;  // -1 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// A candidate merge; stale when either side changed since it was queued.
struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index
  int32_t left_id;
  int32_t right_id;
};

// Orders the max-heap so that the lowest rank, then the leftmost symbol, comes first.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

std::optional<std::string> ByteLevelDecode(std::string_view piece) {
  const ByteAlphabet& alphabet = Alphabet();
  std::string bytes;
  bytes.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    // The alphabet's characters are one or two bytes long (U+0021..U+0143).
    const auto b0 = static_cast<uint8_t>(piece[i]);
    size_t code_point = b0;
    size_t length = 1;
    if (b0 >= 0x80) {
      if ((b0 & 0xE0) != 0xC0 || i + 1 >= piece.size()) return std::nullopt;
      const auto b1 = static_cast<uint8_t>(piece[i + 1]);
      if ((b1 & 0xC0) != 0x80 || b0 < 0xC2) return std::nullopt;
      code_point = (static_cast<size_t>(b0 & 0x1F) << 6) | (b1 & 0x3F);
      length = 2;
    }
    if (code_point >= alphabet.to_byte.size() || alphabet.to_byte[code_point] < 0) {
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(alphabet.to_byte[code_point]));
    i += length;
  }
  return bytes;
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string piece;
  piece.reserve(bytes.size() * 2);
  for (char b : bytes) AppendUtf8(Alphabet().to_char[static_cast<uint8_t>(b)], piece);
  return piece;
}

absl::StatusOr<BpeEncoder> BpeEncoder::Create(const Vocab& vocab) {
  ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(vocab.pre));
  BpeEncoder encoder(std::move(pre));
  // Llama 3's tokenizer.json sets "ignore_merges": words in the vocabulary are taken whole.
  encoder.ignore_merges_ = vocab.pre == PreTokenizerKind::kLlama3;
  RETURN_IF_ERROR(encoder.BuildPieces(vocab));
  RETURN_IF_ERROR(encoder.BuildMerges(vocab));
  return encoder;
}

absl::Status BpeEncoder::BuildPieces(const Vocab& vocab) {
  const int32_t n = static_cast<int32_t>(vocab.pieces.size());
  piece_to_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    if (vocab.types[id] != TokenType::kNormal) continue;
    const std::string& piece = vocab.pieces[id];
    if (piece.empty() || !ByteLevelDecode(piece)) {
      return absl::InvalidArgumentError(
          absl::StrCat("normal token ", id, " has piece \"", absl::CEscape(piece),
                       "\", which is not a byte-level BPE string (GPT-2 byte characters only)"));
    }
    piece_to_id_.try_emplace(piece, id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = piece_to_id_.find(ByteLevelEncode(std::string(1, static_cast<char>(b))));
    if (it == piece_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "byte-level BPE vocabulary lacks a normal token for byte 0x%02X (piece \"%s\"); all "
          "256 byte pieces must be present",
          b, ByteLevelEncode(std::string(1, static_cast<char>(b)))));
    }
    byte_id_[b] = it->second;
  }
  return absl::OkStatus();
}

absl::Status BpeEncoder::BuildMerges(const Vocab& vocab) {
  const int32_t count = static_cast<int32_t>(vocab.merges.size());
  merges_.reserve(count);
  auto find = [this](std::string_view piece) {
    auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
    return it == piece_to_id_.end() ? -1 : it->second;
  };
  for (int32_t rank = 0; rank < count; ++rank) {
    const std::string& merge = vocab.merges[rank];
    const size_t space = merge.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.ggml.merges[", rank, "] is \"", absl::CEscape(merge),
                       "\"; expected two pieces separated by one space"));
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const int32_t left_id = find(left);
    const int32_t right_id = find(right);
    const int32_t result = find(absl::StrCat(left, right));
    if (left_id < 0 || right_id < 0 || result < 0) {
      const std::string missing = left_id < 0 ? left : right_id < 0 ? right : "";
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.ggml.merges[", rank, "] (\"", absl::CEscape(merge), "\") names ",
          missing.empty() ? absl::StrCat("a result \"", absl::CEscape(absl::StrCat(left, right)))
                          : absl::StrCat("\"", absl::CEscape(missing)),
          "\", which is not a normal token of the vocabulary"));
    }
    merges_.try_emplace(PairKey(left_id, right_id), Merge{rank, result});  // first rank wins
  }
  return absl::OkStatus();
}

const BpeEncoder::Merge* BpeEncoder::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeEncoder::Encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = pre_.Normalize(text);
  std::vector<std::string_view> words;
  pre_.Split(normalized, words);
  for (std::string_view word : words) EncodeWord(word, out);
}

void BpeEncoder::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_ && word.size() > 1) {
    auto it = piece_to_id_.find(ByteLevelEncode(word));
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_id_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  auto try_add = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int32_t left_id = symbols[left].id;
    const int32_t right_id = symbols[symbols[left].next].id;
    if (const Merge* m = FindMerge(left_id, right_id)) {
      queue.push({m->rank, left, left_id, right_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = FindMerge(c.left_id, c.right_id)->result;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    try_add(left.prev);
    try_add(c.left);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace pagoda::scheduler::text
