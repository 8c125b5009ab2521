// Tokenizer of the Jinja engine: the reference's preprocessing (trailing newline dropped,
// lstrip_blocks and trim_blocks on, the transformers-only {% generation %} tag removed) and its
// token rules, including {%- -%} {{- -}} {#- -#} whitespace control.
//
// Contract: Tokenize never reads past its input; it throws JinjaError on a malformed template
// (unterminated string or comment, unknown escape, unexpected character), as the reference does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::scheduler::text::jinja {

enum class TokenType {
  kText,
  kNumericLiteral,
  kStringLiteral,
  kIdentifier,
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kOpenSquareBracket,
  kCloseSquareBracket,
  kOpenCurlyBracket,
  kCloseCurlyBracket,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditiveBinaryOperator,
  kMultiplicativeBinaryOperator,
  kExponentiationBinaryOperator,
  kComparisonBinaryOperator,
  kUnaryOperator,
  kComment,
};

struct Token {
  std::string value;  // UTF-8
  TokenType type;
};

// Applies the reference's preprocessing to `source` (exposed for tests).
std::u32string Preprocess(std::u32string source);

std::vector<Token> Tokenize(std::string_view source);

}  // namespace pagoda::scheduler::text::jinja
