#include "scheduler/text/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "scheduler/text/bpe_encoder.h"
#include "scheduler/text/spm_encoder.h"

namespace pagoda::scheduler::text {
namespace {

absl::Status CheckSpecialIds(const Vocab& vocab, int32_t size) {
  auto check_id = [size](const char* what, int32_t id) -> absl::Status {
    if ((id >= 0 && id < size) || id == -1) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", what, " id ", id,
                                                   " is outside the vocabulary [0, ", size,
                                                   ") (or -1 for none)"));
  };
  RETURN_IF_ERROR(check_id("BOS", vocab.bos_id));
  RETURN_IF_ERROR(check_id("EOS", vocab.eos_id));
  RETURN_IF_ERROR(check_id("EOT", vocab.eot_id));
  RETURN_IF_ERROR(check_id("EOM", vocab.eom_id));
  RETURN_IF_ERROR(check_id("unknown-token", vocab.unk_id));
  RETURN_IF_ERROR(check_id("padding", vocab.pad_id));
  if (vocab.add_bos && vocab.bos_id < 0) {
    return absl::InvalidArgumentError("tokenizer asks to add BOS but has no BOS id");
  }
  if (vocab.add_eos && vocab.eos_id < 0) {
    return absl::InvalidArgumentError("tokenizer asks to add EOS but has no EOS id");
  }
  return absl::OkStatus();
}

absl::Status ValidateShape(const Vocab& vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer vocabulary is empty");
  constexpr int32_t kMaxSize = std::numeric_limits<int32_t>::max();
  if (n > static_cast<size_t>(kMaxSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocabulary has ", n, " pieces; the limit is ", kMaxSize));
  }
  if (vocab.scores.size() != n || vocab.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocabulary sizes disagree: ", n, " pieces, ", vocab.scores.size(),
                     " scores, ", vocab.types.size(), " token types; all three must be equal"));
  }
  RETURN_IF_ERROR(CheckSpecialIds(vocab, static_cast<int32_t>(n)));
  for (size_t id = 0; id < n; ++id) {
    const int32_t type = static_cast<int32_t>(vocab.types[id]);
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", id, " has type ", type, "; valid types are 0..6"));
    }
    if (!common::IsValidUtf8(vocab.pieces[id])) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " has piece \"",
                                                     absl::CEscape(vocab.pieces[id]),
                                                     "\", which is not well-formed UTF-8"));
    }
  }
  return absl::OkStatus();
}

bool IsSpecial(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::Create(Vocab vocab) {
  RETURN_IF_ERROR(ValidateShape(vocab));
  Tokenizer tokenizer;
  if (vocab.model == TokenizerModel::kSentencePiece) {
    ASSIGN_OR_RETURN(SpmEncoder spm, SpmEncoder::Create(vocab));
    tokenizer.spm_ = std::make_shared<const SpmEncoder>(std::move(spm));
  } else {
    ASSIGN_OR_RETURN(BpeEncoder bpe, BpeEncoder::Create(vocab));
    tokenizer.bpe_ = std::make_shared<const BpeEncoder>(std::move(bpe));
  }
  vocab.merges.clear();  // only the encoder needs them
  vocab.merges.shrink_to_fit();
  tokenizer.vocab_ = std::make_shared<const Vocab>(std::move(vocab));
  RETURN_IF_ERROR(tokenizer.BuildTokenText());
  tokenizer.BuildSpecialTables();
  return tokenizer;
}

absl::Status Tokenizer::BuildTokenText() {
  const int32_t n = vocab_size();
  auto text = std::make_shared<std::vector<std::string>>(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = vocab_->pieces[id];
    switch (vocab_->types[id]) {
      case TokenType::kByte:
        if (const int byte = ParseBytePiece(piece); byte >= 0) {
          (*text)[id] = std::string(1, static_cast<char>(byte));
        } else if (bpe_ != nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "byte token ", id, " has piece \"", absl::CEscape(piece), "\"; expected <0xHH>"));
        }
        break;
      case TokenType::kNormal:
      case TokenType::kUndefined:
        if (bpe_ != nullptr) {
          (*text)[id] = ByteLevelDecode(piece).value_or(piece);
        } else {
          (*text)[id] = UnescapeSpaces(piece);
        }
        break;
      case TokenType::kUserDefined:
        (*text)[id] = bpe_ != nullptr ? piece : UnescapeSpaces(piece);
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUnused:
        break;
    }
  }
  token_text_ = std::move(text);
  return absl::OkStatus();
}

void Tokenizer::BuildSpecialTables() {
  auto by_byte = std::make_shared<std::vector<std::vector<int32_t>>>(256);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (!IsSpecial(vocab_->types[id]) || vocab_->pieces[id].empty()) continue;
    special_ids_.push_back(id);
    (*by_byte)[static_cast<uint8_t>(vocab_->pieces[id][0])].push_back(id);
  }
  for (std::vector<int32_t>& ids : *by_byte) {
    // Longest first; among equal pieces the lowest id wins (stable sort keeps id order).
    std::stable_sort(ids.begin(), ids.end(), [this](int32_t a, int32_t b) {
      return vocab_->pieces[a].size() > vocab_->pieces[b].size();
    });
  }
  special_by_byte_ = std::move(by_byte);
}

int32_t Tokenizer::MatchSpecial(std::string_view text) const {
  for (int32_t id : (*special_by_byte_)[static_cast<uint8_t>(text[0])]) {
    if (text.starts_with(vocab_->pieces[id])) return id;
  }
  return -1;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>& out) const {
  if (spm_ != nullptr) {
    spm_->Encode(text, out);
  } else {
    bpe_->Encode(text, out);
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_->add_bos) out.push_back(vocab_->bos_id);
  if (!parse_special || special_ids_.empty()) {
    EncodeText(text, out);
  } else {
    size_t done = 0;  // text[0, done) is encoded
    for (size_t i = 0; i < text.size(); ++i) {
      const int32_t id = MatchSpecial(text.substr(i));
      if (id < 0) continue;
      EncodeText(text.substr(done, i - done), out);
      out.push_back(id);
      done = i + vocab_->pieces[id].size();
      i = done - 1;
    }
    EncodeText(text.substr(done), out);
  }
  if (add_special && vocab_->add_eos) out.push_back(vocab_->eos_id);
  return out;
}

std::string_view Tokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return vocab_->pieces[id];
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return (*token_text_)[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (render_special && vocab_->types[id] == TokenType::kControl) {
      out.append(vocab_->pieces[id]);
    } else {
      out.append((*token_text_)[id]);
    }
  }
  if (spm_ != nullptr && vocab_->add_space_prefix && !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

std::vector<int32_t> Tokenizer::EndOfGenerationIds() const {
  std::vector<int32_t> ids;
  for (int32_t id : {vocab_->eos_id, vocab_->eot_id, vocab_->eom_id}) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

bool Tokenizer::IsControl(int32_t id) const { return Type(id) == TokenType::kControl; }

TokenType Tokenizer::Type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
  return vocab_->types[id];
}

}  // namespace pagoda::scheduler::text
