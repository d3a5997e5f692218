// libFuzzer target: the GGUF parser must turn any input into contents or an
// error, never a crash, hang, huge allocation or out-of-bounds read; and a
// file that parses must describe only bytes inside the input.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<octet::GgufContents> contents =
      octet::ParseGguf(file, "fuzz.gguf");
  if (contents.ok()) {
    for (const octet::GgufTensorInfo& t : contents->tensors) {
      if (contents->data_offset + t.offset + t.bytes > size) __builtin_trap();
    }
  }
  return 0;
}
