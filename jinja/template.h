// A chat template (tokenizer_config.json's `chat_template`, GGUF's
// `tokenizer.chat_template`), rendered byte for byte as Hugging Face
// transformers' apply_chat_template renders it with Python's jinja2:
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
// the loopcontrols extension, transformers' {% generation %} tag,
// raise_exception(), strftime_now() and its tojson (json.dumps with
// ensure_ascii=False).
//
//   OCTET_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::Parse(source));
//   OCTET_ASSIGN_OR_RETURN(std::string prompt, tmpl.Render({
//       {"messages", messages}, {"add_generation_prompt", true},
//       {"bos_token", "<s>"}, {"eos_token", "</s>"}}));
//
// Only the subset of Jinja that chat templates use is implemented; Parse
// refuses anything else with an error naming the construct and its line
// ("chat template line 3: '{% macro %}' is not supported"), so a template
// never renders differently from jinja2 for want of a feature. The
// subset: parser.h (statements, expressions), builtins.h (filters, tests,
// methods, functions). Rendering is bounded (eval.h's Limits): templates are
// outside input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace octet::jinja {

// Bounds on one render: output bytes, loop iterations in all, and bytes of
// strings and lists built along the way; past one, Render fails.
struct Limits {
  size_t max_output = 16 << 20;
  int64_t max_iterations = 10'000'000;
  int64_t max_work = int64_t{1} << 30;
};

struct Options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  Limits limits;
};

struct Program;

class Template {
 public:
  // Parses `source`; an unsupported construct (macro, call, include,
  // import, extends, block, filter block, with, an unknown filter, test,
  // method or function name, ...) is an InvalidArgument error naming it
  // and its line.
  static absl::StatusOr<Template> Parse(absl::string_view source,
                                        Options options = {});

  // Renders with the variables of `context` (a JSON object).
  // raise_exception("msg") ends it with InvalidArgument whose message
  // contains msg; runtime errors (calling an unknown method, reading an
  // attribute of an undefined value, ...) are InvalidArgument naming the
  // line. A dict's key order is nlohmann::json's (sorted); the
  // ordered_json overload keeps the document's order, as Python's json
  // module does, which is what `tojson` and dict iteration print.
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;
  absl::StatusOr<std::string> Render(
      const nlohmann::ordered_json& context) const;

 private:
  Template(std::shared_ptr<const Program> program, Limits limits)
      : program_(std::move(program)), limits_(limits) {}

  std::shared_ptr<const Program> program_;
  Limits limits_;
};

}  // namespace octet::jinja
