// The parsed template: expressions and statements, each with its line.
//
// One node type per family keeps the tree small to walk: an Expr's kind
// says which of its fields mean what (children are operands in order; a
// null child is an omitted slice bound or `else`). The Program owns the
// tree; Template shares it, so Templates copy cheaply.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace octet::jinja {

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kAttr,     // children[0].name
    kItem,     // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]]
    kCall,     // children[0](children[1..], kwargs)
    kFilter,   // children[0] | name(children[1..], kwargs)
    kTest,     // children[0] is [not] name(children[1..])
    kNeg,
    kPos,
    kNot,
    kBinary,   // children[0] name children[1]; name is the operator
    kCompare,  // children[0] ops[0] children[1] ops[1] ...
    kAnd,
    kOr,
    kCond,  // children[0] if children[1] else children[2]
    kList,
    kTuple,
    kDict,  // keys and values alternate in children
  };
  Kind kind = Kind::kLiteral;
  int line = 1;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition or null for else, body)
    kFor,       // for targets in expr [if filter]: body [else else_body]
    kSet,       // set targets[0] = expr, or set targets[0].attr = expr
    kSetBlock,  // set targets[0] %}body{% endset
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}body{% endgeneration %}
  };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;
  Body body;
  Body else_body;
};

struct Program {
  Body body;
};

}  // namespace octet::jinja
