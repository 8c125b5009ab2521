// The syntax tree of a parsed template: one node type with a kind and generic children, laid out
// as the reference's AST (see parser.h for which fields each kind uses).
//
// Contract: a tree is immutable after parsing and owned by its Template; the interpreter holds
// raw pointers into it only while a render runs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::scheduler::text::jinja {

enum class NodeKind {
  kText,             // text: the literal text
  kComment,          //
  kIf,               // a: test, body, alternate
  kFor,              // a: loop variable, b: iterable, body, alternate: the else block
  kBreak,            //
  kContinue,         //
  kSet,              // a: assignee, b: value (null for a block set), body
  kMacro,            // text: name, args: parameters, body
  kCallStatement,    // a: the call (kCall), args: caller parameters, body
  kFilterStatement,  // a: the filter (kIdentifier or kCall), body
  kIdentifier,       // text
  kIntegerLiteral,   // number
  kFloatLiteral,     // number
  kStringLiteral,    // text
  kArrayLiteral,     // args: items
  kTupleLiteral,     // args: items
  kObjectLiteral,    // pairs
  kMember,           // a: object, b: property, flag: computed ([...])
  kCall,             // a: callee, args
  kBinary,           // text: operator, a, b
  kUnary,            // text: operator, a
  kFilter,           // a: operand, b: the filter (kIdentifier or kCall)
  kTest,             // a: operand, text: test name, flag: negated
  kSelect,           // a: value, b: condition (`x if c` without else)
  kTernary,          // a: condition, b: if true, c: if false
  kSlice,            // a: start, b: stop, c: step (each may be null)
  kKeywordArgument,  // text: name, a: value
  kSpread,           // a: the iterable (*x)
  kKeywordSpread,    // a: the mapping (**x)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  explicit Node(NodeKind k) : kind(k) {}
  NodeKind kind;
  std::string text;
  double number = 0;
  bool flag = false;
  NodePtr a, b, c;
  NodeList body, alternate, args;
  std::vector<std::pair<NodePtr, NodePtr>> pairs;
};

}  // namespace pagoda::scheduler::text::jinja
