// libFuzzer target: a chat template (outside input: it comes in the
// checkpoint) must parse and render into text or an error, never a crash,
// hang or unbounded allocation; rendered over a small conversation with
// render limits small enough for the fuzzer's time-out.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "jinja/template.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view source(reinterpret_cast<const char*>(data), size);
  octet::jinja::Options options;
  options.limits = {.max_output = 1 << 20,
                    .max_iterations = 100'000,
                    .max_work = 16 << 20};
  absl::StatusOr<octet::jinja::Template> t =
      octet::jinja::Template::Parse(source, options);
  if (!t.ok()) return 0;
  static const nlohmann::json context = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Hi \xc3\xa9"}},
        {{"role", "assistant"}, {"content", " Hello. "}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  absl::StatusOr<std::string> out = t->Render(context);
  if (out.ok() && out->size() > options.limits.max_output) __builtin_trap();
  return 0;
}
