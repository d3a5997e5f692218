// libFuzzer target: the safetensors header parser must turn any input into a
// header or an error, never a crash, hang or out-of-bounds read.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<octet::SafetensorsHeader> header =
      octet::ParseSafetensorsHeader(file, "fuzz.safetensors");
  if (header.ok()) {
    // A header that parses must describe bytes inside the input.
    for (const octet::SafetensorsEntry& e : header->tensors) {
      if (header->data_offset + e.end > size) __builtin_trap();
    }
  }
  return 0;
}
