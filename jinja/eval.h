// Runs a parsed template (ast.h) over its variables, with jinja2's scoping:
// a for loop's body gets a fresh scope each iteration (so a `set` inside
// it is gone after the iteration: templates carry state out of loops in
// namespace() objects), `if` bodies share their enclosing scope.
//
// Templates come from checkpoint files, so the work is bounded: output
// over max_output bytes, more than max_iterations loop iterations in all,
// or more than max_work bytes of strings and lists built along the way end
// the render with an error, never a hang.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/template.h"  // Limits

namespace octet::jinja {

absl::StatusOr<std::string> Evaluate(const Program& program,
                                     const Dict& variables,
                                     const Limits& limits);

}  // namespace octet::jinja
