// `octet tokenize`: a checkpoint's tokenizer on the command line, so that a
// user can see what it makes of their text, and the tests can hold it
// against Hugging Face's `tokenizers` (tests/model/hf_tokenizers_oracle.py):
//
//   octet tokenize --model DIR --text T          the ids, comma separated
//   octet tokenize --model DIR --ids 1,2,3       their text
//   octet tokenize --model DIR --jsonl FILE      per line of FILE (a JSON
//       string) a line with a JSON array of its ids; on stderr the bytes
//       encoded, the time and MB/s (encoding alone, one thread)
//   octet tokenize --model DIR --decode_jsonl FILE   per line (a JSON array
//       of ids) a line with their text as a JSON string
//
// DIR needs only tokenizer.model or tokenizer.json; a GGUF file in its
// place gives the tokenizer in its metadata. With add_special false
// the template's special tokens (BOS) are left out.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace octet {

struct TokenizeCommand {
  std::string model_dir;
  // Exactly one of these is set.
  std::string text, ids, jsonl, decode_jsonl;
  bool add_special = true;
};

// InvalidArgument when the flags do not make one command (a usage error).
absl::Status CheckTokenizeCommand(const TokenizeCommand& command);

// Runs a checked command, printing to stdout (the speed line to stderr).
absl::Status RunTokenize(const TokenizeCommand& command);

}  // namespace octet
