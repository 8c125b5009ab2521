// Regular expressions translated into GBNF (grammar.h): for the `regex` constraint and JSON
// Schema's `pattern`.
//
// The dialect is ECMA-262's (JSON Schema's): literals and escapes (\n \r \t \f \v \0 \xHH
// \uHHHH \u{H...} and escaped punctuation), `.` (any character but line terminators), classes
// `[...]` and `[^...]` with ranges, \d \D \w \W \s \S inside and outside classes, groups `( )`,
// `(?: )`, alternation `|`, the quantifiers `* + ?` `{m}` `{m,}` `{m,n}` (lazy `?` suffixes are
// accepted: for a language they change nothing), and the anchors `^` at the very start and `$`
// at the very end. Everything else (backreferences, lookaround, other anchors, named groups'
// references, flags) is InvalidArgument naming the construct and its byte offset.
//
// A pattern matches the whole text (the answer must be a full match), as OpenAI's and vLLM's
// regex constraints do. JSON Schema's `pattern` is a search ("abc" matches "xabcx"): the schema
// compiler wraps it in `.*( )…*` unless it is anchored.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pagoda::grammar {

struct RegexOptions {
  int32_t max_pattern_bytes = 64 * 1024;
  int32_t max_repetition = 1000;        // the largest m or n of {m,n}
  int32_t max_expanded_nodes = 100000;  // after bounded repetitions are expanded
  int32_t max_nesting = 200;            // groups inside groups

  // JSON Schema's `pattern`: the text matches when some part of it matches (a search); `^`
  // and `$` at the ends of a top-level alternative anchor it.
  bool search = false;
  // The text is the content of a JSON string literal: each character is spelled as JSON
  // writes it canonically (gbnf_text.h: raw, or \" \\ \n ... \u001f for the ones that
  // must be escaped), so `.` also matches `"` written as \".
  bool json_string = false;
  // Length bounds on the text, in characters (JSON Schema's minLength / maxLength; -1: none).
  // Enforced when the pattern's own lengths already lie within them, or when the pattern is one
  // (possibly repeated) character class anchored at both ends, whose repetition bounds are
  // then narrowed; any other combination is InvalidArgument (it cannot be enforced exactly).
  int32_t min_length = 0;
  int32_t max_length = -1;
};

// A GBNF expression (one rule body, no rule definitions of its own) matching the same
// language as `pattern` over whole texts. `rule_prefix` names any helper rules it needs (so
// several expressions can share one grammar): they are appended to *helper_rules as full
// `name ::= body` lines. (Today's expressions are self-contained and add none.)
//
// Unbounded repetitions of something that can match the empty text (`(a*)*`, `(a|)+`) are
// rewritten to repeat its non-empty matches only: the same language, without a rule that
// reaches itself without consuming a byte (which grammar.h rejects). A class that matches
// nothing (`[]`) is allowed where an alternative survives it; a pattern that matches nothing
// at all is InvalidArgument.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, std::string_view rule_prefix,
                                        std::string* helper_rules,
                                        const RegexOptions& options = {});

// A full GBNF grammar whose root matches `pattern` as a whole.
absl::StatusOr<std::string> RegexGrammar(std::string_view pattern,
                                         const RegexOptions& options = {});

}  // namespace pagoda::grammar
