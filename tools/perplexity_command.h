// `octet perplexity`: how well a model predicts a text, teacher-forced, as
// language-model evaluations measure it:
//
//   octet perplexity --model M --text FILE [--window N]
//       [--quantization auto|none|fp8] [--device auto|cpu|cuda] [--threads N]
//       [--print_logprobs]
//   octet perplexity --server HOST:PORT --model M --text FILE --window N
//       the same windows scored by a running coordinator (any TP degree)
//       through the API's prompt_logprobs; M gives the tokenizer only
//   octet perplexity --tp N --model M --text FILE [...]
//       the same through a coordinator of N ranks started for the run
//       (tools/local_coordinator.h)
//
// The text is tokenized (the tokenizer's special tokens added, as a prompt
// is) and cut into windows of N tokens (default: the model's context), each
// scored from scratch: every token but a window's first is predicted from
// the tokens before it in its window. Prints one JSON object on stdout,
//   {"model": ..., "quantization_scheme": "fp8-tensor", "window": 1024,
//    "tokens": 2345, "windows": 3, "scored": 2342, "mean_nll": 2.31,
//    "perplexity": 10.1[, "logprobs": [...]]}
// (natural logs; with --print_logprobs each scored token's log-probability,
// in text order) and a line for people on stderr. Each window is one
// forward, as a coordinator runs a prompt (FP8's activation scales are per
// forward), so a server scores it to the same numbers; its logits take
// window x vocabulary x 4 bytes, on the device and on the host. Each
// token's log-probability is LogProb's (kernels/sampling.h), as the API
// returns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tools/tool_model.h"

namespace octet {

// A window's prompt log-probabilities from a server (one per token after
// the first).
using ScoreWindowFn = std::function<absl::StatusOr<std::vector<float>>(
    const std::vector<int32_t>& window)>;

struct PerplexityCommand {
  ToolModelFlags model;
  std::string text_file;
  int64_t window = 0;  // 0: the model's context
  bool print_logprobs = false;
  std::string server;   // --server: score through it (remote set)
  ScoreWindowFn remote;
};

// InvalidArgument when the flags do not make one command.
absl::Status CheckPerplexityCommand(const PerplexityCommand& command);

absl::Status RunPerplexity(const PerplexityCommand& command);

}  // namespace octet
