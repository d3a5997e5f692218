// Generation on one rank, in process: the loop `octet generate` and the
// tests run (the coordinator's scheduler replaces it for serving). Prompts
// are prefilled together in one forward pass, then every unfinished sequence
// decodes one token per forward pass, all in one batch.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampling.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"

namespace octet {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stop_ids;  // e.g. the model's EOS ids
};

enum class FinishReason { kLength, kStop };

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated, excluding the prompt
  FinishReason finish = FinishReason::kLength;
};

struct GenerationStats {
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;    // forward passes after the prefill
  int64_t decoded_tokens = 0;  // tokens those passes produced
};

struct GenerationOptions {
  // Run each request on its own (prefill and decode one sequence at a time)
  // instead of batching them.
  bool one_at_a_time = false;
  // Called with (request index, token) as each token is chosen.
  std::function<void(size_t, int32_t)> on_token;
};

// Generates for every request; their KV blocks are taken from `cache` and
// returned when done. Errors: invalid sampling parameters or prompts
// (InvalidArgument), prompt + max_new_tokens beyond the context or the
// cache (ResourceExhausted / InvalidArgument).
absl::StatusOr<std::vector<GenerationResult>> Generate(
    LlamaModel& model, KvCache& cache,
    const std::vector<GenerationRequest>& requests,
    const GenerationOptions& options = {}, GenerationStats* stats = nullptr);

}  // namespace octet
