#include "tests/fuzz/fuzz_support.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/gguf_reader.h"
#include "common/synthetic_vocab.h"
#include "common/utf8.h"
#include "scheduler/text/detokenizer.h"
#include "scheduler/text/gguf_vocab.h"

namespace pagoda::fuzz {
namespace {

std::unique_ptr<scheduler::text::Tokenizer> BuildSyntheticTokenizer() {
  auto synthetic = common::BuildSyntheticVocab(kSyntheticFuzzVocab, /*seed=*/7);
  if (!synthetic.ok()) {
    FuzzFail(absl::StrCat("synthetic vocabulary: ", synthetic.status().ToString()));
  }
  scheduler::text::Vocab vocab;
  vocab.pieces = std::move(synthetic->tokens);
  vocab.scores = std::move(synthetic->scores);
  for (int32_t type : synthetic->token_types) {
    vocab.types.push_back(static_cast<scheduler::text::TokenType>(type));
  }
  vocab.bos_id = common::kSyntheticBosId;
  vocab.eos_id = common::kSyntheticEosId;
  vocab.unk_id = common::kSyntheticUnkId;
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

void CheckRoundTrip(const scheduler::text::Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int32_t> ids = tokenizer.Encode(text, /*add_bos=*/true);
  if (ids.empty() || ids[0] != tokenizer.bos_id()) FuzzFail("Encode did not start with BOS");
  for (size_t i = 1; i < ids.size(); ++i) {
    const scheduler::text::TokenType type = tokenizer.Type(ids[i]);
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size() ||
        type == scheduler::text::TokenType::kControl ||
        type == scheduler::text::TokenType::kUnknown ||
        type == scheduler::text::TokenType::kUnused) {
      FuzzFail(absl::StrFormat("Encode produced id %d (type %d) at %d; vocabulary size %d", ids[i],
                               static_cast<int>(type), i, tokenizer.vocab_size()));
    }
  }
  // BOS is taken as a prefix outside the text (a hostile vocabulary may give it text).
  const std::span<const int32_t> body = std::span<const int32_t>(ids).subspan(1);
  CheckStreaming(tokenizer, body);
  // The round trip needs "▁" as a mergeable piece (see tokenizer.h).
  if (!HasSpacePiece(tokenizer)) return;
  const std::string decoded = tokenizer.Decode(body);
  const std::string expected = SpaceMarkersAsSpaces(text);
  if (decoded != expected) {
    FuzzFail(absl::StrCat("Decode(Encode(x)) = \"", absl::CEscape(decoded), "\" but x = \"",
                          absl::CEscape(std::string(text)), "\""));
  }
  if (tokenizer.IsControl(tokenizer.bos_id()) && tokenizer.Decode(ids) != expected) {
    FuzzFail("Decode with a control BOS in front differs from Decode without it");
  }
}

}  // namespace pagoda::fuzz
