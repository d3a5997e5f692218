// The values a chat template computes with, and how Python prints them.
//
// Jinja2 evaluates Python objects; templates only ever see the JSON-shaped
// ones (None, bool, int, float, str, list, dict) plus a few of jinja2's own:
// Undefined (a missing name or key, which prints as "" and is falsy),
// tuples (dict.items() pairs, for-loop unpacking), namespace() objects (the
// one mutable value: `{% set ns.x = ... %}`) and callables (globals such as
// range(), and bound methods such as "abc".strip). Lists and dicts are
// immutable once built (transformers renders in an ImmutableSandboxed
// environment), so they are shared by pointer. Dicts keep insertion order,
// as Python's do; their keys are strings (what JSON gives).
//
// ToStr/Repr print as Python's str()/repr() do (None, True, 1.0, 1e-05,
// ['a', "it's"]); ToJson prints as json.dumps(ensure_ascii=False) does.
// Strings are UTF-8 bytes; the helpers here count and index code points,
// as Python's str does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet::jinja {

struct Value;

struct Undefined {};
struct None {};

struct List {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b)
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(absl::string_view key) const;
  void Set(absl::string_view key, Value value);
};

struct Namespace {
  Dict attrs;
};

struct CallArgs;
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(const CallArgs&)> fn;
};

using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<const Dict>;
using NamespacePtr = std::shared_ptr<Namespace>;
using CallablePtr = std::shared_ptr<const Callable>;

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr,
               DictPtr, NamespacePtr, CallablePtr>
      v;

  Value() = default;
  Value(None n) : v(n) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(int64_t{i}) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(ListPtr l) : v(std::move(l)) {}
  Value(DictPtr d) : v(std::move(d)) {}
  Value(NamespacePtr n) : v(std::move(n)) {}
  Value(CallablePtr c) : v(std::move(c)) {}

  bool undefined() const { return std::holds_alternative<Undefined>(v); }
  bool none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  // Python's int includes bool.
  bool is_int() const {
    return is_bool() || std::holds_alternative<int64_t>(v);
  }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(v); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v); }

  int64_t as_int() const;   // bool or int
  double as_float() const;  // any number
  const std::string& str() const { return std::get<std::string>(v); }
  const List& list() const { return *std::get<ListPtr>(v); }
  const Dict& dict() const { return *std::get<DictPtr>(v); }
  Namespace& ns() const { return *std::get<NamespacePtr>(v); }
  const Callable& callable() const { return *std::get<CallablePtr>(v); }
};

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // The argument at `index`, or the keyword `name`, or nullptr.
  const Value* Get(size_t index, absl::string_view name) const;
};

Value MakeList(std::vector<Value> items, bool tuple = false);
Value MakeDict(Dict dict);

// Deeper values than this (a namespace holding itself) are an error.
inline constexpr int kMaxValueDepth = 64;

// Python's bool(x).
bool Truthy(const Value& value);
// Python's ==. Lists element-wise, dicts as key sets, 1 == 1.0 == True.
bool Equal(const Value& a, const Value& b, int depth = 0);
// A name for error messages: "str", "list", "undefined", ...
absl::string_view TypeName(const Value& value);

// Python's str() and repr().
absl::StatusOr<std::string> ToStr(const Value& value);
absl::StatusOr<std::string> Repr(const Value& value, int depth = 0);
std::string FloatRepr(double d);
std::string StringRepr(absl::string_view s);

struct JsonOptions {
  std::optional<int> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(value, ensure_ascii=False, ...).
absl::StatusOr<std::string> ToJson(const Value& value,
                                   const JsonOptions& options);

// UTF-8 code points, as Python's str indexes them.
std::vector<absl::string_view> CodePoints(absl::string_view s);
size_t CodePointCount(absl::string_view s);
// Python's str.isspace() for one code point.
bool IsPySpace(absl::string_view code_point);

}  // namespace octet::jinja
