// Parser of the Jinja engine: tokens (lexer.h) to a syntax tree (ast.h), with the reference's
// grammar and operator precedence (lowest first): `x if c else y`, or, and, not, comparisons and
// `in`/`not in`, + - ~, * / // %, **, `is` tests, | filters, unary signs, calls and member access.
//
// Contract: Parse throws JinjaError on a syntax error; it also refuses nesting deeper than
// kMaxParseDepth (so no template can exhaust the stack, here or when the tree is evaluated).
#pragma once

#include <vector>

#include "scheduler/text/jinja/ast.h"
#include "scheduler/text/jinja/lexer.h"

namespace pagoda::scheduler::text::jinja {

inline constexpr int kMaxParseDepth = 200;

// The template's top-level statements.
NodeList Parse(const std::vector<Token>& tokens);

}  // namespace pagoda::scheduler::text::jinja
