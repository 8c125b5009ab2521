// JavaScript string semantics over UTF-8 std::strings, as @huggingface/jinja (which runs on
// JavaScript) applies them: lengths and indices count UTF-16 code units, whitespace is
// ECMAScript's WhiteSpace + LineTerminator set, case mapping is Unicode's default (ICU root).
//
// Contract: inputs may be ill-formed UTF-8 (each maximal ill-formed subpart reads as U+FFFD);
// outputs are well-formed UTF-8 (a lone surrogate produced by cutting a pair becomes U+FFFD,
// which is how Node writes such a string out).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::scheduler::text::jinja {

std::u16string ToUtf16(std::string_view utf8);
std::string FromUtf16(std::u16string_view utf16);
std::vector<char32_t> ToCodePoints(std::string_view utf8);
std::string FromCodePoint(char32_t code_point);

size_t Utf16Length(std::string_view utf8);
// String.prototype.at(index): the code unit at index (negative counts from the end).
std::optional<std::string> Utf16At(std::string_view utf8, double index);

bool IsJsWhitespace(char32_t c);  // /\s/
std::string JsTrim(std::string_view s);
std::string JsTrimStart(std::string_view s);
std::string JsTrimEnd(std::string_view s);

std::string JsToUpper(std::string_view s);
std::string JsToLower(std::string_view s);
// /\b\w/g uppercased (ASCII word characters after a non-word character; the rest unchanged).
std::string JsTitleCase(std::string_view s);
// The first UTF-16 unit uppercased, the rest unchanged.
std::string JsCapitalize(std::string_view s);

// parseInt(s, 10) and parseFloat(s); nullopt for NaN.
std::optional<double> JsParseInt(std::string_view s);
std::optional<double> JsParseFloat(std::string_view s);

// JSON.stringify(string), optionally with every UTF-16 unit >= 0x7F written as \uXXXX.
std::string JsonQuote(std::string_view s, bool ensure_ascii);

// The first occurrence of `needle` in `haystack` at or after `from` (npos if none), in time
// linear in their lengths whatever the input (so hostile strings cannot make it quadratic).
size_t FindLinear(std::string_view haystack, std::string_view needle, size_t from = 0);

// Python's str.replace(old, new, count) as the reference implements it (count < 0: all).
std::string JsReplace(std::string_view s, std::string_view from, std::string_view to, double count,
                      size_t max_bytes);

}  // namespace pagoda::scheduler::text::jinja
