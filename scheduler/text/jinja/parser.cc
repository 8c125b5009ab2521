#include "scheduler/text/jinja/parser.h"

#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "scheduler/text/jinja/error.h"

namespace pagoda::scheduler::text::jinja {
namespace {

NodePtr MakeNode(NodeKind kind) { return std::make_unique<Node>(kind); }

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  NodeList Run() {
    NodeList program;
    while (current_ < tokens_.size()) program.push_back(ParseAny());
    return program;
  }

 private:
  enum class ArgsMode { kCall, kParameters };

  // Counts nesting; every recursive entry point holds one.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) {
        throw JinjaError{"template nesting deeper than the limit of " +
                         std::to_string(kMaxParseDepth)};
      }
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  const Token& Cur() const {
    if (current_ >= tokens_.size()) throw JinjaError{"Unexpected end of template"};
    return tokens_[current_];
  }
  const Token& Next() {
    const Token& t = Cur();
    ++current_;
    return t;
  }
  bool Is(TokenType type, size_t offset = 0) const {
    return current_ + offset < tokens_.size() && tokens_[current_ + offset].type == type;
  }
  bool IsIdentifier(std::string_view name, size_t offset = 0) const {
    return Is(TokenType::kIdentifier, offset) && tokens_[current_ + offset].value == name;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (!Is(TokenType::kOpenStatement) || !Is(TokenType::kIdentifier, 1)) return false;
    for (std::string_view name : names) {
      if (tokens_[current_ + 1].value == name) return true;
    }
    return false;
  }
  void Expect(TokenType type, const std::string& error) {
    if (current_ >= tokens_.size() || tokens_[current_].type != type) {
      throw JinjaError{"Parser Error: " + error};
    }
    ++current_;
  }
  void ExpectIdentifier(std::string_view name) {
    if (!IsIdentifier(name)) throw JinjaError{"Expected " + std::string(name)};
    ++current_;
  }
  void ExpectEnd(std::string_view name) {
    Expect(TokenType::kOpenStatement, "Expected {% token");
    ExpectIdentifier(name);
    Expect(TokenType::kCloseStatement, "Expected %} token");
  }
  NodeList ParseUntil(std::initializer_list<std::string_view> names) {
    NodeList body;
    while (!IsStatement(names)) body.push_back(ParseAny());
    return body;
  }

  NodePtr ParseAny();
  NodePtr ParseStatement();
  NodePtr ParseSet();
  NodePtr ParseIf();
  NodePtr ParseMacro();
  NodePtr ParseFor();
  NodePtr ParseCallStatement();
  NodePtr ParseFilterStatement();
  NodePtr ParseExpressionSequence(bool primary);
  NodePtr ParseExpression();
  NodePtr ParseLogicalOr();
  NodePtr ParseLogicalAnd();
  NodePtr ParseNot();
  NodePtr ParseComparison();
  NodePtr ParseAdditive();
  NodePtr ParseMultiplicative();
  NodePtr ParsePower();
  NodePtr ParseTest();
  NodePtr ParseFilter();
  NodePtr ParseUnarySign();
  NodePtr ParseCallMember();
  NodePtr ParseCall(NodePtr callee);
  NodeList ParseArgs(ArgsMode mode);
  NodePtr ParseMember(NodePtr object);
  NodePtr ParseSubscript();
  NodePtr ParsePrimary();
  NodePtr Binary(const std::string& op, NodePtr left, NodePtr right) {
    NodePtr node = MakeNode(NodeKind::kBinary);
    node->text = op;
    node->a = std::move(left);
    node->b = std::move(right);
    return node;
  }

  const std::vector<Token>& tokens_;
  size_t current_ = 0;
  int depth_ = 0;
};

NodePtr Parser::ParseAny() {
  DepthGuard guard(this);
  const Token& token = Cur();
  switch (token.type) {
    case TokenType::kComment:
      ++current_;
      return MakeNode(NodeKind::kComment);
    case TokenType::kText: {
      NodePtr node = MakeNode(NodeKind::kText);
      node->text = Next().value;
      return node;
    }
    case TokenType::kOpenStatement:
      return ParseStatement();
    case TokenType::kOpenExpression: {
      ++current_;
      NodePtr expression = ParseExpression();
      Expect(TokenType::kCloseExpression, "Expected closing expression token");
      return expression;
    }
    default:
      throw JinjaError{"Unexpected token: " + token.value};
  }
}

NodePtr Parser::ParseStatement() {
  Expect(TokenType::kOpenStatement, "Expected opening statement token");
  if (!Is(TokenType::kIdentifier)) throw JinjaError{"Unknown statement"};
  std::string name = Next().value;
  NodePtr result;
  if (name == "set") {
    result = ParseSet();
  } else if (name == "if") {
    result = ParseIf();
    ExpectEnd("endif");
  } else if (name == "macro") {
    result = ParseMacro();
    ExpectEnd("endmacro");
  } else if (name == "for") {
    result = ParseFor();
    ExpectEnd("endfor");
  } else if (name == "call") {
    result = ParseCallStatement();
  } else if (name == "break" || name == "continue") {
    Expect(TokenType::kCloseStatement, "Expected closing statement token");
    result = MakeNode(name == "break" ? NodeKind::kBreak : NodeKind::kContinue);
  } else if (name == "filter") {
    result = ParseFilterStatement();
  } else {
    throw JinjaError{"Unknown statement type: " + name};
  }
  return result;
}

NodePtr Parser::ParseSet() {
  NodePtr node = MakeNode(NodeKind::kSet);
  node->a = ParseExpressionSequence(false);
  if (Is(TokenType::kEquals)) {
    ++current_;
    node->b = ParseExpressionSequence(false);
  } else {
    Expect(TokenType::kCloseStatement, "Expected %} token");
    node->body = ParseUntil({"endset"});
    Expect(TokenType::kOpenStatement, "Expected {% token");
    ExpectIdentifier("endset");
  }
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  return node;
}

NodePtr Parser::ParseIf() {
  DepthGuard guard(this);
  NodePtr node = MakeNode(NodeKind::kIf);
  node->a = ParseExpression();
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  node->body = ParseUntil({"elif", "else", "endif"});
  if (IsStatement({"elif"})) {
    current_ += 2;
    node->alternate.push_back(ParseIf());
  } else if (IsStatement({"else"})) {
    current_ += 2;
    Expect(TokenType::kCloseStatement, "Expected closing statement token");
    node->alternate = ParseUntil({"endif"});
  }
  return node;
}

NodePtr Parser::ParseMacro() {
  NodePtr node = MakeNode(NodeKind::kMacro);
  NodePtr name = ParsePrimary();
  if (name->kind != NodeKind::kIdentifier) {
    throw JinjaError{"Expected identifier following macro statement"};
  }
  node->text = name->text;
  node->args = ParseArgs(ArgsMode::kParameters);
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  node->body = ParseUntil({"endmacro"});
  return node;
}

NodePtr Parser::ParseFor() {
  NodePtr node = MakeNode(NodeKind::kFor);
  node->a = ParseExpressionSequence(true);
  if (node->a->kind != NodeKind::kIdentifier && node->a->kind != NodeKind::kTupleLiteral) {
    throw JinjaError{"Expected identifier/tuple for the loop variable"};
  }
  if (!IsIdentifier("in")) throw JinjaError{"Expected `in` keyword following loop variable"};
  ++current_;
  node->b = ParseExpression();
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  node->body = ParseUntil({"endfor", "else"});
  if (IsStatement({"else"})) {
    current_ += 2;
    Expect(TokenType::kCloseStatement, "Expected closing statement token");
    node->alternate = ParseUntil({"endfor"});
  }
  return node;
}

NodePtr Parser::ParseCallStatement() {
  NodePtr node = MakeNode(NodeKind::kCallStatement);
  if (Is(TokenType::kOpenParen)) node->args = ParseArgs(ArgsMode::kParameters);
  NodePtr callee = ParsePrimary();
  if (callee->kind != NodeKind::kIdentifier) {
    throw JinjaError{"Expected identifier following call statement"};
  }
  NodePtr call = MakeNode(NodeKind::kCall);
  call->a = std::move(callee);
  call->args = ParseArgs(ArgsMode::kCall);
  node->a = std::move(call);
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  node->body = ParseUntil({"endcall"});
  ExpectEnd("endcall");
  return node;
}

NodePtr Parser::ParseFilterStatement() {
  NodePtr node = MakeNode(NodeKind::kFilterStatement);
  NodePtr filter = ParsePrimary();
  if (filter->kind == NodeKind::kIdentifier && Is(TokenType::kOpenParen)) {
    filter = ParseCall(std::move(filter));
  }
  node->a = std::move(filter);
  Expect(TokenType::kCloseStatement, "Expected closing statement token");
  node->body = ParseUntil({"endfilter"});
  ExpectEnd("endfilter");
  return node;
}

NodePtr Parser::ParseExpressionSequence(bool primary) {
  DepthGuard guard(this);
  NodePtr first = primary ? ParsePrimary() : ParseExpression();
  if (!Is(TokenType::kComma)) return first;
  NodePtr tuple = MakeNode(NodeKind::kTupleLiteral);
  tuple->args.push_back(std::move(first));
  while (true) {
    ++current_;
    tuple->args.push_back(primary ? ParsePrimary() : ParseExpression());
    if (!Is(TokenType::kComma)) break;
  }
  return tuple;
}

NodePtr Parser::ParseExpression() {
  DepthGuard guard(this);
  NodePtr a = ParseLogicalOr();
  if (!IsIdentifier("if")) return a;
  ++current_;
  NodePtr test = ParseLogicalOr();
  if (IsIdentifier("else")) {
    ++current_;
    NodePtr node = MakeNode(NodeKind::kTernary);
    node->a = std::move(test);
    node->b = std::move(a);
    node->c = ParseExpression();
    return node;
  }
  NodePtr node = MakeNode(NodeKind::kSelect);
  node->a = std::move(a);
  node->b = std::move(test);
  return node;
}

NodePtr Parser::ParseLogicalOr() {
  NodePtr left = ParseLogicalAnd();
  while (IsIdentifier("or")) {
    ++current_;
    left = Binary("or", std::move(left), ParseLogicalAnd());
  }
  return left;
}

NodePtr Parser::ParseLogicalAnd() {
  NodePtr left = ParseNot();
  while (IsIdentifier("and")) {
    ++current_;
    left = Binary("and", std::move(left), ParseNot());
  }
  return left;
}

NodePtr Parser::ParseNot() {
  DepthGuard guard(this);
  NodePtr result;
  while (IsIdentifier("not")) {
    ++current_;
    NodePtr node = MakeNode(NodeKind::kUnary);
    node->text = "not";
    node->a = ParseNot();
    result = std::move(node);
  }
  return result ? std::move(result) : ParseComparison();
}

NodePtr Parser::ParseComparison() {
  NodePtr left = ParseAdditive();
  while (true) {
    std::string op;
    if (IsIdentifier("not") && IsIdentifier("in", 1)) {
      op = "not in";
      current_ += 2;
    } else if (IsIdentifier("in")) {
      op = "in";
      ++current_;
    } else if (Is(TokenType::kComparisonBinaryOperator)) {
      op = Next().value;
    } else {
      break;
    }
    left = Binary(op, std::move(left), ParseAdditive());
  }
  return left;
}

NodePtr Parser::ParseAdditive() {
  NodePtr left = ParseMultiplicative();
  while (Is(TokenType::kAdditiveBinaryOperator)) {
    std::string op = Next().value;
    left = Binary(op, std::move(left), ParseMultiplicative());
  }
  return left;
}

NodePtr Parser::ParseMultiplicative() {
  NodePtr left = ParsePower();
  while (Is(TokenType::kMultiplicativeBinaryOperator)) {
    std::string op = Next().value;
    left = Binary(op, std::move(left), ParsePower());
  }
  return left;
}

NodePtr Parser::ParsePower() {
  NodePtr left = ParseTest();
  while (Is(TokenType::kExponentiationBinaryOperator)) {
    ++current_;
    left = Binary("**", std::move(left), ParseTest());
  }
  return left;
}

NodePtr Parser::ParseTest() {
  NodePtr operand = ParseFilter();
  while (IsIdentifier("is")) {
    ++current_;
    bool negate = IsIdentifier("not");
    if (negate) ++current_;
    NodePtr test = ParsePrimary();
    if (test->kind != NodeKind::kIdentifier) throw JinjaError{"Expected identifier for the test"};
    NodePtr node = MakeNode(NodeKind::kTest);
    node->a = std::move(operand);
    node->text = test->text;
    node->flag = negate;
    operand = std::move(node);
  }
  return operand;
}

NodePtr Parser::ParseFilter() {
  NodePtr operand = ParseUnarySign();
  while (Is(TokenType::kPipe)) {
    ++current_;
    NodePtr filter = ParsePrimary();
    if (filter->kind != NodeKind::kIdentifier) {
      throw JinjaError{"Expected identifier for the filter"};
    }
    if (Is(TokenType::kOpenParen)) filter = ParseCall(std::move(filter));
    NodePtr node = MakeNode(NodeKind::kFilter);
    node->a = std::move(operand);
    node->b = std::move(filter);
    operand = std::move(node);
  }
  return operand;
}

NodePtr Parser::ParseUnarySign() {
  DepthGuard guard(this);
  if ((Is(TokenType::kUnaryOperator) || Is(TokenType::kAdditiveBinaryOperator)) &&
      (Cur().value == "-" || Cur().value == "+")) {
    NodePtr node = MakeNode(NodeKind::kUnary);
    node->text = Next().value;
    node->a = ParseUnarySign();
    return node;
  }
  return ParseCallMember();
}

NodePtr Parser::ParseCallMember() {
  NodePtr member = ParseMember(ParsePrimary());
  if (Is(TokenType::kOpenParen)) return ParseCall(std::move(member));
  return member;
}

NodePtr Parser::ParseCall(NodePtr callee) {
  DepthGuard guard(this);
  NodePtr call = MakeNode(NodeKind::kCall);
  call->a = std::move(callee);
  call->args = ParseArgs(ArgsMode::kCall);
  NodePtr expression = ParseMember(std::move(call));
  if (Is(TokenType::kOpenParen)) expression = ParseCall(std::move(expression));
  return expression;
}

NodeList Parser::ParseArgs(ArgsMode mode) {
  DepthGuard guard(this);
  Expect(TokenType::kOpenParen, "Expected opening parenthesis for arguments list");
  NodeList args;
  std::set<std::string> names;
  bool saw_keyword = false, saw_spread = false;
  bool parameters = mode == ArgsMode::kParameters;
  while (!Is(TokenType::kCloseParen)) {
    bool keyword_spread = Is(TokenType::kExponentiationBinaryOperator);
    bool spread = Is(TokenType::kMultiplicativeBinaryOperator) && Cur().value == "*";
    if (parameters && (keyword_spread || spread)) {
      throw JinjaError{"Argument unpacking is not allowed in parameter declarations"};
    }
    if (keyword_spread) {
      ++current_;
      NodePtr node = MakeNode(NodeKind::kKeywordSpread);
      node->a = ParseExpression();
      args.push_back(std::move(node));
      if (Is(TokenType::kComma)) ++current_;
      if (!Is(TokenType::kCloseParen)) {
        throw JinjaError{
            "Expected closing parenthesis: `**` must be applied to the final argument"};
      }
      break;
    }
    NodePtr argument;
    if (spread) {
      if (saw_spread) throw JinjaError{"Only one `*` argument unpacking is allowed"};
      saw_spread = true;
      ++current_;
      argument = MakeNode(NodeKind::kSpread);
      argument->a = ParseExpression();
    } else {
      argument = ParseExpression();
      if (Is(TokenType::kEquals)) {
        ++current_;
        if (argument->kind != NodeKind::kIdentifier) {
          throw JinjaError{parameters ? "Expected identifier for parameter declaration"
                                      : "Expected identifier for keyword argument"};
        }
        NodePtr keyword = MakeNode(NodeKind::kKeywordArgument);
        keyword->text = argument->text;
        keyword->a = ParseExpression();
        argument = std::move(keyword);
      }
      if (parameters) {
        if (argument->kind != NodeKind::kIdentifier &&
            argument->kind != NodeKind::kKeywordArgument) {
          throw JinjaError{"Expected identifier for parameter declaration"};
        }
        if (!names.insert(argument->text).second) {
          throw JinjaError{"Duplicate parameter name: " + argument->text};
        }
      }
      if (argument->kind == NodeKind::kKeywordArgument) {
        saw_keyword = true;
      } else if (saw_keyword) {
        throw JinjaError{parameters ? "Non-default argument follows default argument"
                                    : "Positional arguments must come before keyword arguments"};
      } else if (saw_spread) {
        throw JinjaError{"Positional arguments must not follow `*` argument unpacking"};
      }
    }
    args.push_back(std::move(argument));
    if (Is(TokenType::kComma)) ++current_;
  }
  Expect(TokenType::kCloseParen, "Expected closing parenthesis for arguments list");
  return args;
}

// [expr] or a slice [a:b:c] (each part optional).
NodePtr Parser::ParseSubscript() {
  std::vector<NodePtr> slices;
  bool is_slice = false;
  while (!Is(TokenType::kCloseSquareBracket)) {
    if (Is(TokenType::kColon)) {
      slices.push_back(nullptr);
      ++current_;
      is_slice = true;
    } else {
      slices.push_back(ParseExpression());
      if (Is(TokenType::kColon)) {
        ++current_;
        is_slice = true;
      }
    }
  }
  if (slices.empty())
    throw JinjaError{"Expected at least one argument for member/slice expression"};
  if (!is_slice) return std::move(slices[0]);
  if (slices.size() > 3) throw JinjaError{"Expected 0-3 arguments for slice expression"};
  NodePtr node = MakeNode(NodeKind::kSlice);
  node->a = std::move(slices[0]);
  if (slices.size() > 1) node->b = std::move(slices[1]);
  if (slices.size() > 2) node->c = std::move(slices[2]);
  return node;
}

NodePtr Parser::ParseMember(NodePtr object) {
  while (Is(TokenType::kDot) || Is(TokenType::kOpenSquareBracket)) {
    DepthGuard guard(this);
    bool computed = Next().type == TokenType::kOpenSquareBracket;
    NodePtr property;
    if (computed) {
      property = ParseSubscript();
      Expect(TokenType::kCloseSquareBracket, "Expected closing square bracket");
    } else {
      property = ParsePrimary();
      if (property->kind != NodeKind::kIdentifier && property->kind != NodeKind::kIntegerLiteral) {
        throw JinjaError{"Expected identifier or integer following dot operator"};
      }
    }
    NodePtr node = MakeNode(NodeKind::kMember);
    node->a = std::move(object);
    node->b = std::move(property);
    node->flag = computed;
    object = std::move(node);
  }
  return object;
}

NodePtr Parser::ParsePrimary() {
  DepthGuard guard(this);
  const Token& token = Next();
  switch (token.type) {
    case TokenType::kNumericLiteral: {
      bool is_float = token.value.find('.') != std::string::npos;
      NodePtr node = MakeNode(is_float ? NodeKind::kFloatLiteral : NodeKind::kIntegerLiteral);
      node->number = std::strtod(token.value.c_str(), nullptr);
      return node;
    }
    case TokenType::kStringLiteral: {
      NodePtr node = MakeNode(NodeKind::kStringLiteral);
      node->text = token.value;
      while (Is(TokenType::kStringLiteral)) node->text += Next().value;
      return node;
    }
    case TokenType::kIdentifier: {
      NodePtr node = MakeNode(NodeKind::kIdentifier);
      node->text = token.value;
      return node;
    }
    case TokenType::kOpenParen: {
      NodePtr expression = ParseExpressionSequence(false);
      Expect(TokenType::kCloseParen, "Expected closing parenthesis");
      return expression;
    }
    case TokenType::kOpenSquareBracket: {
      NodePtr node = MakeNode(NodeKind::kArrayLiteral);
      while (!Is(TokenType::kCloseSquareBracket)) {
        node->args.push_back(ParseExpression());
        if (Is(TokenType::kComma)) ++current_;
      }
      ++current_;
      return node;
    }
    case TokenType::kOpenCurlyBracket: {
      NodePtr node = MakeNode(NodeKind::kObjectLiteral);
      while (!Is(TokenType::kCloseCurlyBracket)) {
        NodePtr key = ParseExpression();
        Expect(TokenType::kColon, "Expected colon between key and value in object literal");
        NodePtr value = ParseExpression();
        node->pairs.emplace_back(std::move(key), std::move(value));
        if (Is(TokenType::kComma)) ++current_;
      }
      ++current_;
      return node;
    }
    default:
      throw JinjaError{"Unexpected token: " + token.value};
  }
}

}  // namespace

NodeList Parse(const std::vector<Token>& tokens) { return Parser(tokens).Run(); }

}  // namespace pagoda::scheduler::text::jinja
