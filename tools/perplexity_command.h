// `octet perplexity`: how well a model predicts a text, teacher-forced, as
// language-model evaluations measure it:
//
//   octet perplexity --model M --text FILE [--window N]
//       [--quantization auto|none|fp8] [--device auto|cpu|cuda] [--threads N]
//       [--print_logprobs]
//
// The text is tokenized (the tokenizer's special tokens added, as a prompt
// is) and cut into windows of N tokens (default: the model's context), each
// scored from scratch: every token but a window's first is predicted from
// the tokens before it in its window. Prints one JSON object on stdout,
//   {"model": ..., "quantization_scheme": "fp8-tensor", "window": 1024,
//    "tokens": 2345, "windows": 3, "scored": 2342, "mean_nll": 2.31,
//    "perplexity": 10.1[, "logprobs": [...]]}
// (natural logs; with --print_logprobs each scored token's log-probability,
// in text order) and a line for people on stderr. The windows run through
// the forward in chunks of at most 512 tokens (the logits of a chunk's every
// token come back: 512 x the vocabulary in binary32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tools/tool_model.h"

namespace octet {

struct PerplexityCommand {
  ToolModelFlags model;
  std::string text_file;
  int64_t window = 0;  // 0: the model's context
  bool print_logprobs = false;
};

// InvalidArgument when the flags do not make one command.
absl::Status CheckPerplexityCommand(const PerplexityCommand& command);

absl::Status RunPerplexity(const PerplexityCommand& command);

// log P(target) under `logits` (binary32, one row), in double: the
// log-softmax of the target's logit. Exposed for tests.
double TokenLogprob(absl::Span<const float> logits, int32_t target);

}  // namespace octet
