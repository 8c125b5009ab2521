// Test-only vocabularies: a loader for llama2.c's tokenizer file (tok512.bin of stories260K)
// and a builder for small synthetic llama-style vocabularies.
//
// tok512.bin format: int32 max_token_length, then per token: float32 score, int32 length, `length`
// bytes. llama2.c stores spaces as ' ' and BOS/EOS as "\n<s>\n"/"\n</s>\n"; the GGUF of the same
// model has "▁", "<s>" and "</s>", so this loader converts to the GGUF form. Ids 0/1/2 are
// unknown/BOS/EOS and "<0xHH>" pieces are byte tokens, as in the GGUF.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "scheduler/text/tokenizer.h"

namespace pagoda::testing {

inline bool IsBytePieceForTest(const std::string& piece) {
  return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>';
}

inline absl::StatusOr<scheduler::text::Vocab> LoadLlama2cTokenizer(const std::string& path,
                                                                   int32_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t offset = 0;
  auto read = [&](void* dst, size_t n) {
    if (offset + n > data.size()) return false;
    std::memcpy(dst, data.data() + offset, n);
    offset += n;
    return true;
  };
  int32_t max_token_length = 0;
  if (!read(&max_token_length, 4)) return absl::DataLossError("truncated header");
  scheduler::text::Vocab vocab;
  for (int32_t id = 0; id < vocab_size; ++id) {
    float score = 0;
    int32_t length = 0;
    if (!read(&score, 4) || !read(&length, 4) || length < 0) {
      return absl::DataLossError(absl::StrCat("truncated or bad entry for token ", id));
    }
    std::string piece(static_cast<size_t>(length), '\0');
    if (!read(piece.data(), piece.size())) {
      return absl::DataLossError(absl::StrCat("truncated piece for token ", id));
    }
    scheduler::text::TokenType type = scheduler::text::TokenType::kNormal;
    if (id == 0) {
      type = scheduler::text::TokenType::kUnknown;
    } else if (id == 1 || id == 2) {
      type = scheduler::text::TokenType::kControl;
      piece = id == 1 ? "<s>" : "</s>";
    } else if (IsBytePieceForTest(piece)) {
      type = scheduler::text::TokenType::kByte;
    } else {
      piece = absl::StrReplaceAll(piece, {{" ", "\xE2\x96\x81"}});
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  if (offset != data.size()) {
    return absl::DataLossError(
        absl::StrCat(data.size() - offset, " trailing bytes after ", vocab_size, " tokens"));
  }
  return vocab;
}

// Id layout of MakeSyntheticVocab: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then `normal`.
inline constexpr int32_t kFirstSyntheticPiece = 259;
inline int32_t SyntheticByteId(uint8_t byte) { return 3 + byte; }

// A llama-style vocabulary with the given normal pieces ("▁" for space) and scores.
inline scheduler::text::Vocab MakeSyntheticVocab(
    const std::vector<std::pair<std::string, float>>& normal, bool add_space_prefix = true) {
  scheduler::text::Vocab vocab;
  auto add = [&vocab](std::string piece, float score, scheduler::text::TokenType type) {
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  };
  add("<unk>", 0, scheduler::text::TokenType::kUnknown);
  add("<s>", 0, scheduler::text::TokenType::kControl);
  add("</s>", 0, scheduler::text::TokenType::kControl);
  static const char kHex[] = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    add(std::string("<0x") + kHex[byte / 16] + kHex[byte % 16] + ">", 0,
        scheduler::text::TokenType::kByte);
  }
  for (const auto& [piece, score] : normal) add(piece, score, scheduler::text::TokenType::kNormal);
  vocab.add_space_prefix = add_space_prefix;
  return vocab;
}

}  // namespace pagoda::testing
