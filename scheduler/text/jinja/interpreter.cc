#include "scheduler/text/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/python_string.h"

namespace pagoda::scheduler::text::jinja {
namespace {

// break / continue unwind to the innermost loop (through macro calls, as in the reference).
struct BreakSignal {};
struct ContinueSignal {};

// Whether a node is an expression (`{{ }}` prints its value) rather than a statement.
bool IsExpression(NodeKind kind) {
  switch (kind) {
    case NodeKind::kComment:
    case NodeKind::kSet:
    case NodeKind::kMacro:
    case NodeKind::kIf:
    case NodeKind::kFor:
    case NodeKind::kBreak:
    case NodeKind::kContinue:
    case NodeKind::kCallStatement:
    case NodeKind::kFilterStatement:
      return false;
    default:
      return true;
  }
}

// type(v).__name__ of the Python value underneath, for the Python dialect's error messages.
const char* PythonTypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNull:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kObject:
    case Kind::kKwargs:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "Macro";
  }
  return "object";
}

bool IsNumericLike(const Value& v) {
  return v.kind() == Kind::kInt || v.kind() == Kind::kFloat || v.kind() == Kind::kBool;
}

// Whether `kwargs` / `varargs` is read anywhere in a macro body (the reference's finer
// declaration-order analysis only matters for templates that shadow those names).
void FindSpecialNames(const Node* node, bool* kwargs, bool* varargs) {
  if (node == nullptr) return;
  if (node->kind == NodeKind::kIdentifier) {
    if (node->text == "kwargs") *kwargs = true;
    if (node->text == "varargs") *varargs = true;
  }
  for (const Node* child : {node->a.get(), node->b.get(), node->c.get()}) {
    FindSpecialNames(child, kwargs, varargs);
  }
  for (const NodeList* list : {&node->body, &node->alternate, &node->args}) {
    for (const NodePtr& child : *list) FindSpecialNames(child.get(), kwargs, varargs);
  }
  for (const auto& [key, value] : node->pairs) {
    FindSpecialNames(key.get(), kwargs, varargs);
    FindSpecialNames(value.get(), kwargs, varargs);
  }
}

std::pair<bool, bool> SpecialNames(const NodeList& body) {
  bool kwargs = false, varargs = false;
  for (const NodePtr& node : body) FindSpecialNames(node.get(), &kwargs, &varargs);
  return {kwargs, varargs};
}

double SliceIndex(const Value& v, bool* present) {
  *present = !v.is_undefined();
  return v.number();
}

template <typename T>
std::vector<T> JsSlice(const std::vector<T>& items, const Value& start_v, const Value& stop_v,
                       const Value& step_v) {
  bool has_start, has_stop;
  double start = SliceIndex(start_v, &has_start);
  double stop = SliceIndex(stop_v, &has_stop);
  bool has_step = !step_v.is_undefined();
  double step = has_step ? step_v.number() : 1;
  double n = static_cast<double>(items.size());
  std::vector<T> out;
  if (step >= 0) {
    start = !has_start ? 0 : start < 0 ? std::max(n + start, 0.0) : std::min(start, n);
    stop = !has_stop ? n : stop < 0 ? std::max(n + stop, 0.0) : std::min(stop, n);
    if (step == 0) return out;
    for (double i = start; i < stop && i >= 0; i += step)
      out.push_back(items[static_cast<size_t>(i)]);
  } else {
    start = !has_start ? n - 1 : start < 0 ? std::max(n + start, -1.0) : std::min(start, n - 1);
    stop = !has_stop ? -1 : stop < -1 ? std::max(n + stop, -1.0) : std::min(stop, n - 1);
    for (double i = start; i > stop && i < n; i += step)
      out.push_back(items[static_cast<size_t>(i)]);
  }
  return out;
}

// Assigns the loop variable (a name, or a tuple of names unpacking an array).
void BindLoopVariable(const Node& loopvar, Scope& target, const Value& current) {
  if (loopvar.kind == NodeKind::kIdentifier) {
    target.Set(loopvar.text, current);
    return;
  }
  if (current.kind() != Kind::kArray) {
    throw JinjaError{std::string("Cannot unpack non-iterable type: ") + current.TypeName()};
  }
  if (loopvar.args.size() != current.array().size()) {
    throw JinjaError{std::string("Too ") +
                     (loopvar.args.size() > current.array().size() ? "few" : "many") +
                     " items to unpack"};
  }
  for (size_t j = 0; j < loopvar.args.size(); ++j) {
    if (loopvar.args[j]->kind != NodeKind::kIdentifier) {
      throw JinjaError{"Cannot unpack non-identifier type"};
    }
    target.Set(loopvar.args[j]->text, current.array()[j]);
  }
}

// The `loop` variable of iteration i.
Value LoopObject(const Array& items, size_t i) {
  auto loop = std::make_shared<Object>();
  const double n = static_cast<double>(items.size());
  const double d = static_cast<double>(i);
  loop->Set("index", Value::Int(d + 1));
  loop->Set("index0", Value::Int(d));
  loop->Set("revindex", Value::Int(n - d));
  loop->Set("revindex0", Value::Int(n - d - 1));
  loop->Set("first", Value::Bool(i == 0));
  loop->Set("last", Value::Bool(i + 1 == items.size()));
  loop->Set("length", Value::Int(n));
  loop->Set("previtem", i > 0 ? items[i - 1] : Value());
  loop->Set("nextitem", i + 1 < items.size() ? items[i + 1] : Value());
  return Value::MakeObject(std::move(loop));
}

}  // namespace

Value Scope::Lookup(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_) {
    auto it = s->variables_.find(absl::string_view(name.data(), name.size()));
    if (it != s->variables_.end()) return it->second;
  }
  return Value();
}

Interpreter::Interpreter(const RenderLimits& limits, std::chrono::system_clock::time_point now,
                         Dialect dialect)
    : limits_(limits), now_(now), dialect_(dialect) {
  globals_ = &NewScope(nullptr);
}

Interpreter::~Interpreter() {
  for (const Value& ns : namespaces_) {
    Object cleared;
    std::swap(ns.mutable_object(), cleared);
  }
}

Scope& Interpreter::NewScope(Scope* parent) {
  Charge(1);
  return scopes_.emplace_back(parent);
}

void Interpreter::Charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    throw JinjaError{"template exceeded its work limit of " + std::to_string(limits_.max_steps) +
                     " steps (too many loop iterations, or values too large)"};
  }
}

void Interpreter::CheckStringSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw JinjaError{"template output or a string in it exceeds the limit of " +
                     std::to_string(limits_.max_output_bytes) + " bytes"};
  }
}

std::string Interpreter::Run(const NodeList& program) {
  try {
    return EvaluateBlock(program, *globals_);
  } catch (const BreakSignal&) {
    throw JinjaError{"break outside of a loop"};
  } catch (const ContinueSignal&) {
    throw JinjaError{"continue outside of a loop"};
  }
}

std::string Interpreter::EvaluateBlock(const NodeList& statements, Scope& scope) {
  std::string result;
  for (const NodePtr& statement : statements) {
    Value value = Evaluate(statement.get(), scope);
    if (value.is_undefined()) continue;
    // Null is also what set, macro and comments evaluate to; Python prints an expression's None.
    if (value.is_null() && !(python() && IsExpression(statement->kind))) continue;
    std::string text = OutputString(value);
    CheckStringSize(result.size() + text.size());
    Charge(text.size() / 16);
    result += text;
  }
  return result;
}

std::string Interpreter::OutputString(const Value& value) const {
  return python() ? ToPythonString(value, limits_.max_output_bytes)
                  : ToOutputString(value, limits_.max_output_bytes);
}

Value Interpreter::CallFunction(const Value& fn, std::vector<Value>& args, Scope& scope) {
  if (fn.kind() != Kind::kFunction) {
    throw JinjaError{std::string("Cannot call something that is not a function: got ") +
                     fn.TypeName()};
  }
  if (++call_depth_ > limits_.max_call_depth) {
    throw JinjaError{"template calls nested deeper than the limit of " +
                     std::to_string(limits_.max_call_depth)};
  }
  Value result = fn.function()(args, *this, scope);
  --call_depth_;
  return result;
}

Value Interpreter::Evaluate(const Node* node, Scope& scope) {
  if (node == nullptr) return Value();
  Charge(1);
  switch (node->kind) {
    case NodeKind::kText:
    case NodeKind::kStringLiteral:
      return Value::String(node->text);
    case NodeKind::kComment:
      return Value::Null();
    case NodeKind::kIf:
      return Value::String(EvaluateBlock(
          Evaluate(node->a.get(), scope).Truthy() ? node->body : node->alternate, scope));
    case NodeKind::kFor:
      return Value::String(EvaluateFor(*node, scope));
    case NodeKind::kBreak:
      throw BreakSignal{};
    case NodeKind::kContinue:
      throw ContinueSignal{};
    case NodeKind::kSet:
      return EvaluateSet(*node, scope);
    case NodeKind::kMacro:
      return DefineMacro(*node, scope);
    case NodeKind::kCallStatement:
      return EvaluateCallStatement(*node, scope);
    case NodeKind::kFilterStatement:
      return ApplyFilter(Value::String(EvaluateBlock(node->body, scope)), *node->a, scope);
    case NodeKind::kIdentifier:
      return scope.Lookup(node->text);
    case NodeKind::kIntegerLiteral:
      return Value::Int(node->number);
    case NodeKind::kFloatLiteral:
      return Value::Float(node->number);
    case NodeKind::kArrayLiteral:
    case NodeKind::kTupleLiteral: {
      Array items;
      for (const NodePtr& item : node->args) items.push_back(Evaluate(item.get(), scope));
      return Value::MakeArray(std::move(items),
                              node->kind == NodeKind::kArrayLiteral ? Kind::kArray : Kind::kTuple);
    }
    case NodeKind::kObjectLiteral:
      return EvaluateObjectLiteral(*node, scope);
    case NodeKind::kMember:
      return EvaluateMember(*node, scope);
    case NodeKind::kCall:
      return EvaluateCall(*node, scope);
    case NodeKind::kBinary:
      return EvaluateBinary(*node, scope);
    case NodeKind::kUnary:
      return EvaluateUnary(*node, scope);
    case NodeKind::kFilter:
      return ApplyFilter(Evaluate(node->a.get(), scope), *node->b, scope);
    case NodeKind::kTest:
      return EvaluateTest(*node, scope);
    case NodeKind::kSelect:
      if (!Evaluate(node->b.get(), scope).Truthy()) return Value();
      return Evaluate(node->a.get(), scope);
    case NodeKind::kTernary:
      return Evaluate(node->a.get(), scope).Truthy() ? Evaluate(node->b.get(), scope)
                                                     : Evaluate(node->c.get(), scope);
    default:
      throw JinjaError{"Unknown node type"};
  }
}

Value Interpreter::EvaluateObjectLiteral(const Node& node, Scope& scope) {
  auto object = std::make_shared<Object>();
  for (const auto& [key_node, value_node] : node.pairs) {
    Value key = Evaluate(key_node.get(), scope);
    if (!key.is_string()) {
      throw JinjaError{std::string("Object keys must be strings: got ") + key.TypeName()};
    }
    object->Set(key.str(), Evaluate(value_node.get(), scope));
  }
  return Value::MakeObject(std::move(object));
}

Value Interpreter::EvaluateBinary(const Node& node, Scope& scope) {
  Value left = Evaluate(node.a.get(), scope);
  const std::string& op = node.text;
  if (op == "and") return left.Truthy() ? Evaluate(node.b.get(), scope) : left;
  if (op == "or") return left.Truthy() ? left : Evaluate(node.b.get(), scope);
  Value right = Evaluate(node.b.get(), scope);
  if (python() && op == "~") {  // str(a) + str(b): undefined is "", none is "None"
    std::string text = OutputString(left) + OutputString(right);
    CheckStringSize(text.size());
    Charge(text.size() / 16);
    return Value::String(std::move(text));
  }
  if (op == "==") return Value::Bool(LooseEquals(left, right, limits_.max_output_bytes));
  if (op == "!=") return Value::Bool(!LooseEquals(left, right, limits_.max_output_bytes));
  bool membership = op == "in" || op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && membership) return Value::Bool(op == "not in");
    throw JinjaError{"Cannot perform operation " + op + " on undefined values"};
  }
  if (left.is_null() || right.is_null())
    throw JinjaError{"Cannot perform operation on null values"};
  if (op == "~") {
    std::string text = ToConcatString(left, limits_.max_output_bytes) +
                       ToConcatString(right, limits_.max_output_bytes);
    CheckStringSize(text.size());
    Charge(text.size() / 16);
    return Value::String(std::move(text));
  }
  if (op == "**" && IsNumericLike(left) && IsNumericLike(right)) {
    double a = left.number(), b = right.number();
    if (a == 0 && b < 0) throw JinjaError{"0.0 cannot be raised to a negative power"};
    double result = std::pow(a, b);
    if (!std::isfinite(result))
      throw JinjaError{"Exponentiation result is not a finite real number"};
    bool is_float = left.kind() == Kind::kFloat || right.kind() == Kind::kFloat || b < 0;
    return is_float ? Value::Float(result) : Value::Int(result);
  }
  if (left.is_number() && right.is_number()) {
    double a = left.number(), b = right.number();
    bool is_float = left.kind() == Kind::kFloat || right.kind() == Kind::kFloat;
    auto number = [&](double r) { return is_float ? Value::Float(r) : Value::Int(r); };
    if (op == "+") return number(a + b);
    if (op == "-") return number(a - b);
    if (op == "*") return number(a * b);
    if (python() && b == 0 && (op == "/" || op == "//" || op == "%")) {
      throw JinjaError{"division by zero"};  // Python's ZeroDivisionError (JavaScript: inf, NaN)
    }
    if (op == "/") return Value::Float(a / b);
    if (op == "//") return number(std::floor(a / b));
    if (op == "%") {
      double r = std::fmod(a, b);
      // Python's % takes the divisor's sign (-7 % 3 == 2); JavaScript's the dividend's.
      if (python() && r != 0 && (r < 0) != (b < 0)) r += b;
      return number(r);
    }
    if (op == "<") return Value::Bool(a < b);
    if (op == ">") return Value::Bool(a > b);
    if (op == ">=") return Value::Bool(a >= b);
    if (op == "<=") return Value::Bool(a <= b);
  } else if (left.is_array_like() && right.is_array_like()) {
    if (op == "+") {
      Array items = left.array();
      Charge(items.size() + right.array().size());
      items.insert(items.end(), right.array().begin(), right.array().end());
      return Value::MakeArray(std::move(items));
    }
  } else if (right.is_array_like()) {
    if (membership) {
      bool member = false;
      for (const Value& item : right.array()) {
        Charge(CompareCost(item, left));
        if (StrictEquals(item, left)) {
          member = true;
          break;
        }
      }
      Charge(right.array().size());
      return Value::Bool(member == (op == "in"));
    }
  }
  if ((left.is_string() || right.is_string()) && op == "+") {
    if (python() && !(left.is_string() && right.is_string())) {
      throw JinjaError{std::string("can only concatenate str (not \"") +
                       PythonTypeName(left.is_string() ? right : left) + "\") to str"};
    }
    std::string text = ToConcatString(left, limits_.max_output_bytes) +
                       ToConcatString(right, limits_.max_output_bytes);
    CheckStringSize(text.size());
    Charge(text.size() / 16);
    return Value::String(std::move(text));
  }
  if (left.is_string() && right.is_string() && membership) {
    Charge(right.str().size() / 16);
    bool found = FindLinear(right.str(), left.str()) != std::string_view::npos;
    return Value::Bool(found == (op == "in"));
  }
  if (left.is_string() && right.is_object_like() && membership) {
    bool found = right.object().Find(left.str()) != nullptr;
    return Value::Bool(found == (op == "in"));
  }
  throw JinjaError{"Unknown operator \"" + op + "\" between " + left.TypeName() + " and " +
                   right.TypeName()};
}

Value Interpreter::EvaluateUnary(const Node& node, Scope& scope) {
  Value argument = Evaluate(node.a.get(), scope);
  if (node.text == "not") return Value::Bool(!argument.Truthy());
  double sign = node.text == "-" ? -1 : 1;
  if (IsNumericLike(argument)) {
    double result = sign * argument.number();
    return argument.kind() == Kind::kFloat ? Value::Float(result) : Value::Int(result);
  }
  throw JinjaError{"Unknown operator \"" + node.text + "\" for " + argument.TypeName()};
}

Value Interpreter::EvaluateSlice(const Value& object, const Node& slice, Scope& scope) {
  if (!object.is_array_like() && !object.is_string()) {
    throw JinjaError{"Slice object must be an array or string"};
  }
  Value start = Evaluate(slice.a.get(), scope);
  Value stop = Evaluate(slice.b.get(), scope);
  Value step = Evaluate(slice.c.get(), scope);
  for (const Value* v : {&start, &stop, &step}) {
    if (v->kind() != Kind::kInt && !v->is_undefined()) {
      throw JinjaError{"Slice start, stop and step must be numeric or undefined"};
    }
  }
  if (object.is_array_like()) {
    Charge(object.array().size());
    return Value::MakeArray(JsSlice(object.array(), start, stop, step));
  }
  std::vector<char32_t> code_points = ToCodePoints(object.str());
  Charge(code_points.size() / 16);
  std::string out;
  for (char32_t c : JsSlice(code_points, start, stop, step)) out += FromCodePoint(c);
  return Value::String(std::move(out));
}

Value Interpreter::EvaluateMember(const Node& node, Scope& scope) {
  Value object = Evaluate(node.a.get(), scope);
  Value property;
  if (node.flag) {
    if (node.b->kind == NodeKind::kSlice) return EvaluateSlice(object, *node.b, scope);
    property = Evaluate(node.b.get(), scope);
  } else if (node.b->kind == NodeKind::kIntegerLiteral) {
    property = Value::Int(node.b->number);
  } else {
    property = Value::String(node.b->text);
  }
  if (object.is_attribute_container()) {
    if (!property.is_string()) {
      throw JinjaError{std::string("Cannot access property with non-string: got ") +
                       property.TypeName()};
    }
    if (const Value* found = object.object().Find(property.str())) return *found;
    return object.is_object_like() ? ObjectBuiltin(object, property.str()) : Value();
  }
  if (object.is_string()) Charge(object.str().size() / 16);  // UTF-16 indexing, method binding
  if (object.is_array_like() || object.is_string()) {
    if (property.kind() == Kind::kInt) {
      if (object.is_string()) {
        std::optional<std::string> c = Utf16At(object.str(), property.number());
        return c ? Value::String(*c) : Value();
      }
      double i = std::trunc(property.number());
      double n = static_cast<double>(object.array().size());
      if (i < 0) i += n;
      if (!(i >= 0) || i >= n) return Value();
      return object.array()[static_cast<size_t>(i)];
    }
    if (property.is_string()) {
      if (object.is_string()) return StringBuiltin(object, property.str());
      if (property.str() == "length") return Value::Int(static_cast<double>(object.array().size()));
      return Value();
    }
    throw JinjaError{std::string("Cannot access property with non-string/non-number: got ") +
                     property.TypeName()};
  }
  if (!property.is_string()) {
    throw JinjaError{std::string("Cannot access property with non-string: got ") +
                     property.TypeName()};
  }
  return Value();
}

void Interpreter::EvaluateArguments(const NodeList& args, Scope& scope,
                                    std::vector<Value>& positional,
                                    std::shared_ptr<Object>& keywords) {
  keywords = std::make_shared<Object>();
  for (const NodePtr& arg : args) {
    if (arg->kind == NodeKind::kSpread) {
      Value v = Evaluate(arg->a.get(), scope);
      if (!v.is_array_like()) {
        throw JinjaError{std::string("Cannot unpack non-iterable type: ") + v.TypeName()};
      }
      Charge(v.array().size());
      positional.insert(positional.end(), v.array().begin(), v.array().end());
    } else if (arg->kind != NodeKind::kKeywordArgument && arg->kind != NodeKind::kKeywordSpread) {
      positional.push_back(Evaluate(arg.get(), scope));
    }
  }
  auto add = [&](const std::string& key, Value value) {
    if (keywords->Find(key) != nullptr) {
      throw JinjaError{"Got multiple values for keyword argument '" + key + "'"};
    }
    keywords->Set(key, std::move(value));
  };
  for (const NodePtr& arg : args) {
    if (arg->kind == NodeKind::kKeywordArgument) {
      add(arg->text, Evaluate(arg->a.get(), scope));
    } else if (arg->kind == NodeKind::kKeywordSpread) {
      Value v = Evaluate(arg->a.get(), scope);
      if (!v.is_object_like()) {
        throw JinjaError{std::string("Argument after ** must be a mapping, not ") + v.TypeName()};
      }
      for (const auto& [key, value] : v.object().entries()) add(key, value);
    }
  }
}

Value Interpreter::EvaluateCall(const Node& node, Scope& scope) {
  std::vector<Value> args;
  std::shared_ptr<Object> keywords;
  EvaluateArguments(node.args, scope, args, keywords);
  if (keywords->size() > 0) args.push_back(Value::MakeObject(keywords, Kind::kKwargs));
  Value fn = Evaluate(node.a.get(), scope);
  return CallFunction(fn, args, scope);
}

Value Interpreter::EvaluateTest(const Node& node, Scope& scope) {
  Value operand = Evaluate(node.a.get(), scope);
  bool result = ApplyTest(node.text, operand, nullptr, dialect_);
  return Value::Bool(node.flag ? !result : result);
}

Value Interpreter::EvaluateSet(const Node& node, Scope& scope) {
  Value rhs =
      node.b ? Evaluate(node.b.get(), scope) : Value::String(EvaluateBlock(node.body, scope));
  const Node& assignee = *node.a;
  if (assignee.kind == NodeKind::kIdentifier) {
    scope.Set(assignee.text, std::move(rhs));
  } else if (assignee.kind == NodeKind::kTupleLiteral) {
    if (!rhs.is_array_like()) {
      throw JinjaError{std::string("Cannot unpack non-iterable type in set: ") + rhs.TypeName()};
    }
    if (rhs.array().size() != assignee.args.size()) {
      throw JinjaError{std::string("Too ") +
                       (assignee.args.size() > rhs.array().size() ? "few" : "many") +
                       " items to unpack in set"};
    }
    for (size_t i = 0; i < assignee.args.size(); ++i) {
      if (assignee.args[i]->kind != NodeKind::kIdentifier) {
        throw JinjaError{"Cannot unpack to non-identifier in set"};
      }
      scope.Set(assignee.args[i]->text, rhs.array()[i]);
    }
  } else if (assignee.kind == NodeKind::kMember) {
    Value object = Evaluate(assignee.a.get(), scope);
    if (object.kind() != Kind::kNamespace) {
      throw JinjaError{"cannot assign attribute on non-namespace object"};
    }
    if (assignee.b->kind != NodeKind::kIdentifier) {
      throw JinjaError{"Cannot assign to member with non-identifier property"};
    }
    object.mutable_object().Set(assignee.b->text, std::move(rhs));
  } else {
    throw JinjaError{"Invalid LHS inside assignment expression"};
  }
  return Value::Null();
}

std::string Interpreter::EvaluateFor(const Node& node, Scope& parent) {
  Scope& scope = NewScope(&parent);
  const Node* iterable_node = node.b.get();
  const Node* test = nullptr;
  if (iterable_node->kind == NodeKind::kSelect) {
    test = iterable_node->b.get();
    iterable_node = iterable_node->a.get();
  }
  Value iterable = Evaluate(iterable_node, scope);
  if (python() && iterable.is_string()) {  // Python iterates a string's characters
    Array characters;
    for (char32_t c : ToCodePoints(iterable.str()))
      characters.push_back(Value::String(FromCodePoint(c)));
    iterable = Value::MakeArray(std::move(characters));
  }
  if (!iterable.is_array_like() && !iterable.is_object_like()) {
    throw JinjaError{std::string("Expected iterable or object type in for loop: got ") +
                     iterable.TypeName()};
  }
  Array all;
  if (iterable.is_object_like()) {
    for (const auto& entry : iterable.object().entries()) all.push_back(Value::String(entry.first));
  } else {
    all = iterable.array();
  }
  Charge(all.size());
  const Node& loopvar = *node.a;
  auto bind = [&loopvar](Scope& target, const Value& current) {
    BindLoopVariable(loopvar, target, current);
  };
  Array items;
  for (const Value& current : all) {
    if (test != nullptr) {
      Scope& loop_scope = NewScope(&scope);
      bind(loop_scope, current);
      if (!Evaluate(test, loop_scope).Truthy()) continue;
    } else if (loopvar.kind != NodeKind::kIdentifier) {
      Scope probe(nullptr);
      bind(probe, current);  // the reference checks the shape while collecting the items
    }
    items.push_back(current);
  }
  std::string result;
  bool no_iteration = true;
  for (size_t i = 0; i < items.size(); ++i) {
    Charge(1);
    scope.Set("loop", LoopObject(items, i));
    bind(scope, items[i]);
    try {
      std::string body = EvaluateBlock(node.body, scope);
      CheckStringSize(result.size() + body.size());
      result += body;
    } catch (const ContinueSignal&) {
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) result += EvaluateBlock(node.alternate, scope);
  return result;
}

void Interpreter::BindMacroArguments(const std::string& display_name, const NodeList& parameters,
                                     bool uses_kwargs, bool uses_varargs, std::vector<Value> args,
                                     Scope& scope) {
  auto keywords = std::make_shared<Object>();
  if (!args.empty() && args.back().kind() == Kind::kKwargs) {
    for (const auto& [key, value] : args.back().object().entries()) keywords->Set(key, value);
    args.pop_back();
  }
  std::vector<std::string> taken;
  std::vector<const Node*> pending;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Node& parameter = *parameters[i];
    const std::string& name = parameter.text;
    std::optional<Value> value;
    if (i < args.size()) value = args[i];
    if (!value && keywords->Find(name) != nullptr) {
      value = *keywords->Find(name);
      taken.push_back(name);
    }
    if (!value && parameter.kind == NodeKind::kKeywordArgument) pending.push_back(&parameter);
    scope.Set(name, value ? *value : Value());
  }
  auto remaining = std::make_shared<Object>();
  for (const auto& [key, value] : keywords->entries()) {
    if (std::find(taken.begin(), taken.end(), key) == taken.end()) remaining->Set(key, value);
  }
  if (uses_kwargs) {
    scope.Set("kwargs", Value::MakeObject(remaining));
  } else if (remaining->size() > 0) {
    throw JinjaError{"macro " + display_name + " takes no keyword argument '" +
                     remaining->entries()[0].first + "'"};
  }
  if (uses_varargs) {
    Array rest;
    for (size_t i = parameters.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope.Set("varargs", Value::MakeArray(std::move(rest)));
  } else if (args.size() > parameters.size()) {
    throw JinjaError{"macro " + display_name + " takes not more than " +
                     std::to_string(parameters.size()) + " argument(s)"};
  }
  for (const Node* parameter : pending)
    scope.Set(parameter->text, Evaluate(parameter->a.get(), scope));
}

Value Interpreter::DefineMacro(const Node& node, Scope& scope) {
  auto [uses_kwargs, uses_varargs] = SpecialNames(node.body);
  const Node* macro = &node;
  scope.Set(node.text,
            Value::MakeFunction([macro, uses_kwargs = uses_kwargs, uses_varargs = uses_varargs](
                                    std::vector<Value>& args, Interpreter& self, Scope& caller) {
              Scope& macro_scope = self.NewScope(&caller);
              self.BindMacroArguments("'" + macro->text + "'", macro->args, uses_kwargs,
                                      uses_varargs, args, macro_scope);
              return Value::String(self.EvaluateBlock(macro->body, macro_scope));
            }));
  return Value::Null();
}

Value Interpreter::EvaluateCallStatement(const Node& node, Scope& scope) {
  auto [uses_kwargs, uses_varargs] = SpecialNames(node.body);
  const Node* block = &node;
  Scope* definition = &scope;
  Value caller_fn = Value::MakeFunction(
      [block, definition, uses_kwargs = uses_kwargs, uses_varargs = uses_varargs](
          std::vector<Value>& args, Interpreter& self, Scope&) {
        Scope& block_scope = self.NewScope(definition);
        self.BindMacroArguments("None", block->args, uses_kwargs, uses_varargs, args, block_scope);
        return Value::String(self.EvaluateBlock(block->body, block_scope));
      });
  const Node& call = *node.a;
  std::vector<Value> args;
  std::shared_ptr<Object> keywords;
  EvaluateArguments(call.args, scope, args, keywords);
  args.push_back(Value::MakeObject(keywords, Kind::kKwargs));
  Value fn = Evaluate(call.a.get(), scope);
  Scope& call_scope = NewScope(&scope);
  call_scope.Set("caller", caller_fn);
  return CallFunction(fn, args, call_scope);
}

}  // namespace pagoda::scheduler::text::jinja
