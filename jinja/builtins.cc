// jinja2's filters and tests and Python's str and dict methods, as chat
// templates use them (builtins.h). Each follows the CPython or jinja2 code
// it stands for; where jinja2 returns a generator (reverse, select, map,
// items) this returns a list, which iterates, joins and counts the same.
// Case mapping (upper, lower, title, capitalize) is ASCII-only.
#include "jinja/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace octet::jinja {
namespace {

using Filter = absl::StatusOr<Value> (*)(const Value&, const CallArgs&);
using Test = absl::StatusOr<bool> (*)(const Value&, const CallArgs&);

absl::Status Err(absl::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

absl::StatusOr<std::string> StrArg(const CallArgs& args, size_t i,
                                   absl::string_view name,
                                   std::string fallback) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->none()) return fallback;
  return ToStr(*v);
}

std::optional<int64_t> IntArg(const CallArgs& args, size_t i,
                              absl::string_view name) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || !v->is_int()) return std::nullopt;
  return v->as_int();
}

bool BoolArg(const CallArgs& args, size_t i, absl::string_view name) {
  const Value* v = args.Get(i, name);
  return v != nullptr && Truthy(*v);
}

}  // namespace

absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
  std::vector<Value> out;
  if (value.undefined()) return out;
  if (value.is_list()) return value.list().items;
  if (value.is_dict()) {
    for (const auto& item : value.dict().items)
      out.push_back(Value(item.first));
    return out;
  }
  if (value.is_string()) {
    for (absl::string_view cp : CodePoints(value.str()))
      out.push_back(Value(std::string(cp)));
    return out;
  }
  return Err(absl::StrCat("'", TypeName(value), "' object is not iterable"));
}

namespace {

std::string AsciiTitle(absl::string_view s, bool python_method) {
  std::string out(s);
  bool word = false;
  for (char& c : out) {
    bool alpha = absl::ascii_isalpha(static_cast<unsigned char>(c));
    c = word ? absl::ascii_tolower(static_cast<unsigned char>(c))
             : absl::ascii_toupper(static_cast<unsigned char>(c));
    // jinja2's title filter starts words after -, whitespace, ( { [ <;
    // str.title after any character that is not a letter.
    word =
        python_method
            ? alpha
            : !(absl::ascii_isspace(static_cast<unsigned char>(c)) ||
                absl::string_view("-({[<").find(c) != absl::string_view::npos);
  }
  return out;
}

std::string Capitalize(absl::string_view s) {
  std::string out = absl::AsciiStrToLower(s);
  if (!out.empty())
    out[0] = absl::ascii_toupper(static_cast<unsigned char>(out[0]));
  return out;
}

// str.strip / lstrip / rstrip: whitespace, or the code points of `chars`.
std::string Strip(absl::string_view s, const std::optional<std::string>& chars,
                  bool left, bool right) {
  std::vector<absl::string_view> cps = CodePoints(s);
  std::vector<absl::string_view> set;
  if (chars) set = CodePoints(*chars);
  auto strip = [&](absl::string_view cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end()
                 : IsPySpace(cp);
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip(cps[b])) ++b;
  while (right && e > b && strip(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) absl::StrAppend(&out, cps[i]);
  return out;
}

absl::StatusOr<std::string> Replace(absl::string_view s, absl::string_view old,
                                    absl::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<absl::string_view> cps = CodePoints(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count)
        absl::StrAppend(&out, repl);
      if (i < cps.size()) absl::StrAppend(&out, cps[i]);
      if (out.size() > kMaxStringBytes)
        return Err("replace: the result is too long");
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t at = s.find(old, pos);
    if (at == absl::string_view::npos) break;
    absl::StrAppend(&out, s.substr(pos, at - pos), repl);
    pos = at + old.size();
    if (out.size() > kMaxStringBytes)
      return Err("replace: the result is too long");
  }
  absl::StrAppend(&out, s.substr(pos));
  return out;
}

// str.split(sep=None, maxsplit=-1).
Value Split(absl::string_view s, const std::optional<std::string>& sep,
            int64_t maxsplit) {
  std::vector<Value> parts;
  if (sep) {
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      size_t at = s.find(*sep, pos);
      if (at == absl::string_view::npos) break;
      parts.push_back(Value(std::string(s.substr(pos, at - pos))));
      pos = at + sep->size();
    }
    parts.push_back(Value(std::string(s.substr(pos))));
    return MakeList(std::move(parts));
  }
  std::vector<absl::string_view> cps = CodePoints(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    std::string word;
    bool last = maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit;
    if (last) {
      for (; i < cps.size(); ++i) absl::StrAppend(&word, cps[i]);
      parts.push_back(Value(Strip(word, std::nullopt, false, true)));
      break;
    }
    for (; i < cps.size() && !IsPySpace(cps[i]); ++i)
      absl::StrAppend(&word, cps[i]);
    parts.push_back(Value(std::move(word)));
  }
  return MakeList(std::move(parts));
}

// Python's < for sorting: numbers, strings (code point order is UTF-8 byte
// order), lists lexicographically.
absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return Err(absl::StrCat("'<' is not supported between '", TypeName(a),
                          "' and '", TypeName(b), "'"));
}

Value Lowered(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value(absl::AsciiStrToLower(v.str()));
}

std::optional<double> ParsePyFloat(absl::string_view text) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> ParsePyInt(absl::string_view text, int base) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty() || s.find_first_of(" \t") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, base);
  if (end != s.c_str() + s.size() || errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

// ---- filters ----

absl::StatusOr<Value> FTrim(const Value& v, const CallArgs& a) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  const Value* chars = a.Get(0, "chars");
  std::optional<std::string> set;
  if (chars != nullptr && !chars->none())
    set = chars->is_string() ? chars->str() : "";
  return Value(Strip(*s, set, true, true));
}

absl::StatusOr<Value> FLength(const Value& v, const CallArgs&) {
  if (v.undefined()) return Value(0);
  if (v.is_string())
    return Value(static_cast<int64_t>(CodePointCount(v.str())));
  if (v.is_list()) return Value(static_cast<int64_t>(v.list().items.size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
  return Err(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
}

absl::StatusOr<Value> FLower(const Value& v, const CallArgs&) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  return Value(absl::AsciiStrToLower(*s));
}

absl::StatusOr<Value> FUpper(const Value& v, const CallArgs&) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  return Value(absl::AsciiStrToUpper(*s));
}

absl::StatusOr<Value> FCapitalize(const Value& v, const CallArgs&) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  return Value(Capitalize(*s));
}

absl::StatusOr<Value> FTitle(const Value& v, const CallArgs&) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  return Value(AsciiTitle(*s, false));
}

absl::StatusOr<Value> FToJson(const Value& v, const CallArgs& a) {
  JsonOptions options;
  options.ensure_ascii = BoolArg(a, 0, "ensure_ascii");
  options.indent = IntArg(a, 1, "indent");
  if (options.indent) options.item_separator.resize(1);  // ", " becomes ","
  const Value* seps = a.Get(2, "separators");
  if (seps != nullptr && !seps->none()) {
    if (!seps->is_list() || seps->list().items.size() != 2 ||
        !seps->list().items[0].is_string() ||
        !seps->list().items[1].is_string()) {
      return Err("tojson: separators must be two strings");
    }
    options.item_separator = seps->list().items[0].str();
    options.key_separator = seps->list().items[1].str();
  }
  options.sort_keys = BoolArg(a, 3, "sort_keys");
  auto s = ToJson(v, options);
  if (!s.ok()) return s.status();
  return Value(*std::move(s));
}

absl::StatusOr<Value> FDefault(const Value& v, const CallArgs& a) {
  const Value* fallback = a.Get(0, "default_value");
  bool boolean = BoolArg(a, 1, "boolean");
  if (v.undefined() || (boolean && !Truthy(v))) {
    return fallback != nullptr ? *fallback : Value(std::string());
  }
  return v;
}

absl::StatusOr<Value> FString(const Value& v, const CallArgs&) {
  auto s = ToStr(v);
  if (!s.ok()) return s.status();
  return Value(*std::move(s));
}

absl::StatusOr<Value> FJoin(const Value& v, const CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto sep = StrArg(a, 0, "d", "");
  if (!sep.ok()) return sep.status();
  const Value* attribute = a.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    Value item = (*items)[i];
    if (attribute != nullptr && attribute->is_string())
      item = GetAttr(item, attribute->str());
    auto s = ToStr(item);
    if (!s.ok()) return s.status();
    if (i > 0) out += *sep;
    out += *s;
    if (out.size() > kMaxStringBytes)
      return Err("join: the result is too long");
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> FFirst(const Value& v, const CallArgs&) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  return items->empty() ? Value() : items->front();
}

absl::StatusOr<Value> FLast(const Value& v, const CallArgs&) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  return items->empty() ? Value() : items->back();
}

absl::StatusOr<Value> FList(const Value& v, const CallArgs&) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  return MakeList(*std::move(items));
}

absl::StatusOr<Value> FReverse(const Value& v, const CallArgs&) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  std::reverse(items->begin(), items->end());
  if (!v.is_string()) return MakeList(*std::move(items));
  std::string out;
  for (const Value& c : *items) out += c.str();
  return Value(std::move(out));
}

absl::StatusOr<Value> FSort(const Value& v, const CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  bool reverse = BoolArg(a, 0, "reverse");
  bool case_sensitive = BoolArg(a, 1, "case_sensitive");
  const Value* attribute = a.Get(2, "attribute");
  auto key = [&](const Value& item) {
    Value k = attribute != nullptr && attribute->is_string()
                  ? GetAttr(item, attribute->str())
                  : item;
    return Lowered(k, case_sensitive);
  };
  absl::Status error;
  std::stable_sort(
      items->begin(), items->end(), [&](const Value& x, const Value& y) {
        auto less = reverse ? Less(key(y), key(x)) : Less(key(x), key(y));
        if (!less.ok()) error = less.status();
        return less.ok() && *less;
      });
  if (!error.ok()) return error;
  return MakeList(*std::move(items));
}

absl::StatusOr<Value> FReplace(const Value& v, const CallArgs& a) {
  auto s = ToStr(v);
  auto old = StrArg(a, 0, "old", "");
  auto repl = StrArg(a, 1, "new", "");
  if (!s.ok() || !old.ok() || !repl.ok())
    return Err("replace: arguments must be strings");
  auto out = Replace(*s, *old, *repl, IntArg(a, 2, "count").value_or(-1));
  if (!out.ok()) return out.status();
  return Value(*std::move(out));
}

absl::StatusOr<Value> FInt(const Value& v, const CallArgs& a) {
  const Value* fallback = a.Get(0, "default");
  Value def = fallback != nullptr ? *fallback : Value(0);
  if (v.is_int()) return Value(v.as_int());
  if (v.is_float()) {
    double d = std::trunc(v.as_float());
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18)
      return Err("int: the number is out of range");
    return Value(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return def;
  if (auto i = ParsePyInt(
          v.str(), static_cast<int>(IntArg(a, 1, "base").value_or(10)))) {
    return Value(*i);
  }
  auto d = ParsePyFloat(v.str());
  if (!d) return def;
  if (!std::isfinite(*d) || std::fabs(*d) > 9.2e18)
    return Err("int: the number is out of range");
  return Value(static_cast<int64_t>(std::trunc(*d)));
}

absl::StatusOr<Value> FFloat(const Value& v, const CallArgs& a) {
  const Value* fallback = a.Get(0, "default");
  Value def = fallback != nullptr ? *fallback : Value(0.0);
  if (v.is_number()) return Value(v.as_float());
  if (!v.is_string()) return def;
  auto d = ParsePyFloat(v.str());
  return d ? Value(*d) : def;
}

absl::StatusOr<Value> FAbs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() && v.as_int() != INT64_MIN)
    return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  return Err(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

double RoundHalfEven(double value, int64_t precision) {
  if (precision >= 0 && precision < 300) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), value);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(value / scale) * scale;
}

absl::StatusOr<Value> FRound(const Value& v, const CallArgs& a) {
  if (!v.is_number())
    return Err(absl::StrCat("round: '", TypeName(v), "' is not a number"));
  int64_t precision = IntArg(a, 0, "precision").value_or(0);
  auto method = StrArg(a, 1, "method", "common");
  if (!method.ok()) return method.status();
  if (*method == "common") {
    if (v.is_int() && precision >= 0) return Value(v.as_int());
    return Value(RoundHalfEven(v.as_float(), precision));
  }
  if (*method != "ceil" && *method != "floor") {
    return Err("round: method must be 'common', 'ceil' or 'floor'");
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  return Value((*method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

absl::StatusOr<Value> FItems(const Value& v, const CallArgs&) {
  if (v.undefined()) return MakeList({});
  if (!v.is_dict()) return Err("items: can only get item pairs from a mapping");
  std::vector<Value> out;
  for (const auto& [key, value] : v.dict().items) {
    out.push_back(MakeList({Value(key), value}, /*tuple=*/true));
  }
  return MakeList(std::move(out));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& a,
                                     bool by_attribute, bool select) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.args.empty() || !a.args[0].is_string())
      return Err("selectattr: an attribute name is required");
    attribute = a.args[0].str();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.args.size() > next) {
    if (!a.args[next].is_string())
      return Err("select: the test name must be a string");
    test = a.args[next].str();
    if (!IsTest(test))
      return Err(absl::StrCat("test '", test, "' is not supported"));
    test_args.args.assign(a.args.begin() + static_cast<long>(next) + 1,
                          a.args.end());
  }
  std::vector<Value> out;
  for (const Value& item : *items) {
    Value subject = by_attribute ? GetAttr(item, attribute) : item;
    absl::StatusOr<bool> pass = test.empty()
                                    ? absl::StatusOr<bool>(Truthy(subject))
                                    : ApplyTest(test, subject, test_args);
    if (!pass.ok()) return pass.status();
    if (*pass == select) out.push_back(item);
  }
  return MakeList(std::move(out));
}

absl::StatusOr<Value> FSelect(const Value& v, const CallArgs& a) {
  return SelectOrReject(v, a, false, true);
}
absl::StatusOr<Value> FReject(const Value& v, const CallArgs& a) {
  return SelectOrReject(v, a, false, false);
}
absl::StatusOr<Value> FSelectAttr(const Value& v, const CallArgs& a) {
  return SelectOrReject(v, a, true, true);
}
absl::StatusOr<Value> FRejectAttr(const Value& v, const CallArgs& a) {
  return SelectOrReject(v, a, true, false);
}

absl::StatusOr<Value> FMap(const Value& v, const CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value* attribute = a.Get(SIZE_MAX, "attribute");
  const Value* fallback = a.Get(SIZE_MAX, "default");
  std::vector<Value> out;
  if (attribute != nullptr) {
    if (!attribute->is_string()) return Err("map: attribute must be a string");
    for (const Value& item : *items) {
      Value got = GetAttr(item, attribute->str());
      out.push_back(got.undefined() && fallback != nullptr ? *fallback : got);
    }
    return MakeList(std::move(out));
  }
  if (a.args.empty() || !a.args[0].is_string() || !IsFilter(a.args[0].str())) {
    return Err("map: needs attribute= or the name of a supported filter");
  }
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : *items) {
    auto mapped = ApplyFilter(a.args[0].str(), item, rest);
    if (!mapped.ok()) return mapped.status();
    out.push_back(*std::move(mapped));
  }
  return MakeList(std::move(out));
}

absl::StatusOr<Value> FUnique(const Value& v, const CallArgs& a) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  bool case_sensitive = BoolArg(a, 0, "case_sensitive");
  const Value* attribute = a.Get(1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& item : *items) {
    Value key = Lowered(attribute != nullptr && attribute->is_string()
                            ? GetAttr(item, attribute->str())
                            : item,
                        case_sensitive);
    bool dup = std::any_of(seen.begin(), seen.end(),
                           [&](const Value& s) { return Equal(s, key); });
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return MakeList(std::move(out));
}

absl::StatusOr<Value> FSafe(const Value& v, const CallArgs&) { return v; }

const std::map<absl::string_view, Filter>& Filters() {
  static const auto* filters =
      new std::map<absl::string_view, Filter>{{"trim", FTrim},
                                              {"length", FLength},
                                              {"count", FLength},
                                              {"lower", FLower},
                                              {"upper", FUpper},
                                              {"capitalize", FCapitalize},
                                              {"title", FTitle},
                                              {"tojson", FToJson},
                                              {"default", FDefault},
                                              {"d", FDefault},
                                              {"string", FString},
                                              {"join", FJoin},
                                              {"first", FFirst},
                                              {"last", FLast},
                                              {"list", FList},
                                              {"reverse", FReverse},
                                              {"sort", FSort},
                                              {"replace", FReplace},
                                              {"int", FInt},
                                              {"float", FFloat},
                                              {"abs", FAbs},
                                              {"round", FRound},
                                              {"items", FItems},
                                              {"select", FSelect},
                                              {"reject", FReject},
                                              {"selectattr", FSelectAttr},
                                              {"rejectattr", FRejectAttr},
                                              {"map", FMap},
                                              {"unique", FUnique},
                                              {"safe", FSafe}};
  return *filters;
}

// ---- tests ----

absl::StatusOr<bool> Compare(absl::string_view op, const Value& v,
                             const CallArgs& a) {
  if (a.args.empty())
    return Err(absl::StrCat("test '", op, "' needs an argument"));
  const Value& other = a.args[0];
  if (op == "eq") return Equal(v, other);
  if (op == "ne") return !Equal(v, other);
  absl::StatusOr<bool> r =
      (op == "lt" || op == "ge") ? Less(v, other) : Less(other, v);
  if (!r.ok()) return r;
  return (op == "lt" || op == "gt") ? *r : !*r;
}

absl::StatusOr<bool> NumberTest(absl::string_view name, const Value& v,
                                const CallArgs& a) {
  if (!v.is_int())
    return Err(absl::StrCat("test '", name, "' needs an integer"));
  int64_t n = v.as_int();
  if (name == "odd") return n % 2 != 0;
  if (name == "even") return n % 2 == 0;
  auto d = IntArg(a, 0, "num");
  if (!d || *d == 0) return Err("divisibleby needs a non-zero integer");
  return n % *d == 0;
}

absl::StatusOr<bool> InTest(const Value& v, const CallArgs& a) {
  if (a.args.empty()) return Err("test 'in' needs an argument");
  const Value& seq = a.args[0];
  if (seq.is_string()) {
    if (!v.is_string())
      return Err("'in <string>' requires a string on the left");
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_dict())
    return v.is_string() && seq.dict().Find(v.str()) != nullptr;
  if (seq.is_list()) {
    for (const Value& item : seq.list().items) {
      if (Equal(item, v)) return true;
    }
    return false;
  }
  if (seq.undefined()) return false;
  return Err(
      absl::StrCat("argument of type '", TypeName(seq), "' is not iterable"));
}

const std::set<absl::string_view>& TestNames() {
  static const auto* names = new std::set<absl::string_view>{
      "defined",     "undefined", "none",     "string",      "number",
      "integer",     "float",     "boolean",  "mapping",     "iterable",
      "sequence",    "true",      "false",    "odd",         "even",
      "divisibleby", "equalto",   "eq",       "ne",          "lt",
      "le",          "gt",        "ge",       "greaterthan", "lessthan",
      "in",          "sameas",    "callable", "lower",       "upper"};
  return *names;
}

absl::StatusOr<bool> TypeTest(absl::string_view name, const Value& v) {
  if (name == "defined") return !v.undefined();
  if (name == "undefined") return v.undefined();
  if (name == "none") return v.none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int() && !v.is_bool();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable")
    return v.undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence")
    return v.undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "true") return v.is_bool() && std::get<bool>(v.v);
  if (name == "false") return v.is_bool() && !std::get<bool>(v.v);
  if (name == "callable") return v.is_callable();
  if (name == "lower")
    return v.is_string() && absl::AsciiStrToLower(v.str()) == v.str();
  if (name == "upper")
    return v.is_string() && absl::AsciiStrToUpper(v.str()) == v.str();
  return Err(absl::StrCat("test '", name, "' is not supported"));
}

// ---- methods ----

absl::StatusOr<Value> StringMethod(const std::string& s, absl::string_view name,
                                   const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.Get(0, "chars");
    std::optional<std::string> set;
    if (chars != nullptr && chars->is_string()) set = chars->str();
    return Value(Strip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* arg = a.Get(0, "prefix");
    if (arg == nullptr) return Err(absl::StrCat(name, "() takes an argument"));
    std::vector<Value> options =
        arg->is_list() ? arg->list().items : std::vector<Value>{*arg};
    for (const Value& o : options) {
      if (!o.is_string()) return Err(absl::StrCat(name, "() needs strings"));
      bool hit =
          name == "startswith" ? s.starts_with(o.str()) : s.ends_with(o.str());
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "split") {
    const Value* sep = a.Get(0, "sep");
    std::optional<std::string> separator;
    if (sep != nullptr && !sep->none()) {
      if (!sep->is_string() || sep->str().empty())
        return Err("split(): empty or non-string separator");
      separator = sep->str();
    }
    return Split(s, separator, IntArg(a, 1, "maxsplit").value_or(-1));
  }
  if (name == "upper") return Value(absl::AsciiStrToUpper(s));
  if (name == "lower") return Value(absl::AsciiStrToLower(s));
  if (name == "title") return Value(AsciiTitle(s, true));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "replace") {
    const Value* old = a.Get(0, "old");
    const Value* repl = a.Get(1, "new");
    if (old == nullptr || repl == nullptr || !old->is_string() ||
        !repl->is_string()) {
      return Err("replace() takes two strings");
    }
    auto out =
        Replace(s, old->str(), repl->str(), IntArg(a, 2, "count").value_or(-1));
    if (!out.ok()) return out.status();
    return Value(*std::move(out));
  }
  return Err(absl::StrCat("'str' object has no method '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const DictPtr& d, absl::string_view name,
                                 const CallArgs& a) {
  std::vector<Value> out;
  if (name == "get") {
    const Value* key = a.Get(0, "key");
    const Value* fallback = a.Get(1, "default");
    const Value* got =
        key != nullptr && key->is_string() ? d->Find(key->str()) : nullptr;
    if (got != nullptr) return *got;
    return fallback != nullptr ? *fallback : Value(None{});
  }
  for (const auto& [key, value] : d->items) {
    if (name == "keys") out.push_back(Value(key));
    if (name == "values") out.push_back(value);
    if (name == "items") out.push_back(MakeList({Value(key), value}, true));
  }
  return MakeList(std::move(out));
}

const std::set<absl::string_view> kStringMethods = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split",
    "upper", "lower",  "title",  "capitalize", "replace"};
const std::set<absl::string_view> kDictMethods = {"items", "keys", "values",
                                                  "get"};

// ---- globals ----

absl::StatusOr<Value> Range(const CallArgs& a) {
  for (const Value& v : a.args) {
    if (!v.is_int()) return Err("range() takes integers");
  }
  if (a.args.empty() || a.args.size() > 3)
    return Err("range() takes 1 to 3 arguments");
  int64_t start = a.args.size() > 1 ? a.args[0].as_int() : 0;
  int64_t stop = a.args.size() > 1 ? a.args[1].as_int() : a.args[0].as_int();
  int64_t step = a.args.size() > 2 ? a.args[2].as_int() : 1;
  if (step == 0) return Err("range() step must not be zero");
  long double count =
      step > 0 ? std::ceil((static_cast<long double>(stop) - start) / step)
               : std::ceil((static_cast<long double>(start) - stop) / -step);
  if (count > static_cast<long double>(kMaxRange)) {
    return Err(absl::StrCat("range() of more than ", kMaxRange,
                            " items (the sandbox's limit)"));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < static_cast<int64_t>(std::max<long double>(count, 0));
       ++i) {
    out.push_back(Value(start + i * step));
  }
  return MakeList(std::move(out));
}

absl::StatusOr<Value> MakeNamespaceOrDict(const CallArgs& a, bool ns) {
  Dict attrs;
  if (!a.args.empty()) {
    if (a.args.size() > 1 || !a.args[0].is_dict())
      return Err("namespace()/dict() takes one dict or keywords");
    attrs = a.args[0].dict();
  }
  for (const auto& [key, value] : a.kwargs) attrs.Set(key, value);
  if (!ns) return MakeDict(std::move(attrs));
  auto space = std::make_shared<Namespace>();
  space->attrs = std::move(attrs);
  return Value(NamespacePtr(std::move(space)));
}

absl::StatusOr<Value> StrftimeNow(const CallArgs& a) {
  if (a.args.size() != 1 || !a.args[0].is_string())
    return Err("strftime_now() takes a format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), a.args[0].str().c_str(), &local);
  return Value(std::string(buf, n));
}

Value MakeCallable(std::string name,
                   std::function<absl::StatusOr<Value>(const CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(CallablePtr(std::move(c)));
}

}  // namespace

bool IsFilter(absl::string_view name) { return Filters().count(name) > 0; }
bool IsTest(absl::string_view name) { return TestNames().count(name) > 0; }
bool IsMethod(absl::string_view name) {
  return kStringMethods.count(name) || kDictMethods.count(name) ||
         name == "cycle";
}
bool IsGlobalFunction(absl::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" ||
         name == "raise_exception" || name == "strftime_now";
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value,
                                  const CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end())
    return Err(absl::StrCat("filter '", name, "' is not supported"));
  return it->second(value, args);
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value,
                               const CallArgs& args) {
  static const std::map<absl::string_view, absl::string_view> kCompare = {
      {"equalto", "eq"},     {"eq", "eq"},       {"sameas", "eq"}, {"ne", "ne"},
      {"lt", "lt"},          {"lessthan", "lt"}, {"le", "le"},     {"gt", "gt"},
      {"greaterthan", "gt"}, {"ge", "ge"}};
  if (auto it = kCompare.find(name); it != kCompare.end()) {
    if (name == "sameas" && !args.args.empty() &&
        !(value.none() || value.is_bool())) {
      return Err("test 'sameas' is only supported for none, true and false");
    }
    return Compare(it->second, value, args);
  }
  if (name == "odd" || name == "even" || name == "divisibleby")
    return NumberTest(name, value, args);
  if (name == "in") return InTest(value, args);
  return TypeTest(name, value);
}

std::optional<Value> BoundMethod(const Value& object, absl::string_view name) {
  if (object.is_string() && kStringMethods.count(name)) {
    std::string s = object.str();
    std::string n(name);
    return MakeCallable(
        n, [s, n](const CallArgs& a) { return StringMethod(s, n, a); });
  }
  if (object.is_dict() && kDictMethods.count(name)) {
    DictPtr d = std::get<DictPtr>(object.v);
    std::string n(name);
    return MakeCallable(
        n, [d, n](const CallArgs& a) { return DictMethod(d, n, a); });
  }
  return std::nullopt;
}

Value GlobalFunction(absl::string_view name) {
  if (name == "range") return MakeCallable("range", Range);
  if (name == "namespace") {
    return MakeCallable("namespace", [](const CallArgs& a) {
      return MakeNamespaceOrDict(a, true);
    });
  }
  if (name == "dict") {
    return MakeCallable("dict", [](const CallArgs& a) {
      return MakeNamespaceOrDict(a, false);
    });
  }
  if (name == "strftime_now") return MakeCallable("strftime_now", StrftimeNow);
  return Value();
}

Value GetAttr(const Value& object, absl::string_view name) {
  Value current = object;
  for (absl::string_view part : absl::StrSplit(name, '.')) {
    const Value* next = nullptr;
    if (current.is_dict()) next = current.dict().Find(part);
    if (current.is_namespace()) next = current.ns().attrs.Find(part);
    if (current.is_list() && !part.empty() &&
        std::all_of(part.begin(), part.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      size_t i = std::strtoul(std::string(part).c_str(), nullptr, 10);
      if (i < current.list().items.size()) next = &current.list().items[i];
    }
    if (next == nullptr) return Value();
    current = *next;
  }
  return current;
}

}  // namespace octet::jinja
