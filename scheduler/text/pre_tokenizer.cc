#include "scheduler/text/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "unicode/bytestream.h"
#include "unicode/normalizer2.h"
#include "unicode/stringpiece.h"

namespace pagoda::scheduler::text {
namespace {

// The patterns of the models' tokenizer.json "Split" pre-tokenizers.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Pattern[] = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
                                 R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};

// Accepted tokenizer.ggml.pre values; the first name of each kind is its canonical one.
constexpr std::array<NamedKind, 7> kNames = {{
    {"gpt2", PreTokenizerKind::kGpt2},
    {"gpt-2", PreTokenizerKind::kGpt2},
    {"default", PreTokenizerKind::kGpt2},
    {"llama-bpe", PreTokenizerKind::kLlama3},
    {"llama3", PreTokenizerKind::kLlama3},
    {"llama-v3", PreTokenizerKind::kLlama3},
    {"qwen2", PreTokenizerKind::kQwen2},
}};

}  // namespace

std::string_view PreTokenizerPattern(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kLlama3:
      return kLlama3Pattern;
    case PreTokenizerKind::kQwen2:
      return kQwen2Pattern;
    case PreTokenizerKind::kGpt2:
      break;
  }
  return kGpt2Pattern;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

absl::StatusOr<PreTokenizerKind> ParsePreTokenizerName(std::string_view name) {
  for (const NamedKind& n : kNames) {
    if (n.name == name) return n.kind;
  }
  std::string supported;
  for (const NamedKind& n : kNames)
    absl::StrAppend(&supported, supported.empty() ? "" : ", ", std::string(n.name));
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.pre is \"", std::string(name),
                                                 "\", a pre-tokenizer Pagoda does not implement; "
                                                 "supported: ",
                                                 supported));
}

std::string_view PreTokenizerName(PreTokenizerKind kind) {
  for (const NamedKind& n : kNames) {
    if (n.kind == kind) return n.name;
  }
  return "gpt2";
}

absl::StatusOr<PreTokenizer> PreTokenizer::Create(PreTokenizerKind kind) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto regex = std::make_unique<Regex>();
  regex->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(PreTokenizerPattern(kind).data()),
                    PreTokenizerPattern(kind).size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (regex->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InternalError(absl::StrCat("pre-tokenizer ", std::string(PreTokenizerName(kind)),
                                            ": PCRE2 cannot compile its pattern at offset ", offset,
                                            ": ", reinterpret_cast<char*>(message)));
  }
  // JIT is an optimization only: without it (unsupported CPU) the interpreter matches the same.
  pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
  return PreTokenizer(kind, std::move(regex));
}

PreTokenizer::PreTokenizer(PreTokenizerKind kind, std::unique_ptr<Regex> regex)
    : kind_(kind), regex_(std::move(regex)) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::Normalize(std::string_view text) const {
  if (kind_ != PreTokenizerKind::kQwen2 || !common::IsValidUtf8(text)) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) return std::string(text);
  const icu::StringPiece input(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(input, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, input, sink, nullptr, status);
  return U_SUCCESS(status) ? out : std::string(text);
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& out) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;  // text[0, done) is in `out`
  size_t start = 0;
  while (start < text.size()) {
    int rc = pcre2_match(regex_->code, subject, text.size(), start, 0, match, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // A resource limit of the JIT (its stack): the interpreter matches the same, on the heap.
      rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_JIT, match, nullptr);
    }
    if (rc < 0) break;  // no further match (or a limit even so: the rest stays one piece)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end <= begin) {  // an empty match (none of the patterns has one): look further on
      start = begin + 1;
      continue;
    }
    if (begin > done) out.push_back(text.substr(done, begin - done));
    out.push_back(text.substr(begin, end - begin));
    done = start = end;
  }
  if (done < text.size()) out.push_back(text.substr(done));
  pcre2_match_data_free(match);
}

}  // namespace pagoda::scheduler::text
