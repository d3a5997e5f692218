// A model's chat template: the Jinja text that turns a conversation into
// the prompt text the model was tuned on, rendered as Hugging Face's
// apply_chat_template renders it (variables `messages`,
// `add_generation_prompt`, `bos_token`, `eos_token`), by octet's Jinja
// subset (jinja/template.h), which refuses by name what it cannot do.
//
// Where it comes from: a Hugging Face directory's chat_template.jinja,
// else tokenizer_config.json's `chat_template` (a string, or a list of
// named templates, of which "default" is taken), with that file's
// bos_token and eos_token; a GGUF file's tokenizer.chat_template, with the
// text of its tokenizer.ggml.bos/eos_token_id
// (model/checkpoint.h: ReadCheckpointChatTemplate picks the format).
// Compiled once at start; immutable after, and thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "nlohmann/json_fwd.hpp"

namespace octet {

namespace jinja {
class Template;
}

// A template as read, not yet compiled.
struct ChatTemplateSource {
  std::string text;
  std::string where;  // the file it came from, for errors
  std::string bos_token, eos_token;
};

// The template of the Hugging Face directory `dir`: nullopt when it has
// none, an error naming the file when one is unreadable or malformed.
absl::StatusOr<std::optional<ChatTemplateSource>> ReadHfChatTemplate(
    const std::string& dir);
// The template of a GGUF file (`path` names it in errors).
absl::StatusOr<std::optional<ChatTemplateSource>> ReadGgufChatTemplate(
    const GgufFile& file, const std::string& path);

class ChatTemplate {
 public:
  // Parses the template; an error names its file and what is unsupported.
  static absl::StatusOr<ChatTemplate> Compile(ChatTemplateSource source);

  // The prompt text of `messages` (a JSON array of objects with "role" and
  // "content"; the caller checks their shape), ending with the assistant's
  // turn's opening when `add_generation_prompt`. InvalidArgument when the
  // template refuses the conversation (its raise_exception) or fails.
  absl::StatusOr<std::string> Render(const nlohmann::json& messages,
                                     bool add_generation_prompt) const;

  const std::string& where() const { return source_.where; }
  // The text the template writes for the model's BOS and EOS ("" if none).
  const std::string& bos_token() const { return source_.bos_token; }
  const std::string& eos_token() const { return source_.eos_token; }

 private:
  ChatTemplate(ChatTemplateSource source,
               std::shared_ptr<const jinja::Template> compiled)
      : source_(std::move(source)), compiled_(std::move(compiled)) {}
  ChatTemplateSource source_;
  std::shared_ptr<const jinja::Template> compiled_;
};

}  // namespace octet
