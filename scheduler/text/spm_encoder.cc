#include "scheduler/text/spm_encoder.h"

#include <cstdint>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace pagoda::scheduler::text {

using common::ScanUtf8Char;
using common::Utf8Char;
using common::Utf8CharKind;

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A run of the normalized text: symbols form a doubly linked list; a symbol merged into its
// left neighbour keeps length 0.
struct Symbol {
  size_t start;
  size_t length;
  int32_t prev;
  int32_t next;
};

// A candidate merge of two adjacent symbols; `length` detects candidates made stale by an
// earlier merge of either side.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t length;
};

// Orders the max-heap: highest score first, then leftmost.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// Splits text into one symbol per UTF-8 character; each ill-formed byte is its own symbol.
std::vector<Symbol> SplitCharacters(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Char c = ScanUtf8Char(text.substr(i));
    const size_t length = c.kind == Utf8CharKind::kValid ? c.length : 1;
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({i, length, index - 1, index + 1});
    i += length;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

}  // namespace

bool IsSpmMergeable(TokenType type) {
  return type == TokenType::kNormal || type == TokenType::kUserDefined ||
         type == TokenType::kUndefined;
}

int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]);
  const int lo = HexDigit(piece[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

std::string UnescapeSpaces(std::string_view piece) {
  std::string text;
  text.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      text.push_back(' ');
      i += kSpaceMarker.size();
    } else {
      text.push_back(piece[i++]);
    }
  }
  return text;
}

absl::StatusOr<SpmEncoder> SpmEncoder::Create(const Vocab& vocab) {
  SpmEncoder encoder;
  encoder.add_space_prefix_ = vocab.add_space_prefix;
  encoder.scores_ = vocab.scores;
  for (int32_t& id : encoder.byte_to_id_) id = -1;
  const int32_t n = static_cast<int32_t>(vocab.pieces.size());
  encoder.piece_to_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = vocab.pieces[id];
    if (vocab.types[id] == TokenType::kByte) {
      const int byte = ParseBytePiece(piece);
      if (byte < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "byte token ", id, " has piece \"", absl::CEscape(piece), "\"; expected <0xHH>"));
      }
      if (encoder.byte_to_id_[byte] < 0) encoder.byte_to_id_[byte] = id;
    } else if (IsSpmMergeable(vocab.types[id])) {
      encoder.piece_to_id_.try_emplace(piece, id);  // the first (lowest) id wins
    }
  }
  for (int byte = 0; byte < 256; ++byte) {
    if (encoder.byte_to_id_[byte] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokenizer vocabulary lacks the byte token <0x%02X> (type byte) needed for byte "
          "fallback; all 256 byte tokens must be present",
          byte));
    }
  }
  return encoder;
}

int32_t SpmEncoder::FindPiece(std::string_view piece) const {
  auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
  return it == piece_to_id_.end() ? -1 : it->second;
}

void SpmEncoder::Encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  normalized.reserve(text.size() + kSpaceMarker.size() * 8);
  if (add_space_prefix_) normalized.append(kSpaceMarker);
  for (char c : text) {
    if (c == ' ') {
      normalized.append(kSpaceMarker);
    } else {
      normalized.push_back(c);
    }
  }
  out.reserve(out.size() + normalized.size() / 2 + 1);
  EncodeNormalized(normalized, out);
}

void SpmEncoder::EncodeNormalized(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols = SplitCharacters(text);
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const int32_t id = FindPiece(text.substr(symbols[left].start, length));
    if (id >= 0) queue.push({scores_[id], left, right, length});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away, or `right` grew by absorbing its own neighbour.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].length);
    const int32_t id = FindPiece(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char byte : piece) out.push_back(byte_to_id_[static_cast<uint8_t>(byte)]);
  }
}

}  // namespace pagoda::scheduler::text
