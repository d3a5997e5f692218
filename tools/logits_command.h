// `octet logits`: one forward pass on the command line, printing the
// binary32 logits of each prompt's last token, so that the tests can hold
// octet's forward against another implementation's
// (tests/tools/compressed_tensors_oracle.py holds it against the
// `compressed-tensors` package and transformers):
//
//   octet logits --model DIR --prompts_json '[[1,2,3],[4,5]]'
//       [--quantization auto|none|fp8] [--device auto|cpu|cuda] [--threads N]
//       [--activation_codes]
//
// All prompts run as separate sequences of one forward (one SequenceStep
// each), as the first step of `octet generate` runs them. Prints one JSON
// object: {"quantization_scheme": "fp8-channel-token", "logits": [[...], ...]}
// with one row of vocab_size values per prompt, each printed with 9
// significant digits (enough to read back the same binary32 value); a
// non-finite value prints as null. With --activation_codes (FP8 only) also
// "activations": per quantized projection input in call order (per layer:
// qkv, o, gate_up, down) its e4m3 codes (all tokens' rows, in prompt order)
// and its scales (one per prompt, one per token with per-token scales, or
// the one static scale), from ForwardTrace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/llama_model.h"

namespace octet {

struct LogitsCommand {
  std::string model_dir;
  std::string prompts_json;
  std::string quantization = "auto";  // auto, none or fp8
  std::string device = "auto";        // auto, cpu or cuda
  int32_t threads = 0;                // CPU threads; 0 = one per core
  bool activation_codes = false;
  ActivationScales activation_scales = ActivationScales::kToken;
};

// The prompts of --prompts_json: a non-empty JSON array of non-empty arrays
// of token ids (integers >= 0). InvalidArgument naming what is wrong.
absl::StatusOr<std::vector<std::vector<int32_t>>> ParsePrompts(
    const std::string& json);

// InvalidArgument when the flags do not make one command (a usage error),
// prompts included.
absl::Status CheckLogitsCommand(const LogitsCommand& command);

// Loads the model, runs the forward and prints the JSON to stdout (what was
// loaded, to stderr). Token ids at or above the vocabulary, or prompts
// longer than the context, are an InvalidArgument naming the prompt.
absl::Status RunLogits(const LogitsCommand& command);

}  // namespace octet
