// Splits a chat template into text and tag tokens, as jinja2's lexer does.
//
// The whitespace rules are applied here, so the parser sees final text:
// newlines normalized to "\n" and one trailing newline dropped
// (keep_trailing_newline=False); "{%-", "{{-", "{#-" strip all whitespace
// before the tag and "-%}", "-}}", "-#}" all whitespace after it;
// trim_blocks drops the first newline after a block or comment tag;
// lstrip_blocks drops the spaces and tabs between a line's start and a
// block or comment tag ("{%+" keeps them). Comments vanish, and
// {% raw %}...{% endraw %} becomes one text token. Inside "{{ }}" and
// "{% %}" the expression is cut into names, numbers, strings (with Python's
// escapes decoded) and operators.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof,
  };
  Type type;
  std::string value;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source,
                                       const LexOptions& options);

// "chat template line N: what".
absl::Status TemplateError(int line, absl::string_view what);

}  // namespace octet::jinja
