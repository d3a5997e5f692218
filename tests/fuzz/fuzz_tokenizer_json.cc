// libFuzzer target: loading a tokenizer.json (model/bpe_tokenizer.h) must
// turn any input into a tokenizer or an error, never a crash or a hang; and
// a tokenizer that loads must encode text (its own input among it) into
// ids below its vocabulary size and decode any ids into valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<octet::Tokenizer>> t =
      octet::LoadTokenizerJson(json, "fuzz/tokenizer.json");
  if (!t.ok()) return 0;
  for (const std::string& text :
       {json,
        std::string("Hello, world! 123  \n\t\xF0\x9F\x98\x80 caf\xC3\xA9"),
        std::string("\xFF\xFE broken \xE2\x82")}) {
    const std::vector<int64_t> ids = (*t)->Encode(text, true);
    for (int64_t id : ids) {
      if (id < 0 || id >= (*t)->vocab_size()) __builtin_trap();
    }
    const std::string back = (*t)->Decode(ids);
    if (octet::Utf8Lossy(back) != back) __builtin_trap();
  }
  const std::vector<int64_t> any = {0, 1, 2, -1, 1 << 30};
  const std::string text = (*t)->Decode(any);
  if (octet::Utf8Lossy(text) != text) __builtin_trap();
  return 0;
}
