#include "tests/fuzz/fuzz_support.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/gguf_reader.h"
#include "common/utf8.h"
#include "modelgen/synthetic_vocab.h"
#include "scheduler/text/bpe_encoder.h"
#include "scheduler/text/detokenizer.h"
#include "scheduler/text/gguf_vocab.h"
#include "scheduler/text/pre_tokenizer.h"

namespace pagoda::fuzz {
namespace {

std::unique_ptr<scheduler::text::Tokenizer> BuildSyntheticTokenizer() {
  auto synthetic = modelgen::BuildSyntheticVocab(kSyntheticFuzzVocab, /*seed=*/7);
  if (!synthetic.ok()) {
    FuzzFail(absl::StrCat("synthetic vocabulary: ", synthetic.status().ToString()));
  }
  scheduler::text::Vocab vocab;
  vocab.pieces = std::move(synthetic->tokens);
  vocab.scores = std::move(synthetic->scores);
  for (int32_t type : synthetic->token_types) {
    vocab.types.push_back(static_cast<scheduler::text::TokenType>(type));
  }
  vocab.bos_id = modelgen::kSyntheticBosId;
  vocab.eos_id = modelgen::kSyntheticEosId;
  vocab.unk_id = modelgen::kSyntheticUnkId;
  auto tokenizer = scheduler::text::Tokenizer::Create(std::move(vocab));
  if (!tokenizer.ok()) {
    FuzzFail(absl::StrCat("synthetic tokenizer: ", tokenizer.status().ToString()));
  }
  return std::make_unique<scheduler::text::Tokenizer>(*std::move(tokenizer));
}

std::unique_ptr<scheduler::text::Tokenizer> LoadTestModelTokenizer() {
  const char* env = std::getenv("PAGODA_TEST_MODELS");
  const std::filesystem::path dir =
      env != nullptr && *env != '\0'
          ? std::filesystem::path(env)
          : std::filesystem::path(PAGODA_SOURCE_DIR) / ".." / "shared" / "models";
  const std::filesystem::path path = dir / "stories260K-f32.gguf";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return nullptr;
  auto file = common::GgufFile::Open(path.string());
  if (!file.ok()) FuzzFail(absl::StrCat("test model: ", file.status().ToString()));
  auto tokenizer = scheduler::text::LoadGgufTokenizer(**file);
  if (!tokenizer.ok()) {
    FuzzFail(absl::StrCat("test model tokenizer: ", tokenizer.status().ToString()));
  }
  return std::make_unique<scheduler::text::Tokenizer>(*std::move(tokenizer));
}

// Whether "▁" is a piece that text can produce.
bool HasSpacePiece(const scheduler::text::Tokenizer& tokenizer) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const scheduler::text::TokenType type = tokenizer.Type(id);
    if (tokenizer.Piece(id) == "\xE2\x96\x81" &&
        (type == scheduler::text::TokenType::kNormal ||
         type == scheduler::text::TokenType::kUserDefined ||
         type == scheduler::text::TokenType::kUndefined)) {
      return true;
    }
  }
  return false;
}

}  // namespace

void FuzzFail(std::string_view what) {
  std::fprintf(stderr, "fuzz invariant broken: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

const scheduler::text::Tokenizer& SyntheticTokenizer() {
  static const scheduler::text::Tokenizer* const tokenizer = BuildSyntheticTokenizer().release();
  return *tokenizer;
}

const scheduler::text::Tokenizer* TestModelTokenizer() {
  static const scheduler::text::Tokenizer* const tokenizer = LoadTestModelTokenizer().release();
  return tokenizer;
}

void CheckStreaming(const scheduler::text::Tokenizer& tokenizer, std::span<const int32_t> ids) {
  scheduler::text::StreamingDetokenizer detok(tokenizer);
  std::string raw, streamed;
  for (int32_t id : ids) {
    raw += tokenizer.TokenBytes(id);
    const std::string piece = detok.Push(id);
    if (!common::IsValidUtf8(piece)) {
      FuzzFail(absl::StrCat("detokenizer emitted ill-formed UTF-8 \"", absl::CEscape(piece),
                            "\" for id ", id));
    }
    if (detok.held_bytes() > common::kMaxUtf8IncompleteLength) {
      FuzzFail(absl::StrCat("detokenizer holds ", detok.held_bytes(), " bytes"));
    }
    streamed += piece;
  }
  const std::string tail = detok.Flush();
  if (!common::IsValidUtf8(tail)) FuzzFail("detokenizer Flush emitted ill-formed UTF-8");
  streamed += tail;
  if (streamed != common::SanitizeUtf8(raw)) {
    FuzzFail(absl::StrCat("streamed text \"", absl::CEscape(streamed),
                          "\" differs from SanitizeUtf8 of the token bytes \"", absl::CEscape(raw),
                          "\""));
  }
}

std::string SpaceMarkersAsSpaces(std::string_view text) {
  return absl::StrReplaceAll(absl::string_view(text.data(), text.size()), {{"\xE2\x96\x81", " "}});
}

// Fails unless every id is in the vocabulary and a type text may produce.
void CheckTextIds(const scheduler::text::Tokenizer& tokenizer, std::span<const int32_t> ids) {
  using scheduler::text::TokenType;
  const bool bpe = tokenizer.model() == scheduler::text::TokenizerModel::kByteLevelBpe;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenType type = tokenizer.Type(ids[i]);
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size() || type == TokenType::kControl ||
        type == TokenType::kUnknown || type == TokenType::kUnused ||
        (bpe && type != TokenType::kNormal)) {
      FuzzFail(absl::StrFormat("Encode produced id %d (type %d) at %d; vocabulary size %d", ids[i],
                               static_cast<int>(type), i, tokenizer.vocab_size()));
    }
  }
}

// The text Decode(Encode(text)) must give back, or nullopt when no round trip is promised.
std::optional<std::string> ExpectedDecode(const scheduler::text::Tokenizer& tokenizer,
                                          std::string_view text) {
  if (tokenizer.model() == scheduler::text::TokenizerModel::kByteLevelBpe) {
    static const auto* const pres = [] {  // one per kind, compiled once
      auto* all = new std::vector<scheduler::text::PreTokenizer>();
      for (auto kind :
           {scheduler::text::PreTokenizerKind::kGpt2, scheduler::text::PreTokenizerKind::kLlama3,
            scheduler::text::PreTokenizerKind::kQwen2}) {
        auto pre = scheduler::text::PreTokenizer::Create(kind);
        if (!pre.ok()) FuzzFail(pre.status().ToString());
        all->push_back(*std::move(pre));
      }
      return all;
    }();
    return (*pres)[static_cast<int>(tokenizer.pre())].Normalize(text);
  }
  // The SentencePiece round trip needs "▁" as a mergeable piece (see tokenizer.h).
  if (!HasSpacePiece(tokenizer)) return std::nullopt;
  return SpaceMarkersAsSpaces(text);
}

void CheckSpecialParsing(const scheduler::text::Tokenizer& tokenizer, std::string_view text) {
  if (tokenizer.model() != scheduler::text::TokenizerModel::kByteLevelBpe ||
      tokenizer.pre() == scheduler::text::PreTokenizerKind::kQwen2) {
    return;  // SentencePiece adds a space per fragment; NFC works per fragment
  }
  const std::vector<int32_t> ids = tokenizer.Encode(text, false, /*parse_special=*/true);
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) FuzzFail(absl::StrCat("parsed id ", id));
  }
  const std::string decoded = tokenizer.Decode(ids, /*render_special=*/true);
  if (decoded != text) {
    FuzzFail(absl::StrCat("Decode(Encode(x, parse_special), render_special) = \"",
                          absl::CEscape(decoded), "\" but x = \"", absl::CEscape(std::string(text)),
                          "\""));
  }
}

void CheckRoundTrip(const scheduler::text::Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special=*/true);
  std::span<const int32_t> body(ids);
  if (tokenizer.add_bos()) {
    if (ids.empty() || ids[0] != tokenizer.bos_id()) FuzzFail("Encode did not start with BOS");
    body = body.subspan(1);
  }
  if (tokenizer.add_eos()) {
    if (body.empty() || body.back() != tokenizer.eos_id()) FuzzFail("Encode did not end with EOS");
    body = body.first(body.size() - 1);
  }
  CheckTextIds(tokenizer, body);
  // BOS is taken as a prefix outside the text (a hostile vocabulary may give it text).
  CheckStreaming(tokenizer, body);
  CheckSpecialParsing(tokenizer, text);
  const std::optional<std::string> expected = ExpectedDecode(tokenizer, text);
  if (!expected) return;
  const std::string decoded = tokenizer.Decode(body);
  if (decoded != *expected) {
    FuzzFail(absl::StrCat("Decode(Encode(x)) = \"", absl::CEscape(decoded), "\" but x = \"",
                          absl::CEscape(std::string(text)), "\""));
  }
  if (tokenizer.add_bos() && tokenizer.IsControl(tokenizer.bos_id()) && !tokenizer.add_eos() &&
      tokenizer.Decode(ids) != *expected) {
    FuzzFail("Decode with a control BOS in front differs from Decode without it");
  }
}

scheduler::text::Vocab ByteLevelFuzzVocab(scheduler::text::PreTokenizerKind pre) {
  using scheduler::text::ByteLevelEncode;
  using scheduler::text::TokenType;
  scheduler::text::Vocab v;
  v.model = scheduler::text::TokenizerModel::kByteLevelBpe;
  v.pre = pre;
  absl::flat_hash_map<std::string, int32_t> known;
  auto add = [&v, &known](const std::string& piece, TokenType type) {
    known.try_emplace(piece, static_cast<int32_t>(v.pieces.size()));
    v.pieces.push_back(piece);
    v.scores.push_back(0);
    v.types.push_back(type);
  };
  for (int b = 0; b < 256; ++b) {
    add(ByteLevelEncode(std::string(1, static_cast<char>(b))), TokenType::kNormal);
  }
  // Each word is spelled left to right: merge (prefix, next byte) for each byte.
  for (const char* word :
       {"the", " the", "and", " and", "ing", " once", " upon", " time", "12", "123", " \n", "\n\n",
        "  ", "\xC3\xA9", " \xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "'s", "!!"}) {
    const std::string bytes = word;
    for (size_t i = 1; i < bytes.size(); ++i) {
      const std::string left = ByteLevelEncode(bytes.substr(0, i));
      const std::string right = ByteLevelEncode(bytes.substr(i, 1));
      if (known.contains(left + right)) continue;
      v.merges.push_back(left + " " + right);
      add(left + right, TokenType::kNormal);
    }
  }
  add("<|endoftext|>", TokenType::kControl);
  add("<think>", TokenType::kUserDefined);
  v.bos_id = -1;
  v.eos_id = known["<|endoftext|>"];
  v.unk_id = -1;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

const scheduler::text::Tokenizer& ByteLevelTokenizer(scheduler::text::PreTokenizerKind pre) {
  static const auto* const tokenizers = [] {
    auto* all = new std::vector<scheduler::text::Tokenizer>();
    for (auto kind :
         {scheduler::text::PreTokenizerKind::kGpt2, scheduler::text::PreTokenizerKind::kLlama3,
          scheduler::text::PreTokenizerKind::kQwen2}) {
      auto tokenizer = scheduler::text::Tokenizer::Create(ByteLevelFuzzVocab(kind));
      if (!tokenizer.ok())
        FuzzFail(absl::StrCat("byte-level tokenizer: ", tokenizer.status().ToString()));
      all->push_back(*std::move(tokenizer));
    }
    return all;
  }();
  return (*tokenizers)[static_cast<int>(pre)];
}

}  // namespace pagoda::fuzz
