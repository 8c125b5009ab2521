// Pieces of GBNF text shared by the JSON Schema and regex translators (json_schema.h,
// regex.h): sets of code points, literals and classes spelled in the dialect grammar.h
// compiles, and the canonical JSON spelling of a character inside a string literal.
//
// Contract:
//  * Everything emitted uses only the dialect's literals "..." and classes [...] / [^...]
//    with the escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH; code points above U+FFFF are written
//    as their raw UTF-8 bytes. The output never holds a raw control character or newline, so a
//    rule stays on one line.
//  * A CodePointSet never holds a surrogate (U+D800..U+DFFF): UTF-8 cannot encode them, so no
//    grammar could match them anyway.
//  * The JSON spelling is canonical (what JSON.stringify and nlohmann's dump() write): a
//    character is written raw unless it is `"`, `\` or a control character below U+0020;
//    those are \" \\ \b \f \n \r \t or \u00xx (lower-case hex). One spelling per character
//    means a set of strings (e.g. "every key but these") is a set of spellings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::grammar::internal {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of Unicode scalar values as sorted, disjoint, non-adjacent closed ranges.
class CodePointSet {
 public:
  CodePointSet() = default;
  static CodePointSet Of(uint32_t c) { return Range(c, c); }
  static CodePointSet Range(uint32_t lo, uint32_t hi);
  static CodePointSet All();  // every scalar value

  void Add(uint32_t lo, uint32_t hi);
  void Add(const CodePointSet& other);
  CodePointSet Complement() const;  // within All()
  CodePointSet Intersect(const CodePointSet& other) const;
  CodePointSet Minus(const CodePointSet& other) const;
  bool Contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  // The one code point of a singleton set, or -1.
  int64_t Single() const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  bool operator==(const CodePointSet&) const = default;

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// `s` as a GBNF literal, quotes included ("" for the empty string). `s` must be valid UTF-8.
std::string GbnfLiteral(std::string_view s);

// The GBNF for one character of `set` (a literal for a singleton, else a class, negated when
// that is shorter). `set` must not be empty.
std::string GbnfCharClass(const CodePointSet& set);

// The GBNF for the canonical JSON spelling (see above) of one character of `set`, inside a
// string literal: a class for the characters written raw, alternatives for the escaped ones.
// `set` must not be empty.
std::string JsonCharGbnf(const CodePointSet& set);

// The canonical JSON spelling of `s` (valid UTF-8), quotes included.
std::string JsonQuote(std::string_view s);

// Decodes one UTF-8 sequence of `s` at `*pos` and advances it; -1 (and no advance) when the
// bytes there are not well-formed UTF-8.
int64_t DecodeUtf8(std::string_view s, size_t* pos);
void AppendUtf8(uint32_t c, std::string* out);

}  // namespace pagoda::grammar::internal

namespace pagoda::grammar {

// `s` as a GBNF literal, quotes included, for code outside this module that writes GBNF of its
// own (the scheduler's choices and tool calls). `s` must be valid UTF-8.
inline std::string GbnfLiteral(std::string_view s) { return internal::GbnfLiteral(s); }

}  // namespace pagoda::grammar
