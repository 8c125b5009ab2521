// UTF-8 validation and scanning.
//
// Contract: these functions look at raw bytes and never allocate except SanitizeUtf8. "Valid"
// means well-formed UTF-8 per RFC 3629 / Unicode 15 table 3-7: shortest form only (no overlongs),
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no bytes 0xC0, 0xC1, 0xF5..0xFF.
// Ill-formed input is replaced with U+FFFD using the Unicode "maximal subpart" practice (one
// U+FFFD per maximal prefix of a would-be character), the same choice as ICU, Python and WHATWG.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda::common {

// The replacement character U+FFFD encoded as UTF-8.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// The longest possible incomplete tail of a UTF-8 string (a 4-byte character missing one byte).
inline constexpr size_t kMaxUtf8IncompleteLength = 3;

enum class Utf8CharKind {
  kValid,       // `length` bytes (1..4) form one well-formed character.
  kIncomplete,  // all `length` bytes (1..3) are a valid prefix but the input ends too early.
  kInvalid,     // `length` bytes (1..3) are a maximal ill-formed subpart: one U+FFFD replaces them.
};

struct Utf8Char {
  Utf8CharKind kind;
  size_t length;
};

// Classifies the character that starts at text[0]. Requires !text.empty().
Utf8Char ScanUtf8Char(std::string_view text);

// True when `text` is entirely well-formed UTF-8 (the empty string is valid).
bool IsValidUtf8(std::string_view text);

// Number of bytes (0..3) at the end of `text` that form a valid but incomplete character: the
// bytes a streaming writer must hold back until more input arrives.
size_t Utf8IncompleteSuffixLength(std::string_view text);

// `text` with every ill-formed subpart (including an incomplete tail) replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view text);

// Appends the UTF-8 encoding of `code_point` to `out`. Requires a Unicode scalar value
// (<= U+10FFFF and not a surrogate).
void AppendUtf8(char32_t code_point, std::string& out);

}  // namespace pagoda::common
