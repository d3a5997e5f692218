// Python's truth, equality and printing of template values (value.h).
//
// Float printing follows CPython's repr: the shortest digits that read back
// to the same double (std::to_chars gives them), then positional notation
// for exponents -4 to 15 and "1e-05"-style notation outside them.
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace octet::jinja {
namespace {

absl::Status TooDeep() {
  return absl::InvalidArgumentError(absl::StrCat(
      "a value is nested more than ", kMaxValueDepth, " levels deep"));
}

void AppendEscapedCodePoint(absl::string_view cp, std::string& out) {
  auto byte = [&](size_t i) { return static_cast<uint32_t>(cp[i]) & 0x3f; };
  uint32_t c = static_cast<unsigned char>(cp[0]);
  if (cp.size() == 2) c = ((c & 0x1f) << 6) | byte(1);
  if (cp.size() == 3) c = ((c & 0x0f) << 12) | (byte(1) << 6) | byte(2);
  if (cp.size() == 4) {
    c = ((c & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
  }
  char buf[16];
  if (c >= 0x10000) {
    c -= 0x10000;
    std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (c >> 10),
                  0xdc00 + (c & 0x3ff));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
  }
  out += buf;
}

void AppendJsonChar(unsigned char c, std::string& out) {
  switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
  }
}

void AppendJsonString(absl::string_view s, bool ensure_ascii,
                      std::string& out) {
  out += '"';
  if (!ensure_ascii) {
    for (unsigned char c : s) AppendJsonChar(c, out);
  } else {
    for (absl::string_view cp : CodePoints(s)) {
      if (static_cast<unsigned char>(cp[0]) < 0x80) {
        AppendJsonChar(static_cast<unsigned char>(cp[0]), out);
      } else {
        AppendEscapedCodePoint(cp, out);
      }
    }
  }
  out += '"';
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FloatRepr(d);
}

absl::Status AppendJson(const Value& value, const JsonOptions& options,
                        int depth, std::string& out);

void JsonNewline(const JsonOptions& options, int depth, std::string& out) {
  if (!options.indent) return;
  out += '\n';
  out.append(static_cast<size_t>(std::max(0, *options.indent)) * depth, ' ');
}

absl::string_view ItemSeparator(const JsonOptions& options) {
  return options.item_separator;
}

absl::Status AppendJsonList(const List& list, const JsonOptions& options,
                            int depth, std::string& out) {
  if (list.items.empty()) {
    out += "[]";
    return absl::OkStatus();
  }
  out += '[';
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, ItemSeparator(options));
    JsonNewline(options, depth + 1, out);
    if (auto s = AppendJson(list.items[i], options, depth + 1, out); !s.ok()) {
      return s;
    }
  }
  JsonNewline(options, depth, out);
  out += ']';
  return absl::OkStatus();
}

absl::Status AppendJsonDict(const Dict& dict, const JsonOptions& options,
                            int depth, std::string& out) {
  if (dict.items.empty()) {
    out += "{}";
    return absl::OkStatus();
  }
  std::vector<const std::pair<std::string, Value>*> items;
  for (const auto& item : dict.items) items.push_back(&item);
  if (options.sort_keys) {
    std::stable_sort(items.begin(), items.end(),
                     [](auto* a, auto* b) { return a->first < b->first; });
  }
  out += '{';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, ItemSeparator(options));
    JsonNewline(options, depth + 1, out);
    AppendJsonString(items[i]->first, options.ensure_ascii, out);
    out += options.key_separator;
    if (auto s = AppendJson(items[i]->second, options, depth + 1, out);
        !s.ok()) {
      return s;
    }
  }
  JsonNewline(options, depth, out);
  out += '}';
  return absl::OkStatus();
}

absl::Status AppendJson(const Value& value, const JsonOptions& options,
                        int depth, std::string& out) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (value.none()) {
    out += "null";
  } else if (value.is_bool()) {
    out += std::get<bool>(value.v) ? "true" : "false";
  } else if (value.is_int()) {
    out += std::to_string(value.as_int());
  } else if (value.is_float()) {
    out += JsonFloat(value.as_float());
  } else if (value.is_string()) {
    AppendJsonString(value.str(), options.ensure_ascii, out);
  } else if (value.is_list()) {
    return AppendJsonList(value.list(), options, depth, out);
  } else if (value.is_dict()) {
    return AppendJsonDict(value.dict(), options, depth, out);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tojson: a value of type ", TypeName(value),
                     " is not JSON serializable"));
  }
  return absl::OkStatus();
}

bool DictEqual(const Dict& a, const Dict& b, int depth) {
  if (a.items.size() != b.items.size()) return false;
  for (const auto& [key, value] : a.items) {
    const Value* other = b.Find(key);
    if (other == nullptr || !Equal(value, *other, depth + 1)) return false;
  }
  return true;
}

}  // namespace

const Value* Dict::Find(absl::string_view key) const {
  for (const auto& item : items) {
    if (item.first == key) return &item.second;
  }
  return nullptr;
}

void Dict::Set(absl::string_view key, Value value) {
  for (auto& item : items) {
    if (item.first == key) {
      item.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::string(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, absl::string_view name) const {
  if (index < args.size()) return &args[index];
  for (const auto& [key, value] : kwargs) {
    if (key == name) return &value;
  }
  return nullptr;
}

int64_t Value::as_int() const {
  if (is_bool()) return std::get<bool>(v) ? 1 : 0;
  return std::get<int64_t>(v);
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(v);
  return static_cast<double>(as_int());
}

Value MakeList(std::vector<Value> items, bool tuple) {
  auto list = std::make_shared<List>();
  list->items = std::move(items);
  list->tuple = tuple;
  return Value(ListPtr(std::move(list)));
}

Value MakeDict(Dict dict) {
  return Value(DictPtr(std::make_shared<Dict>(std::move(dict))));
}

bool Truthy(const Value& value) {
  if (value.undefined() || value.none()) return false;
  if (value.is_int()) return value.as_int() != 0;
  if (value.is_float()) return value.as_float() != 0.0;
  if (value.is_string()) return !value.str().empty();
  if (value.is_list()) return !value.list().items.empty();
  if (value.is_dict()) return !value.dict().items.empty();
  return true;
}

bool Equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.undefined() || a.none()) return true;
  if (a.is_string()) return a.str() == b.str();
  if (a.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    if (x.size() != y.size() || a.list().tuple != b.list().tuple) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!Equal(x[i], y[i], depth + 1)) return false;
    }
    return true;
  }
  if (a.is_dict()) return DictEqual(a.dict(), b.dict(), depth);
  if (a.is_namespace()) {
    return std::get<NamespacePtr>(a.v) == std::get<NamespacePtr>(b.v);
  }
  return std::get<CallablePtr>(a.v) == std::get<CallablePtr>(b.v);
}

absl::string_view TypeName(const Value& value) {
  static constexpr absl::string_view kNames[] = {
      "undefined", "NoneType", "bool", "int",       "float",
      "str",       "list",     "dict", "Namespace", "function"};
  if (value.is_list() && value.list().tuple) return "tuple";
  return kNames[value.v.index()];
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);  // "-1.2345e+17"
  size_t e_at = sci.find('e');
  int exponent = std::stoi(sci.substr(e_at + 1));
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (char c : sci.substr(0, e_at)) {
    if (c >= '0' && c <= '9') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&mantissa, ".", digits.substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return absl::StrCat(sign, mantissa, exp);
  }
  if (exponent < 0) {
    return absl::StrCat(sign, "0.", std::string(-exponent - 1, '0'), digits);
  }
  size_t point = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= point) {
    return absl::StrCat(sign, digits, std::string(point - digits.size(), '0'),
                        ".0");
  }
  return absl::StrCat(sign, digits.substr(0, point), ".", digits.substr(point));
}

std::string StringRepr(absl::string_view s) {
  char quote = '\'';
  if (s.find('\'') != absl::string_view::npos &&
      s.find('"') == absl::string_view::npos) {
    quote = '"';
  }
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

absl::StatusOr<std::string> ToStr(const Value& value) {
  if (value.undefined()) return std::string();
  if (value.is_string()) return value.str();
  return Repr(value);
}

absl::StatusOr<std::string> Repr(const Value& value, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (value.undefined()) return std::string();
  if (value.none()) return std::string("None");
  if (value.is_bool())
    return std::string(std::get<bool>(value.v) ? "True" : "False");
  if (value.is_int()) return std::to_string(value.as_int());
  if (value.is_float()) return FloatRepr(value.as_float());
  if (value.is_string()) return StringRepr(value.str());
  if (value.is_callable()) {
    return absl::StrCat("<function ", value.callable().name, ">");
  }
  std::vector<std::string> parts;
  if (value.is_list()) {
    for (const Value& item : value.list().items) {
      auto s = Repr(item, depth + 1);
      if (!s.ok()) return s.status();
      parts.push_back(*std::move(s));
    }
    if (!value.list().tuple)
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    if (parts.size() == 1) return absl::StrCat("(", parts[0], ",)");
    return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
  }
  const Dict& dict = value.is_dict() ? value.dict() : value.ns().attrs;
  for (const auto& [key, item] : dict.items) {
    auto s = Repr(item, depth + 1);
    if (!s.ok()) return s.status();
    parts.push_back(absl::StrCat(StringRepr(key), ": ", *s));
  }
  std::string body = absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  return value.is_dict() ? body : absl::StrCat("<Namespace ", body, ">");
}

absl::StatusOr<std::string> ToJson(const Value& value,
                                   const JsonOptions& options) {
  std::string out;
  if (auto s = AppendJson(value, options, 0, out); !s.ok()) return s;
  return out;
}

std::vector<absl::string_view> CodePoints(absl::string_view s) {
  std::vector<absl::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 1;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xf0) {
      n = 4;
    } else if (c >= 0xe0) {
      n = 3;
    } else if (c >= 0xc0) {
      n = 2;
    }
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t CodePointCount(absl::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

bool IsPySpace(absl::string_view cp) {
  static constexpr absl::string_view kSpaces[] = {
      " ",      "\t",     "\n",     "\v",     "\f",     "\r",
      "\x1c",   "\x1d",   "\x1e",   "\x1f",   "\u0085", "\u00a0",
      "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004",
      "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
      "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  return std::find(std::begin(kSpaces), std::end(kSpaces), cp) !=
         std::end(kSpaces);
}

}  // namespace octet::jinja
