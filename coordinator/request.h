// Public generation requests (proto/octet/v1/generation.proto) checked and
// turned into the coordinator's terms. Every problem is INVALID_ARGUMENT
// with a message that names the field, as the API promises; nothing here
// reaches a worker before it passes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "octet/v1/generation.pb.h"

namespace octet {

// What the model accepts.
struct ModelLimits {
  int64_t vocab_size = 0;
  // Tokens of context one sequence may hold: prompt plus completion.
  int64_t max_context = 0;
  std::vector<int32_t> eos_ids;  // the model's end-of-sequence tokens
  // The most bytes one token of the tokenizer stands for (0: no tokenizer):
  // a text longer than max_context of them cannot fit and is refused
  // before it is tokenized (Tokenizer::max_token_bytes).
  int64_t max_token_bytes = 0;
};

// Limits on a request's size, so that no request can ask for unbounded work
// or memory before it is looked at.
inline constexpr int64_t kMaxPromptBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxStopStrings = 16;
inline constexpr int64_t kMaxStopStringBytes = 256;
inline constexpr int64_t kMaxStopTokenIds = 64;
inline constexpr int64_t kMaxRequestIdBytes = 128;
inline constexpr int64_t kDefaultMaxNewTokens = 16;

// A request that passed: every field set, defaults applied.
struct ValidRequest {
  std::vector<int32_t> prompt;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  std::optional<uint64_t> seed;
  float repetition_penalty = 1.0f;
  int64_t max_new_tokens = kDefaultMaxNewTokens;
  std::vector<std::string> stop;
  // Tokens after which generation stops: the request's (finish reason
  // STOP) and the model's EOS tokens (EOS; none with ignore_eos).
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> eos_ids;
  bool logprobs = false;
  bool prompt_logprobs = false;
  std::string request_id;  // empty: the caller assigns one
};

// Token ids of a prompt text (the model's tokenizer, BOS first).
using EncodeFn = std::function<std::vector<int64_t>(const std::string&)>;

// Checks `request` against `limits`; `encode` tokenizes text input (null:
// text input is refused, e.g. a model without a tokenizer).
absl::StatusOr<ValidRequest> ValidateRequest(const v1::GenerateRequest& request,
                                             const ModelLimits& limits,
                                             const EncodeFn& encode);

}  // namespace octet
