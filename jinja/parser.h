// Builds the tree (ast.h) from the lexer's tokens with jinja2's grammar and
// operator precedence, refusing what the subset leaves out: the statements
// macro, call, include, import, from, extends, block, filter, with,
// autoescape, do; filters, tests, methods and functions that builtins.h
// does not know; nesting deeper than kMaxNesting.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace octet::jinja {

inline constexpr int kMaxNesting = 64;

absl::StatusOr<Program> Parse(const std::vector<Token>& tokens);

}  // namespace octet::jinja
