// Tokenizer: text <-> token ids for the two vocabulary families of GGUF files,
// SentencePiece-style BPE ("llama", spm_encoder.h) and GPT-2 byte-level BPE ("gpt2",
// bpe_encoder.h), plus what both share: special tokens, BOS/EOS, decoding.
//
// Contract:
//  * A Tokenizer is immutable after Create(), cheap to copy (the encoders are shared), and safe
//    to share between threads for reading.
//  * Create() guarantees: pieces, scores and types have one entry per id; every pieces is
//    well-formed UTF-8; special ids (bos, eos, eot, eom, unk, pad) are in range or -1 for none;
//    bos is not -1 when add_bos, eos not -1 when add_eos; plus the encoder's own requirements.
//    Errors name the offending id, piece or merge.
//  * Encode(text, add_special, parse_special): with `parse_special`, every control or
//    user-defined piece found in the text (leftmost, then longest) becomes its id and the text
//    between them is encoded by the model; without it, no control or user-defined token is ever
//    produced by the byte-level model (so "<|eot_id|>" in a user's prompt is text), and the
//    SentencePiece model merges user-defined pieces as ordinary ones. `add_special` puts BOS in
//    front when add_bos and EOS at the end when add_eos.
//  * Decode(Encode(text, false, parse)) == text for every text (byte-level BPE: NFC'd text for
//    qwen2; SentencePiece: when add_space_prefix, and a literal "▁" decodes as ' '), with
//    `render_special` when parse was on. Decode returns raw bytes, which may be ill-formed
//    UTF-8 when the ids split a character; text sent to clients goes through
//    StreamingDetokenizer or SanitizeUtf8.
//  * TokenBytes: control, unknown and unused tokens give "" (they are not text); ids outside
//    [0, vocab_size()) give "" and are not control tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/text/vocab.h"

namespace pagoda::scheduler::text {

class SpmEncoder;
class BpeEncoder;

class Tokenizer {
 public:
  // Validates `vocab` and builds the lookup tables. Errors name the offending id or piece.
  static absl::StatusOr<Tokenizer> Create(Vocab vocab);

  // Token ids for `text` (any bytes). Empty text gives just the added special tokens.
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              bool parse_special = false) const;

  // The raw vocabulary piece (e.g. "▁Once", "<0x0A>", "Ġthe", "<s>"); empty for an
  // out-of-range id.
  std::string_view Piece(int32_t id) const;

  // Bytes this token contributes to text: a byte token gives its byte, "▁" becomes ' ',
  // byte-level pieces their bytes, user-defined tokens their piece, and control, unknown and
  // unused tokens "".
  std::string TokenBytes(int32_t id) const;

  // Decodes a whole sequence: concatenated TokenBytes (with `render_special`, control tokens
  // give their piece), minus the one leading space that add_space_prefix introduced
  // (SentencePiece; the ids are taken to start a text, after an optional BOS).
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  // The ids that end a generation: EOS, EOT and EOM, those the vocabulary has, without repeats.
  std::vector<int32_t> EndOfGenerationIds() const;

  // Control and user-defined tokens in id order: the pieces Encode(.., parse_special) matches.
  const std::vector<int32_t>& special_ids() const { return special_ids_; }

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_->pieces.size()); }
  TokenizerModel model() const { return vocab_->model; }
  PreTokenizerKind pre() const { return vocab_->pre; }
  int32_t bos_id() const { return vocab_->bos_id; }
  int32_t eos_id() const { return vocab_->eos_id; }
  int32_t eot_id() const { return vocab_->eot_id; }
  int32_t eom_id() const { return vocab_->eom_id; }
  int32_t unk_id() const { return vocab_->unk_id; }
  int32_t pad_id() const { return vocab_->pad_id; }
  bool add_bos() const { return vocab_->add_bos; }
  bool add_eos() const { return vocab_->add_eos; }
  bool add_space_prefix() const { return vocab_->add_space_prefix; }
  const std::string& chat_template() const { return vocab_->chat_template; }
  bool IsControl(int32_t id) const;
  TokenType Type(int32_t id) const;

 private:
  Tokenizer() = default;

  void BuildSpecialTables();
  absl::Status BuildTokenText();
  // Appends the model's ids for text that holds no special token.
  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;
  // The special token whose piece starts `text` (the longest), or -1.
  int32_t MatchSpecial(std::string_view text) const;

  std::shared_ptr<const Vocab> vocab_;
  std::shared_ptr<const SpmEncoder> spm_;  // exactly one of spm_ and bpe_ is set
  std::shared_ptr<const BpeEncoder> bpe_;
  std::shared_ptr<const std::vector<std::string>> token_text_;  // TokenBytes, precomputed
  std::vector<int32_t> special_ids_;
  // Special ids by the first byte of their piece, longest piece first.
  std::shared_ptr<const std::vector<std::vector<int32_t>>> special_by_byte_;
};

}  // namespace pagoda::scheduler::text
