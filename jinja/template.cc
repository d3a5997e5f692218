// Template (template.h): lex, parse, and convert the JSON context into
// template values (dicts keep the JSON object's order) before evaluating.
#include "jinja/template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "jinja/ast.h"
#include "jinja/eval.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace octet::jinja {
namespace {

template <typename Json>
absl::StatusOr<Value> FromJson(const Json& json, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template context: nested more than ", kMaxValueDepth,
                     " levels deep"));
  }
  switch (json.type()) {
    case Json::value_t::null:
      return Value(None{});
    case Json::value_t::boolean:
      return Value(json.template get<bool>());
    case Json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      auto u = json.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX))
        return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Json::value_t::number_float:
      return Value(json.template get<double>());
    case Json::value_t::string:
      return Value(json.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : json) {
        auto v = FromJson(item, depth + 1);
        if (!v.ok()) return v;
        items.push_back(*std::move(v));
      }
      return MakeList(std::move(items));
    }
    case Json::value_t::object: {
      Dict dict;
      for (auto it = json.begin(); it != json.end(); ++it) {
        auto v = FromJson(it.value(), depth + 1);
        if (!v.ok()) return v;
        dict.items.emplace_back(it.key(), *std::move(v));
      }
      return MakeDict(std::move(dict));
    }
    default:
      return absl::InvalidArgumentError(
          "chat template context: binary or discarded JSON values are not "
          "supported");
  }
}

template <typename Json>
absl::StatusOr<std::string> RenderJson(const Program& program,
                                       const Json& context,
                                       const Limits& limits) {
  if (!context.is_object()) {
    return absl::InvalidArgumentError(
        "chat template context must be a JSON object");
  }
  auto variables = FromJson(context, 0);
  if (!variables.ok()) return variables.status();
  return Evaluate(program, variables->dict(), limits);
}

}  // namespace

absl::StatusOr<Template> Template::Parse(absl::string_view source,
                                         Options options) {
  auto tokens =
      Lex(source, LexOptions{options.trim_blocks, options.lstrip_blocks});
  if (!tokens.ok()) return tokens.status();
  auto program = jinja::Parse(*tokens);
  if (!program.ok()) return program.status();
  return Template(std::make_shared<const Program>(*std::move(program)),
                  options.limits);
}

absl::StatusOr<std::string> Template::Render(
    const nlohmann::json& context) const {
  return RenderJson(*program_, context, limits_);
}

absl::StatusOr<std::string> Template::Render(
    const nlohmann::ordered_json& context) const {
  return RenderJson(*program_, context, limits_);
}

}  // namespace octet::jinja
