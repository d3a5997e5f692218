// The filters, tests, methods and global functions chat templates may use,
// with jinja2's and Python's semantics (builtins.cc). The parser refuses
// any other name, so a template either renders as jinja2 would or fails
// to parse, saying which name it needs.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "jinja/value.h"

namespace octet::jinja {

bool IsFilter(absl::string_view name);
bool IsTest(absl::string_view name);
// str and dict methods ("abc".strip(), d.items()) and loop.cycle.
bool IsMethod(absl::string_view name);
bool IsGlobalFunction(absl::string_view name);

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value,
                                  const CallArgs& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value,
                               const CallArgs& args);
// `object.name` as a bound method, or nullopt when `object` has no such
// method.
std::optional<Value> BoundMethod(const Value& object, absl::string_view name);
// range, namespace, dict, strftime_now (raise_exception is the
// evaluator's: it ends the render).
Value GlobalFunction(absl::string_view name);

// The items `for x in value` visits: list items, dict keys, a string's
// characters; none for Undefined; an error for anything else.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

// Attribute lookup as jinja2's environment.getattr does for data: a dict's
// key (or method), a namespace's attribute; Undefined otherwise. A dotted
// name ("a.b") walks, as filters' attribute= arguments do.
Value GetAttr(const Value& object, absl::string_view name);

// The most items a range, a list repetition or a built list may hold
// (jinja2's sandbox allows ranges of 100000).
inline constexpr size_t kMaxRange = 100000;
inline constexpr size_t kMaxListItems = 1 << 20;
inline constexpr size_t kMaxStringBytes = 16 << 20;

}  // namespace octet::jinja
