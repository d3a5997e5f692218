// The evaluator (eval.h): statements write into a string, expressions
// compute Values with Python's operator semantics (int / int is a float,
// // and % floor, 'a' * 3 repeats, True + 1 == 2, ints never overflow
// silently). Errors from the builtins get the line of the node that called
// them.
#include "jinja/eval.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/lexer.h"

namespace octet::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

absl::Status AtLine(const absl::Status& status, int line) {
  if (status.ok() ||
      absl::StartsWith(status.message(), "chat template line ")) {
    return status;
  }
  return TemplateError(line, status.message());
}

absl::Status Err(absl::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

absl::Status Unsupported(absl::string_view op, const Value& a, const Value& b) {
  return Err(absl::StrCat("unsupported operand types for ", op, ": '",
                          TypeName(a), "' and '", TypeName(b), "'"));
}

// Python's slice.indices(length) and the positions it selects.
std::vector<size_t> SliceIndices(int64_t length, std::optional<int64_t> start,
                                 std::optional<int64_t> stop, int64_t step) {
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + length : *v;
    if (x < 0) return step < 0 ? int64_t{-1} : int64_t{0};
    if (x >= length) return step < 0 ? length - 1 : length;
    return x;
  };
  int64_t b = clamp(start, step < 0 ? length - 1 : 0);
  int64_t e = clamp(stop, step < 0 ? -1 : length);
  std::vector<size_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    out.push_back(static_cast<size_t>(i));
  }
  return out;
}

absl::StatusOr<Value> IntArith(absl::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") overflow = __builtin_add_overflow(a, b, &r);
  if (op == "-") overflow = __builtin_sub_overflow(a, b, &r);
  if (op == "*") overflow = __builtin_mul_overflow(a, b, &r);
  if (op == "//" || op == "%") {
    if (b == 0) return Err("integer division or modulo by zero");
    if (a == INT64_MIN && b == -1) return Err("integer overflow");
    int64_t q = a / b, m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
      --q;
      m += b;
    }
    r = op == "//" ? q : m;
  }
  if (op == "**") {
    r = 1;
    for (int64_t i = 0; i < b && !overflow; ++i)
      overflow = __builtin_mul_overflow(r, a, &r);
  }
  if (overflow) return Err(absl::StrCat("integer overflow in '", op, "'"));
  return Value(r);
}

absl::StatusOr<Value> FloatArith(absl::string_view op, double a, double b) {
  if (op == "+") return Value(a + b);
  if (op == "-") return Value(a - b);
  if (op == "*") return Value(a * b);
  if (op == "**") {
    if (a == 0 && b < 0) return Err("0.0 cannot be raised to a negative power");
    return Value(std::pow(a, b));
  }
  if (b == 0) return Err("float division by zero");
  if (op == "/") return Value(a / b);
  // CPython's float_divmod.
  double m = std::fmod(a, b);
  double div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) {
    m += b;
    div -= 1.0;
  }
  if (op == "%") return Value(m != 0 ? m : std::copysign(0.0, b));
  double floor_div = std::copysign(0.0, a / b);
  if (div != 0) {
    floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
  }
  return Value(floor_div);
}

absl::StatusOr<Value> Arith(absl::string_view op, const Value& a,
                            const Value& b) {
  if (!a.is_number() || !b.is_number()) return Unsupported(op, a, b);
  if (op == "/") return FloatArith(op, a.as_float(), b.as_float());
  if (a.is_int() && b.is_int() && !(op == "**" && b.as_int() < 0)) {
    return IntArith(op, a.as_int(), b.as_int());
  }
  return FloatArith(op, a.as_float(), b.as_float());
}

class Evaluator {
 public:
  Evaluator(const Dict& variables, const Limits& limits) : limits_(limits) {
    frames_.emplace_back();
    for (const auto& [key, value] : variables.items) frames_[0][key] = value;
  }

  absl::StatusOr<Flow> Exec(const Body& body, std::string& out);

 private:
  using Frame = std::map<std::string, Value, std::less<>>;

  absl::Status Append(std::string& out, absl::string_view s);
  absl::Status Charge(const Value& v);
  absl::StatusOr<Flow> ExecNode(const Node& node, std::string& out);
  absl::StatusOr<Flow> ExecIf(const Node& node, std::string& out);
  absl::StatusOr<Flow> ExecFor(const Node& node, std::string& out);
  absl::Status ExecSet(const Node& node, std::string& out);
  absl::Status Bind(const std::vector<std::string>& targets, const Value& item);
  Value LoopObject(const std::vector<Value>& items, size_t i);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<Value> Lookup(absl::string_view name) const;
  absl::StatusOr<Value> EvalAttr(const Expr& e);
  absl::StatusOr<Value> EvalItem(const Expr& e);
  absl::StatusOr<Value> EvalSlice(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> EvalSequence(const Expr& e);
  absl::StatusOr<Value> EvalDict(const Expr& e);
  absl::StatusOr<Value> Concat(absl::string_view op, const Value& a,
                               const Value& b);
  absl::StatusOr<Value> Repeat(const Value& seq, int64_t times);

  Limits limits_;
  std::vector<Frame> frames_;
  int64_t iterations_ = 0;
  int64_t work_ = 0;
};

absl::Status Evaluator::Append(std::string& out, absl::string_view s) {
  if (out.size() + s.size() > limits_.max_output) {
    return Err(
        absl::StrCat("the output is over ", limits_.max_output, " bytes"));
  }
  absl::StrAppend(&out, s);
  work_ += static_cast<int64_t>(s.size());
  return absl::OkStatus();
}

absl::Status Evaluator::Charge(const Value& v) {
  if (v.is_string()) work_ += static_cast<int64_t>(v.str().size());
  if (v.is_list()) work_ += static_cast<int64_t>(v.list().items.size()) * 16;
  if (v.is_string() && v.str().size() > kMaxStringBytes) {
    return Err(absl::StrCat("a string is over ", kMaxStringBytes, " bytes"));
  }
  if (work_ > limits_.max_work) {
    return Err(absl::StrCat("the template builds more than ", limits_.max_work,
                            " bytes of strings and lists"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flow> Evaluator::Exec(const Body& body, std::string& out) {
  for (const auto& node : body) {
    auto flow = ExecNode(*node, out);
    if (!flow.ok()) return AtLine(flow.status(), node->line);
    if (*flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Evaluator::ExecNode(const Node& node, std::string& out) {
  switch (node.kind) {
    case Node::Kind::kText:
      if (auto s = Append(out, node.text); !s.ok()) return s;
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      auto v = Eval(*node.expr);
      if (!v.ok()) return v.status();
      auto s = ToStr(*v);
      if (!s.ok()) return s.status();
      if (auto a = Append(out, *s); !a.ok()) return a;
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      return ExecIf(node, out);
    case Node::Kind::kFor:
      return ExecFor(node, out);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock:
      if (auto s = ExecSet(node, out); !s.ok()) return s;
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kGeneration:
      return Exec(node.body, out);
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Evaluator::ExecIf(const Node& node, std::string& out) {
  for (const auto& [condition, body] : node.branches) {
    if (condition != nullptr) {
      auto v = Eval(*condition);
      if (!v.ok()) return v.status();
      if (!Truthy(*v)) continue;
    }
    return Exec(body, out);
  }
  return Flow::kNormal;
}

absl::Status Evaluator::Bind(const std::vector<std::string>& targets,
                             const Value& item) {
  if (targets.size() == 1) {
    frames_.back()[targets[0]] = item;
    return absl::OkStatus();
  }
  auto parts = Iterate(item);
  if (!parts.ok() || item.is_dict())
    return Err(absl::StrCat("cannot unpack a '", TypeName(item), "' into ",
                            targets.size(), " names"));
  if (parts->size() != targets.size()) {
    return Err(absl::StrCat("expected ", targets.size(),
                            " values to unpack, got ", parts->size()));
  }
  for (size_t i = 0; i < targets.size(); ++i)
    frames_.back()[targets[i]] = (*parts)[i];
  return absl::OkStatus();
}

Value Evaluator::LoopObject(const std::vector<Value>& items, size_t i) {
  auto n = static_cast<int64_t>(items.size());
  auto k = static_cast<int64_t>(i);
  Dict loop;
  loop.Set("index", Value(k + 1));
  loop.Set("index0", Value(k));
  loop.Set("revindex", Value(n - k));
  loop.Set("revindex0", Value(n - k - 1));
  loop.Set("first", Value(k == 0));
  loop.Set("last", Value(k == n - 1));
  loop.Set("length", Value(n));
  loop.Set("depth", Value(1));
  loop.Set("depth0", Value(0));
  if (i > 0) loop.Set("previtem", items[i - 1]);
  if (i + 1 < items.size()) loop.Set("nextitem", items[i + 1]);
  auto cycle = std::make_shared<Callable>();
  cycle->name = "cycle";
  cycle->fn = [k](const CallArgs& a) -> absl::StatusOr<Value> {
    if (a.args.empty()) return Err("loop.cycle() needs at least one value");
    return a.args[static_cast<size_t>(k) % a.args.size()];
  };
  loop.Set("cycle", Value(CallablePtr(std::move(cycle))));
  return MakeDict(std::move(loop));
}

absl::StatusOr<Flow> Evaluator::ExecFor(const Node& node, std::string& out) {
  auto iterable = Eval(*node.expr);
  if (!iterable.ok()) return iterable.status();
  auto all = Iterate(*iterable);
  if (!all.ok()) return all.status();
  std::vector<Value> items;
  for (const Value& item : *all) {
    if (++iterations_ > limits_.max_iterations) break;
    if (node.filter == nullptr) {
      items.push_back(item);
      continue;
    }
    frames_.emplace_back();
    absl::Status bound = Bind(node.targets, item);
    auto keep = bound.ok() ? Eval(*node.filter) : absl::StatusOr<Value>(bound);
    frames_.pop_back();
    if (!keep.ok()) return keep.status();
    if (Truthy(*keep)) items.push_back(item);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (++iterations_ > limits_.max_iterations) break;
    frames_.emplace_back();
    frames_.back()["loop"] = LoopObject(items, i);
    absl::Status bound = Bind(node.targets, items[i]);
    auto flow = bound.ok() ? Exec(node.body, out) : absl::StatusOr<Flow>(bound);
    frames_.pop_back();
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (iterations_ > limits_.max_iterations) {
    return Err(absl::StrCat("the template runs more than ",
                            limits_.max_iterations, " loop iterations"));
  }
  if (!items.empty() || node.else_body.empty()) return Flow::kNormal;
  frames_.emplace_back();
  auto flow = Exec(node.else_body, out);
  frames_.pop_back();
  if (!flow.ok()) return flow.status();
  return Flow::kNormal;
}

// Whether `v` is or holds a namespace: storing one in a namespace could
// make a cycle, which shared pointers would never free.
bool HoldsNamespace(const Value& v, int depth = 0) {
  if (v.is_namespace() || depth > kMaxValueDepth) return true;
  if (v.is_list()) {
    for (const Value& item : v.list().items) {
      if (HoldsNamespace(item, depth + 1)) return true;
    }
  }
  if (v.is_dict()) {
    for (const auto& item : v.dict().items) {
      if (HoldsNamespace(item.second, depth + 1)) return true;
    }
  }
  return false;
}

absl::Status Evaluator::ExecSet(const Node& node, std::string& out) {
  (void)out;
  Value value;
  if (node.kind == Node::Kind::kSetBlock) {
    std::string captured;
    auto flow = Exec(node.body, captured);
    if (!flow.ok()) return flow.status();
    value = Value(std::move(captured));
  } else {
    auto v = Eval(*node.expr);
    if (!v.ok()) return v.status();
    value = *std::move(v);
  }
  if (node.attr.empty()) {
    frames_.back()[node.targets[0]] = std::move(value);
    return absl::OkStatus();
  }
  auto target = Lookup(node.targets[0]);
  if (!target.ok()) return target.status();
  if (!target->is_namespace()) {
    return Err(absl::StrCat("'{% set ", node.targets[0], ".", node.attr,
                            " %}' needs a namespace(), not a '",
                            TypeName(*target), "'"));
  }
  if (HoldsNamespace(value)) {
    return Err(absl::StrCat("'{% set ", node.targets[0], ".", node.attr,
                            " %}': a namespace cannot hold a namespace"));
  }
  target->ns().attrs.Set(node.attr, std::move(value));
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::Lookup(absl::string_view name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    if (auto found = it->find(name); found != it->end()) return found->second;
  }
  if (name == "raise_exception") {
    auto c = std::make_shared<Callable>();
    c->name = "raise_exception";
    c->fn = [](const CallArgs& a) -> absl::StatusOr<Value> {
      std::string message;
      if (!a.args.empty()) {
        auto s = ToStr(a.args[0]);
        if (s.ok()) message = *s;
      }
      return Err(absl::StrCat("raise_exception: ", message));
    };
    return Value(CallablePtr(std::move(c)));
  }
  if (IsGlobalFunction(name)) return GlobalFunction(name);
  return Value();
}

absl::StatusOr<Value> Evaluator::Eval(const Expr& e) {
  auto v = EvalInner(e);
  if (!v.ok()) return AtLine(v.status(), e.line);
  using K = Expr::Kind;
  bool built = e.kind == K::kBinary || e.kind == K::kFilter ||
               e.kind == K::kCall || e.kind == K::kSlice;
  if (auto s = built ? Charge(*v) : absl::OkStatus(); !s.ok()) {
    return AtLine(s, e.line);
  }
  return v;
}

absl::StatusOr<Value> Evaluator::EvalInner(const Expr& e) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral:
      return e.literal;
    case K::kName:
      return Lookup(e.name);
    case K::kAttr:
      return EvalAttr(e);
    case K::kItem:
      return EvalItem(e);
    case K::kSlice:
      return EvalSlice(e);
    case K::kCall:
      return EvalCall(e);
    case K::kFilter:
    case K::kTest: {
      auto operand = Eval(*e.children[0]);
      if (!operand.ok()) return operand;
      auto args = EvalArgs(e, 1);
      if (!args.ok()) return args.status();
      if (e.kind == K::kFilter) return ApplyFilter(e.name, *operand, *args);
      auto pass = ApplyTest(e.name, *operand, *args);
      if (!pass.ok()) return pass.status();
      return Value(*pass != e.negated);
    }
    case K::kNeg:
    case K::kPos: {
      auto v = Eval(*e.children[0]);
      if (!v.ok()) return v;
      if (!v->is_number())
        return Err(absl::StrCat("bad operand type for unary ",
                                e.kind == K::kNeg ? "-" : "+", ": '",
                                TypeName(*v), "'"));
      if (e.kind == K::kPos) return v->is_bool() ? Value(v->as_int()) : *v;
      if (v->is_float()) return Value(-v->as_float());
      return IntArith("-", 0, v->as_int());
    }
    case K::kNot: {
      auto v = Eval(*e.children[0]);
      if (!v.ok()) return v;
      return Value(!Truthy(*v));
    }
    case K::kBinary:
      return EvalBinary(e);
    case K::kCompare:
      return EvalCompare(e);
    case K::kAnd:
    case K::kOr: {
      auto left = Eval(*e.children[0]);
      if (!left.ok()) return left;
      if (Truthy(*left) == (e.kind == K::kOr)) return left;
      return Eval(*e.children[1]);
    }
    case K::kCond: {
      auto test = Eval(*e.children[1]);
      if (!test.ok()) return test;
      if (Truthy(*test)) return Eval(*e.children[0]);
      return e.children[2] ? Eval(*e.children[2])
                           : absl::StatusOr<Value>(Value());
    }
    case K::kList:
    case K::kTuple:
      return EvalSequence(e);
    case K::kDict:
      return EvalDict(e);
  }
  return Value();
}

absl::Status UndefinedAccess(const Expr& object, absl::string_view what) {
  std::string name =
      object.kind == Expr::Kind::kName   ? absl::StrCat("'", object.name, "'")
      : object.kind == Expr::Kind::kAttr ? absl::StrCat("'.", object.name, "'")
                                         : std::string("the value");
  return Err(absl::StrCat(name, " is undefined (reading ", what, " of it)"));
}

absl::StatusOr<Value> Evaluator::EvalAttr(const Expr& e) {
  auto object = Eval(*e.children[0]);
  if (!object.ok()) return object;
  if (object->undefined())
    return UndefinedAccess(*e.children[0], absl::StrCat("'.", e.name, "'"));
  if (auto method = BoundMethod(*object, e.name)) return *method;
  return GetAttr(*object, e.name);
}

absl::StatusOr<Value> Evaluator::EvalItem(const Expr& e) {
  auto object = Eval(*e.children[0]);
  if (!object.ok()) return object;
  auto key = Eval(*e.children[1]);
  if (!key.ok()) return key;
  if (object->undefined()) return UndefinedAccess(*e.children[0], "an item");
  if (key->is_string()) {
    if (object->is_dict()) {
      if (const Value* v = object->dict().Find(key->str())) return *v;
    }
    if (auto method = BoundMethod(*object, key->str())) return *method;
    return GetAttr(*object, key->str());
  }
  if (!key->is_int() || !(object->is_list() || object->is_string()))
    return Value();
  int64_t i = key->as_int();
  if (object->is_list()) {
    const auto& items = object->list().items;
    int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? items[static_cast<size_t>(i)] : Value();
  }
  std::vector<absl::string_view> cps = CodePoints(object->str());
  int64_t n = static_cast<int64_t>(cps.size());
  if (i < 0) i += n;
  return i >= 0 && i < n ? Value(std::string(cps[static_cast<size_t>(i)]))
                         : Value();
}

absl::StatusOr<Value> Evaluator::EvalSlice(const Expr& e) {
  auto object = Eval(*e.children[0]);
  if (!object.ok()) return object;
  if (object->undefined()) return UndefinedAccess(*e.children[0], "a slice");
  std::optional<int64_t> bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (!e.children[k + 1]) continue;
    auto v = Eval(*e.children[k + 1]);
    if (!v.ok()) return v;
    if (v->none()) continue;
    if (!v->is_int()) return Err("slice indices must be integers or None");
    bounds[k] = v->as_int();
  }
  int64_t step = bounds[2].value_or(1);
  if (step == 0) return Err("slice step cannot be zero");
  if (object->is_list()) {
    const auto& items = object->list().items;
    std::vector<Value> out;
    for (size_t i : SliceIndices(static_cast<int64_t>(items.size()), bounds[0],
                                 bounds[1], step)) {
      out.push_back(items[i]);
    }
    return MakeList(std::move(out), object->list().tuple);
  }
  if (!object->is_string()) return Value();
  std::vector<absl::string_view> cps = CodePoints(object->str());
  std::string out;
  for (size_t i : SliceIndices(static_cast<int64_t>(cps.size()), bounds[0],
                               bounds[1], step)) {
    absl::StrAppend(&out, cps[i]);
  }
  return Value(std::move(out));
}

absl::StatusOr<CallArgs> Evaluator::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) {
    auto v = Eval(*e.children[i]);
    if (!v.ok()) return v.status();
    args.args.push_back(*std::move(v));
  }
  for (const auto& [key, expr] : e.kwargs) {
    auto v = Eval(*expr);
    if (!v.ok()) return v.status();
    args.kwargs.emplace_back(key, *std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Evaluator::EvalCall(const Expr& e) {
  const Expr& callee = *e.children[0];
  absl::StatusOr<Value> fn;
  if (callee.kind == Expr::Kind::kAttr) {
    auto object = Eval(*callee.children[0]);
    if (!object.ok()) return object;
    if (object->undefined())
      return UndefinedAccess(*callee.children[0],
                             absl::StrCat("'.", callee.name, "()'"));
    auto method = BoundMethod(*object, callee.name);
    fn = method ? *method : GetAttr(*object, callee.name);
    if (!fn->is_callable()) {
      return Err(absl::StrCat("'", TypeName(*object),
                              "' object has no method '", callee.name, "'"));
    }
  } else {
    fn = Eval(callee);
    if (!fn.ok()) return fn;
    if (!fn->is_callable())
      return Err(absl::StrCat("'", callee.name, "' is not callable"));
  }
  auto args = EvalArgs(e, 1);
  if (!args.ok()) return args.status();
  return fn->callable().fn(*args);
}

absl::StatusOr<Value> Evaluator::Repeat(const Value& seq, int64_t times) {
  times = std::max<int64_t>(times, 0);
  if (seq.is_string()) {
    if (!seq.str().empty() &&
        static_cast<uint64_t>(times) > kMaxStringBytes / seq.str().size()) {
      return Err(absl::StrCat("a string is over ", kMaxStringBytes, " bytes"));
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty() &&
      static_cast<uint64_t>(times) > kMaxListItems / items.size()) {
    return Err(absl::StrCat("a list is over ", kMaxListItems, " items"));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), items.begin(), items.end());
  return MakeList(std::move(out), seq.list().tuple);
}

absl::StatusOr<Value> Evaluator::Concat(absl::string_view op, const Value& a,
                                        const Value& b) {
  if (op == "~") {
    auto x = ToStr(a);
    auto y = ToStr(b);
    if (!x.ok()) return x.status();
    if (!y.ok()) return y.status();
    return Value(*x + *y);
  }
  if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    std::vector<Value> out = a.list().items;
    out.insert(out.end(), b.list().items.begin(), b.list().items.end());
    return MakeList(std::move(out), a.list().tuple);
  }
  return Arith(op, a, b);
}

absl::StatusOr<Value> Evaluator::EvalBinary(const Expr& e) {
  auto a = Eval(*e.children[0]);
  if (!a.ok()) return a;
  auto b = Eval(*e.children[1]);
  if (!b.ok()) return b;
  const std::string& op = e.name;
  if (op == "~" || op == "+") return Concat(op, *a, *b);
  if (op == "*" && (a->is_string() || a->is_list()) && b->is_int())
    return Repeat(*a, b->as_int());
  if (op == "*" && (b->is_string() || b->is_list()) && a->is_int())
    return Repeat(*b, a->as_int());
  if (op == "%" && a->is_string())
    return Err("string formatting with '%' is not supported");
  return Arith(op, *a, *b);
}

absl::StatusOr<Value> Evaluator::EvalCompare(const Expr& e) {
  auto left = Eval(*e.children[0]);
  if (!left.ok()) return left;
  for (size_t i = 0; i < e.ops.size(); ++i) {
    auto right = Eval(*e.children[i + 1]);
    if (!right.ok()) return right;
    const std::string& op = e.ops[i];
    CallArgs args;
    args.args.push_back(*right);
    absl::StatusOr<bool> r;
    if (op == "in" || op == "notin") {
      r = ApplyTest("in", *left, args);
      if (r.ok() && op == "notin") r = !*r;
    } else {
      static const std::map<absl::string_view, absl::string_view> kTests = {
          {"==", "eq"}, {"!=", "ne"}, {"<", "lt"},
          {"<=", "le"}, {">", "gt"},  {">=", "ge"}};
      r = ApplyTest(kTests.at(op), *left, args);
    }
    if (!r.ok()) return r.status();
    if (!*r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

absl::StatusOr<Value> Evaluator::EvalSequence(const Expr& e) {
  std::vector<Value> items;
  for (const auto& child : e.children) {
    auto v = Eval(*child);
    if (!v.ok()) return v;
    items.push_back(*std::move(v));
  }
  return MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
}

absl::StatusOr<Value> Evaluator::EvalDict(const Expr& e) {
  Dict dict;
  for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
    auto key = Eval(*e.children[i]);
    if (!key.ok()) return key;
    if (!key->is_string()) return Err("dict literal keys must be strings");
    auto value = Eval(*e.children[i + 1]);
    if (!value.ok()) return value;
    dict.Set(key->str(), *std::move(value));
  }
  return MakeDict(std::move(dict));
}

}  // namespace

absl::StatusOr<std::string> Evaluate(const Program& program,
                                     const Dict& variables,
                                     const Limits& limits) {
  Evaluator evaluator(variables, limits);
  std::string out;
  auto flow = evaluator.Exec(program.body, out);
  if (!flow.ok()) return flow.status();
  return out;
}

}  // namespace octet::jinja
