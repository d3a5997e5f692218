// `octet gguf`: what a GGUF file holds, as octet reads it, so that a user can
// see why a file is refused and the tests can hold octet's decoding against
// the `gguf` package's (tests/model/gguf_oracle.py):
//
//   octet gguf --model FILE.gguf
//       its metadata (long arrays by their length) and tensors (name, ggml
//       type, dims innermost first), then the model config octet serves
//       it as, or why it cannot
//   octet gguf --model FILE.gguf --tensor NAME --out FILE
//       tensor NAME (GGUF's name, as stored: no rows moved) decoded to
//       binary32, written to FILE as little-endian floats
#pragma once

#include <string>

#include "absl/status/status.h"

namespace octet {

struct GgufCommand {
  std::string path;
  std::string tensor;  // with `out`: decode this tensor
  std::string out;
};

// InvalidArgument when the flags do not make one command.
absl::Status CheckGgufCommand(const GgufCommand& command);

absl::Status RunGguf(const GgufCommand& command);

}  // namespace octet
