#include "model/chat_template.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "jinja/template.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using nlohmann::json;

// tokenizer_config.json can list every added token; a template is text.
constexpr size_t kMaxTokenizerConfigBytes = size_t{64} << 20;
constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

absl::Status Malformed(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// A special token as tokenizer_config.json writes it: a string, an
// AddedToken object ({"content": ...}), or null/absent ("").
absl::StatusOr<std::string> TokenText(const json& config, const char* key,
                                      const std::string& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") &&
      (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return Malformed(where, absl::StrCat(key,
                                       " is neither a string nor an object "
                                       "with a string \"content\""));
}

// tokenizer_config.json's chat_template: a string, or a list of
// {"name", "template"} of which "default" is the one; nullopt when absent.
absl::StatusOr<std::optional<std::string>> TemplateField(
    const json& config, const std::string& where) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& named : *it) {
      if (named.is_object() && named.value("name", json()) == "default" &&
          named.contains("template") && named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
    return Malformed(where,
                     "chat_template lists no template named \"default\"");
  }
  return Malformed(where, "chat_template is neither a string nor a list");
}

}  // namespace

absl::StatusOr<std::optional<ChatTemplateSource>> ReadHfChatTemplate(
    const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::string config_path = (root / "tokenizer_config.json").string();
  const std::string jinja_path = (root / "chat_template.jinja").string();
  OCTET_ASSIGN_OR_RETURN(const bool has_config, PathExists(config_path));
  OCTET_ASSIGN_OR_RETURN(const bool has_jinja, PathExists(jinja_path));
  json config = json::object();
  if (has_config) {
    OCTET_ASSIGN_OR_RETURN(
        const std::string text,
        ReadSmallFile(config_path, kMaxTokenizerConfigBytes));
    config = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) {
      return Malformed(config_path, "is not a JSON object");
    }
  }
  ChatTemplateSource source;
  if (has_jinja) {
    OCTET_ASSIGN_OR_RETURN(source.text,
                           ReadSmallFile(jinja_path, kMaxTemplateBytes));
    source.where = jinja_path;
  } else {
    OCTET_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           TemplateField(config, config_path));
    if (!text.has_value()) return std::nullopt;
    source.text = *std::move(text);
    source.where = config_path;
  }
  OCTET_ASSIGN_OR_RETURN(source.bos_token,
                         TokenText(config, "bos_token", config_path));
  OCTET_ASSIGN_OR_RETURN(source.eos_token,
                         TokenText(config, "eos_token", config_path));
  return source;
}

absl::StatusOr<std::optional<ChatTemplateSource>> ReadGgufChatTemplate(
    const GgufFile& file, const std::string& path) {
  if (file.FindValue("tokenizer.chat_template") == nullptr) {
    return std::nullopt;
  }
  ChatTemplateSource source;
  source.where = path + " (tokenizer.chat_template)";
  OCTET_ASSIGN_OR_RETURN(source.text,
                         file.GetString("tokenizer.chat_template"));
  // The special tokens' text, when the file names them.
  if (file.FindValue("tokenizer.ggml.tokens") == nullptr) return source;
  OCTET_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                         file.GetStrings("tokenizer.ggml.tokens"));
  const auto text_of = [&](const char* key, std::string& out) -> absl::Status {
    if (file.FindValue(key) == nullptr) return absl::OkStatus();
    OCTET_ASSIGN_OR_RETURN(const uint64_t id, file.GetUint(key));
    if (id >= tokens->size()) {
      return Malformed(path,
                       absl::StrCat(key, " = ", id, " is not a token of the ",
                                    tokens->size(), " in the file"));
    }
    out = (*tokens)[id];
    return absl::OkStatus();
  };
  OCTET_RETURN_IF_ERROR(
      text_of("tokenizer.ggml.bos_token_id", source.bos_token));
  OCTET_RETURN_IF_ERROR(
      text_of("tokenizer.ggml.eos_token_id", source.eos_token));
  return source;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(ChatTemplateSource source) {
  if (source.text.size() > kMaxTemplateBytes) {
    return Malformed(source.where,
                     absl::StrCat("the chat template is ", source.text.size(),
                                  " bytes, more than ", kMaxTemplateBytes));
  }
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source.text);
  if (!parsed.ok()) {
    return Malformed(source.where, std::string(parsed.status().message()));
  }
  auto compiled = std::make_shared<const jinja::Template>(*std::move(parsed));
  return ChatTemplate(std::move(source), std::move(compiled));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::json& messages, bool add_generation_prompt) const {
  const json context = {{"messages", messages},
                        {"add_generation_prompt", add_generation_prompt},
                        {"bos_token", source_.bos_token},
                        {"eos_token", source_.eos_token}};
  return compiled_->Render(context);
}

}  // namespace octet
