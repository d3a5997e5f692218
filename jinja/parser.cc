// The parser (parser.h): recursive descent in the shape of jinja2's
// parser.py, one function per precedence level, loosest first:
// conditional, or, and, not, comparison, + -, ~, * / // %, **, unary - +,
// then primaries with their postfixes (.attr, [index], (call)) and
// filters and tests (`x | f`, `x is t`), which bind tighter than any
// operator: `a + b | trim` trims b alone.
#include "jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace octet::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;
using Type = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Program> Run();

 private:
  // Counts nesting; Parse* functions hold one while they recurse.
  struct Depth {
    explicit Depth(int& d) : depth(d) { ++depth; }
    ~Depth() { --depth; }
    int& depth;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool IsOp(absl::string_view op) const {
    return Cur().type == Type::kOp && Cur().value == op;
  }
  bool IsName(absl::string_view name) const {
    return Cur().type == Type::kName && Cur().value == name;
  }
  absl::Status Error(absl::string_view what) const {
    return TemplateError(Cur().line, what);
  }
  absl::Status Unexpected(absl::string_view wanted) const;
  absl::Status Expect(absl::string_view op);
  absl::StatusOr<std::string> ExpectName();
  absl::Status ExpectBlockEnd();
  absl::Status CheckDepth() const {
    return depth_ > kMaxNesting ? Error(absl::StrCat("nesting is deeper than ",
                                                     kMaxNesting, " levels"))
                                : absl::OkStatus();
  }
  ExprPtr NewExpr(Expr::Kind kind) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Cur().line;
    return e;
  }

  // Statements. ParseBody stops at a block tag named in `ends`, leaving
  // pos_ on that name.
  absl::Status ParseBody(const std::set<absl::string_view>& ends, Body& body,
                         std::string& ended_by);
  absl::StatusOr<std::unique_ptr<Node>> ParseStatement();
  absl::StatusOr<std::unique_ptr<Node>> ParseIf();
  absl::StatusOr<std::unique_ptr<Node>> ParseFor();
  absl::StatusOr<std::unique_ptr<Node>> ParseSet();
  absl::StatusOr<std::unique_ptr<Node>> ParseSimpleBlock(Node::Kind kind,
                                                         absl::string_view end);

  // Expressions.
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseBinary(int level);
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseSequence(absl::string_view close,
                                        Expr::Kind kind);
  absl::StatusOr<ExprPtr> ParseDictLiteral();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
  absl::Status ParseCallArgs(Expr& call);
  absl::Status CheckCallee(const Expr& callee) const;

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

std::string Describe(const Token& t) {
  switch (t.type) {
    case Type::kEof:
      return "the end of the template";
    case Type::kText:
      return "text";
    case Type::kVarBegin:
      return "'{{'";
    case Type::kVarEnd:
      return "'}}'";
    case Type::kBlockBegin:
      return "'{%'";
    case Type::kBlockEnd:
      return "'%}'";
    case Type::kString:
      return "a string";
    default:
      return absl::StrCat("'", t.value, "'");
  }
}

absl::Status Parser::Unexpected(absl::string_view wanted) const {
  return Error(absl::StrCat("expected ", wanted, ", got ", Describe(Cur())));
}

absl::Status Parser::Expect(absl::string_view op) {
  if (!IsOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ExpectName() {
  if (Cur().type != Type::kName) return Unexpected("a name");
  return tokens_[pos_++].value;
}

absl::Status Parser::ExpectBlockEnd() {
  if (Cur().type != Type::kBlockEnd) return Unexpected("'%}'");
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<Program> Parser::Run() {
  Program program;
  std::string ended_by;
  if (auto s = ParseBody({}, program.body, ended_by); !s.ok()) return s;
  return program;
}

absl::Status Parser::ParseBody(const std::set<absl::string_view>& ends,
                               Body& body, std::string& ended_by) {
  Depth guard(depth_);
  if (auto s = CheckDepth(); !s.ok()) return s;
  while (Cur().type != Type::kEof) {
    const Token& t = Cur();
    if (t.type == Type::kText) {
      auto node = std::make_unique<Node>();
      node->line = t.line;
      node->text = t.value;
      body.push_back(std::move(node));
      ++pos_;
    } else if (t.type == Type::kVarBegin) {
      ++pos_;
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kOutput;
      node->line = t.line;
      auto expr = ParseTuple();
      if (!expr.ok()) return expr.status();
      node->expr = *std::move(expr);
      if (Cur().type != Type::kVarEnd) return Unexpected("'}}'");
      ++pos_;
      body.push_back(std::move(node));
    } else if (t.type == Type::kBlockBegin) {
      if (Peek().type == Type::kName && ends.count(Peek().value)) {
        ++pos_;
        ended_by = tokens_[pos_++].value;
        return absl::OkStatus();
      }
      auto node = ParseStatement();
      if (!node.ok()) return node.status();
      body.push_back(*std::move(node));
    } else {
      return Unexpected("text or a tag");
    }
  }
  if (ends.empty()) return absl::OkStatus();
  return Error(
      absl::StrCat("the template ends before '{% ", *ends.rbegin(), " %}'"));
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseStatement() {
  ++pos_;  // {%
  if (Cur().type != Type::kName) return Unexpected("a statement name");
  std::string name = Cur().value;
  int line = Cur().line;
  ++pos_;
  if (name == "if") return ParseIf();
  if (name == "for") return ParseFor();
  if (name == "set") return ParseSet();
  if (name == "generation") {
    return ParseSimpleBlock(Node::Kind::kGeneration, "endgeneration");
  }
  if (name == "break" || name == "continue") {
    if (loops_ == 0)
      return TemplateError(line,
                           absl::StrCat("'{% ", name, " %}' outside a loop"));
    auto node = std::make_unique<Node>();
    node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    node->line = line;
    if (auto s = ExpectBlockEnd(); !s.ok()) return s;
    return node;
  }
  static const std::set<absl::string_view> kEnds = {
      "elif", "else", "endif", "endfor", "endset", "endgeneration", "endraw"};
  if (kEnds.count(name)) {
    return TemplateError(line, absl::StrCat("unexpected '{% ", name, " %}'"));
  }
  return TemplateError(line,
                       absl::StrCat("'{% ", name, " %}' is not supported"));
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseIf() {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kIf;
  node->line = tokens_[pos_ - 1].line;
  std::string ended_by = "if";
  while (ended_by != "endif") {
    ExprPtr condition;
    if (ended_by != "else") {
      auto cond = ParseTuple(/*with_condexpr=*/false);
      if (!cond.ok()) return cond.status();
      condition = *std::move(cond);
    }
    if (auto s = ExpectBlockEnd(); !s.ok()) return s;
    Body body;
    std::set<absl::string_view> ends = {"elif", "else", "endif"};
    if (ended_by == "else") ends = {"endif"};
    if (auto s = ParseBody(ends, body, ended_by); !s.ok()) return s;
    node->branches.emplace_back(std::move(condition), std::move(body));
  }
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseFor() {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->line = tokens_[pos_ - 1].line;
  bool parens = IsOp("(");
  if (parens) ++pos_;
  do {
    auto target = ExpectName();
    if (!target.ok()) return target.status();
    node->targets.push_back(*target);
  } while (IsOp(",") && (++pos_, true));
  if (parens) {
    if (auto s = Expect(")"); !s.ok()) return s;
  }
  if (!IsName("in")) return Unexpected("'in'");
  ++pos_;
  auto iter = ParseTuple(/*with_condexpr=*/false);
  if (!iter.ok()) return iter.status();
  node->expr = *std::move(iter);
  if (IsName("if")) {
    ++pos_;
    auto filter = ParseExpression();
    if (!filter.ok()) return filter.status();
    node->filter = *std::move(filter);
  }
  if (IsName("recursive"))
    return Error("recursive for loops are not supported");
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  std::string ended_by;
  ++loops_;
  auto s = ParseBody({"else", "endfor"}, node->body, ended_by);
  --loops_;
  if (!s.ok()) return s;
  if (ended_by == "else") {
    if (s = ExpectBlockEnd(); !s.ok()) return s;
    if (s = ParseBody({"endfor"}, node->else_body, ended_by); !s.ok()) return s;
  }
  if (s = ExpectBlockEnd(); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseSet() {
  auto node = std::make_unique<Node>();
  node->line = tokens_[pos_ - 1].line;
  auto target = ExpectName();
  if (!target.ok()) return target.status();
  node->targets.push_back(*target);
  if (IsOp(".")) {
    ++pos_;
    auto attr = ExpectName();
    if (!attr.ok()) return attr.status();
    node->attr = *attr;
  }
  if (IsOp(","))
    return Error("'{% set a, b = ... %}' (unpacking) is not supported");
  if (IsOp("=")) {
    ++pos_;
    node->kind = Node::Kind::kSet;
    auto value = ParseTuple();
    if (!value.ok()) return value.status();
    node->expr = *std::move(value);
    if (auto s = ExpectBlockEnd(); !s.ok()) return s;
    return node;
  }
  if (IsOp("|"))
    return Error("a filter on '{% set %}' blocks is not supported");
  if (!node->attr.empty()) return Unexpected("'='");
  node->kind = Node::Kind::kSetBlock;
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  std::string ended_by;
  if (auto s = ParseBody({"endset"}, node->body, ended_by); !s.ok()) return s;
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseSimpleBlock(
    Node::Kind kind, absl::string_view end) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  node->line = tokens_[pos_ - 1].line;
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  std::string ended_by;
  if (auto s = ParseBody({end}, node->body, ended_by); !s.ok()) return s;
  if (auto s = ExpectBlockEnd(); !s.ok()) return s;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

// Comma-separated expressions: a tuple, or one expression without a comma.
absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr) {
  int line = Cur().line;
  std::vector<ExprPtr> items;
  bool comma = false;
  while (true) {
    if (!items.empty()) {
      if (!IsOp(",")) break;
      ++pos_;
      comma = true;
      if (Cur().type == Type::kVarEnd || Cur().type == Type::kBlockEnd ||
          IsOp(")"))
        break;
    }
    auto e = ParseExpression(with_condexpr);
    if (!e.ok()) return e.status();
    items.push_back(*std::move(e));
  }
  if (!comma) return std::move(items[0]);
  auto tuple = std::make_unique<Expr>();
  tuple->kind = Expr::Kind::kTuple;
  tuple->line = line;
  tuple->children = std::move(items);
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseCondExpr() {
  Depth guard(depth_);
  if (auto s = CheckDepth(); !s.ok()) return s;
  auto expr = ParseOr();
  if (!expr.ok()) return expr;
  while (IsName("if")) {
    auto cond = NewExpr(Expr::Kind::kCond);
    ++pos_;
    auto test = ParseOr();
    if (!test.ok()) return test;
    ExprPtr otherwise;
    if (IsName("else")) {
      ++pos_;
      auto e = ParseCondExpr();
      if (!e.ok()) return e;
      otherwise = *std::move(e);
    }
    cond->children.push_back(*std::move(expr));
    cond->children.push_back(*std::move(test));
    cond->children.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  auto left = ParseAnd();
  if (!left.ok()) return left;
  while (IsName("or")) {
    auto node = NewExpr(Expr::Kind::kOr);
    ++pos_;
    auto right = ParseAnd();
    if (!right.ok()) return right;
    node->children.push_back(*std::move(left));
    node->children.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  auto left = ParseNot();
  if (!left.ok()) return left;
  while (IsName("and")) {
    auto node = NewExpr(Expr::Kind::kAnd);
    ++pos_;
    auto right = ParseNot();
    if (!right.ok()) return right;
    node->children.push_back(*std::move(left));
    node->children.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  Depth guard(depth_);
  if (auto s = CheckDepth(); !s.ok()) return s;
  auto node = NewExpr(Expr::Kind::kNot);
  ++pos_;
  auto operand = ParseNot();
  if (!operand.ok()) return operand;
  node->children.push_back(*std::move(operand));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  static const std::set<absl::string_view> kOps = {"==", "!=", "<",
                                                   "<=", ">",  ">="};
  auto first = ParseBinary(0);
  if (!first.ok()) return first;
  auto node = NewExpr(Expr::Kind::kCompare);
  node->children.push_back(*std::move(first));
  while (true) {
    std::string op;
    if (Cur().type == Type::kOp && kOps.count(Cur().value)) {
      op = Cur().value;
    } else if (IsName("in")) {
      op = "in";
    } else if (IsName("not") && Peek().type == Type::kName &&
               Peek().value == "in") {
      op = "notin";
      ++pos_;
    } else {
      break;
    }
    ++pos_;
    auto right = ParseBinary(0);
    if (!right.ok()) return right;
    node->ops.push_back(op);
    node->children.push_back(*std::move(right));
  }
  if (node->ops.empty()) return std::move(node->children[0]);
  return node;
}

// Levels 0..3: + -, ~, * / // %, **; then unary.
absl::StatusOr<ExprPtr> Parser::ParseBinary(int level) {
  static const std::vector<std::set<absl::string_view>> kLevels = {
      {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == static_cast<int>(kLevels.size())) return ParseUnary(true);
  auto left = ParseBinary(level + 1);
  if (!left.ok()) return left;
  while (Cur().type == Type::kOp && kLevels[level].count(Cur().value)) {
    auto node = NewExpr(Expr::Kind::kBinary);
    node->name = tokens_[pos_++].value;
    auto right = ParseBinary(level + 1);
    if (!right.ok()) return right;
    node->children.push_back(*std::move(left));
    node->children.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Depth guard(depth_);
  if (auto s = CheckDepth(); !s.ok()) return s;
  absl::StatusOr<ExprPtr> node;
  if (IsOp("-") || IsOp("+")) {
    auto unary = NewExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos);
    ++pos_;
    auto operand = ParseUnary(false);
    if (!operand.ok()) return operand;
    unary->children.push_back(*std::move(operand));
    node = std::move(unary);
  } else {
    node = ParsePrimary();
  }
  if (!node.ok()) return node;
  node = ParsePostfix(*std::move(node));
  if (!node.ok() || !with_filter) return node;
  return ParseFilterExpr(*std::move(node));
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  auto node = NewExpr(Expr::Kind::kLiteral);
  if (t.type == Type::kName) {
    ++pos_;
    if (t.value == "true" || t.value == "True") {
      node->literal = Value(true);
    } else if (t.value == "false" || t.value == "False") {
      node->literal = Value(false);
    } else if (t.value == "none" || t.value == "None") {
      node->literal = Value(None{});
    } else {
      node->kind = Expr::Kind::kName;
      node->name = t.value;
    }
    return node;
  }
  if (t.type == Type::kString) {
    std::string s;
    while (Cur().type == Type::kString) s += tokens_[pos_++].value;
    node->literal = Value(std::move(s));
    return node;
  }
  if (t.type == Type::kInt || t.type == Type::kFloat) {
    ++pos_;
    if (t.type == Type::kFloat) {
      node->literal = Value(std::strtod(t.value.c_str(), nullptr));
      return node;
    }
    errno = 0;
    long long v = std::strtoll(t.value.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return TemplateError(t.line, "an integer literal is too large");
    node->literal = Value(static_cast<int64_t>(v));
    return node;
  }
  if (IsOp("(")) {
    ++pos_;
    if (IsOp(")")) {
      ++pos_;
      node->kind = Expr::Kind::kTuple;
      return node;
    }
    auto inner = ParseTuple();
    if (!inner.ok()) return inner;
    if (auto s = Expect(")"); !s.ok()) return s;
    return inner;
  }
  if (IsOp("[")) return ParseSequence("]", Expr::Kind::kList);
  if (IsOp("{")) return ParseDictLiteral();
  return Unexpected("an expression");
}

absl::StatusOr<ExprPtr> Parser::ParseSequence(absl::string_view close,
                                              Expr::Kind kind) {
  auto node = NewExpr(kind);
  ++pos_;
  while (!IsOp(close)) {
    if (!node->children.empty()) {
      if (auto s = Expect(","); !s.ok()) return s;
      if (IsOp(close)) break;
    }
    auto item = ParseExpression();
    if (!item.ok()) return item;
    node->children.push_back(*std::move(item));
  }
  ++pos_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseDictLiteral() {
  auto node = NewExpr(Expr::Kind::kDict);
  ++pos_;
  while (!IsOp("}")) {
    if (!node->children.empty()) {
      if (auto s = Expect(","); !s.ok()) return s;
      if (IsOp("}")) break;
    }
    auto key = ParseExpression();
    if (!key.ok()) return key;
    if (auto s = Expect(":"); !s.ok()) return s;
    auto value = ParseExpression();
    if (!value.ok()) return value;
    node->children.push_back(*std::move(key));
    node->children.push_back(*std::move(value));
  }
  ++pos_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      ++pos_;
      if (Cur().type == Type::kInt) {
        auto item = NewExpr(Expr::Kind::kItem);
        auto index = NewExpr(Expr::Kind::kLiteral);
        index->literal = Value(static_cast<int64_t>(
            std::strtoll(Cur().value.c_str(), nullptr, 10)));
        ++pos_;
        item->children.push_back(std::move(node));
        item->children.push_back(std::move(index));
        node = std::move(item);
        continue;
      }
      auto attr = NewExpr(Expr::Kind::kAttr);
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      attr->name = *name;
      attr->children.push_back(std::move(node));
      node = std::move(attr);
    } else if (IsOp("[")) {
      auto sub = ParseSubscript(std::move(node));
      if (!sub.ok()) return sub;
      node = *std::move(sub);
    } else if (IsOp("(")) {
      auto call = NewExpr(Expr::Kind::kCall);
      if (auto s = CheckCallee(*node); !s.ok()) return s;
      call->children.push_back(std::move(node));
      if (auto s = ParseCallArgs(*call); !s.ok()) return s;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  auto out = NewExpr(Expr::Kind::kItem);
  ++pos_;  // [
  std::vector<ExprPtr> parts(1);
  bool slice = false;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      if (!IsOp(":")) break;
      ++pos_;
      slice = true;
      parts.emplace_back();
    }
    if (!IsOp(":") && !IsOp("]")) {
      auto e = ParseExpression();
      if (!e.ok()) return e;
      parts.back() = *std::move(e);
    }
  }
  if (IsOp(",")) return Error("tuple subscripts (a[1, 2]) are not supported");
  if (auto s = Expect("]"); !s.ok()) return s;
  if (!slice && parts[0] == nullptr) return Unexpected("an index");
  out->children.push_back(std::move(node));
  if (slice) {
    out->kind = Expr::Kind::kSlice;
    parts.resize(3);
  }
  for (auto& p : parts) out->children.push_back(std::move(p));
  return out;
}

absl::Status Parser::CheckCallee(const Expr& callee) const {
  if (callee.kind == Expr::Kind::kAttr) {
    if (IsMethod(callee.name)) return absl::OkStatus();
    return TemplateError(callee.line, absl::StrCat("method '.", callee.name,
                                                   "()' is not supported"));
  }
  if (callee.kind == Expr::Kind::kName) {
    if (IsGlobalFunction(callee.name)) return absl::OkStatus();
    return TemplateError(callee.line, absl::StrCat("function '", callee.name,
                                                   "()' is not supported"));
  }
  return TemplateError(callee.line,
                       "only named functions and methods can be called");
}

absl::Status Parser::ParseCallArgs(Expr& call) {
  ++pos_;  // (
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      if (auto s = Expect(","); !s.ok()) return s;
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**"))
      return Error("'*args' and '**kwargs' in calls are not supported");
    if (Cur().type == Type::kName && Peek().type == Type::kOp &&
        Peek().value == "=") {
      std::string key = Cur().value;
      pos_ += 2;
      auto value = ParseExpression();
      if (!value.ok()) return value.status();
      call.kwargs.emplace_back(key, *std::move(value));
      continue;
    }
    if (!call.kwargs.empty())
      return Error("a positional argument follows a keyword argument");
    auto arg = ParseExpression();
    if (!arg.ok()) return arg.status();
    call.children.push_back(*std::move(arg));
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    absl::StatusOr<ExprPtr> next;
    if (IsOp("|")) {
      next = ParseFilter(std::move(node));
    } else if (IsName("is")) {
      next = ParseTest(std::move(node));
    } else if (IsOp("(")) {
      return Error("calling the result of a filter or test is not supported");
    } else {
      return node;
    }
    if (!next.ok()) return next;
    node = *std::move(next);
  }
}

absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node) {
  ++pos_;  // |
  auto filter = NewExpr(Expr::Kind::kFilter);
  auto name = ExpectName();
  if (!name.ok()) return name.status();
  if (!IsFilter(*name)) {
    return TemplateError(filter->line,
                         absl::StrCat("filter '", *name, "' is not supported"));
  }
  filter->name = *name;
  filter->children.push_back(std::move(node));
  if (IsOp("(")) {
    if (auto s = ParseCallArgs(*filter); !s.ok()) return s;
  }
  return filter;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  ++pos_;  // is
  auto test = NewExpr(Expr::Kind::kTest);
  if (IsName("not")) {
    ++pos_;
    test->negated = true;
  }
  auto name = ExpectName();
  if (!name.ok()) return name.status();
  if (!IsTest(*name)) {
    return TemplateError(test->line,
                         absl::StrCat("test '", *name, "' is not supported"));
  }
  test->name = *name;
  test->children.push_back(std::move(node));
  if (IsOp("(")) {
    if (auto s = ParseCallArgs(*test); !s.ok()) return s;
    return test;
  }
  static const std::set<Type> kArgStarts = {Type::kName, Type::kString,
                                            Type::kInt, Type::kFloat};
  bool starts = kArgStarts.count(Cur().type) || IsOp("[") || IsOp("{");
  if (starts && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error("tests cannot be chained with 'is'");
    auto arg = ParsePrimary();
    if (!arg.ok()) return arg;
    auto post = ParsePostfix(*std::move(arg));
    if (!post.ok()) return post;
    test->children.push_back(*std::move(post));
  }
  return test;
}

}  // namespace

absl::StatusOr<Program> Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).Run();
}

}  // namespace octet::jinja
