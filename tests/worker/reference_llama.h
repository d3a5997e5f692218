// An independent, straightforward fp64 implementation of the Llama-family
// forward pass, for checking worker/llama_model against. It shares nothing
// with the model code but the checkpoint reader and, for FP8, the contract's
// own scalar definitions (kernels/fp8.h; base/bf16.h for bfloat16 inputs):
// every quantization happens at exactly the contract's points, in the
// contract's precision.
#pragma once

#include <cstdint>
#include <vector>

#include "model/checkpoint.h"

namespace octet::testing {

struct ReferenceOptions {
  // Fake-quantize: weights per fused projection (QKV, gate_up, o, down) and
  // the activation entering each projection, with per-tensor absmax scales.
  bool fp8 = false;
  // With fp8: weights per output row, activations per token (a
  // compressed-tensors "fp8-channel-token" checkpoint's scheme).
  bool per_channel = false;
  bool per_token = false;
  // Round the input of every unquantized product (the layers' without fp8,
  // and the lm_head's) to binary32 and then to bfloat16 (nearest even), as
  // the CPU backend does before a GEMM over bfloat16 weights.
  bool bf16_inputs = false;
};

struct ReferenceResult {
  std::vector<std::vector<double>> logits;  // [tokens][vocab]
  // FP8: the activation codes of each projection input, in call order (per
  // layer: qkv, o, gate_up, down), as the contract computes them from the
  // reference's own activations rounded to binary32.
  std::vector<std::vector<uint8_t>> codes;
};

// Runs `tokens` (positions 0..n-1, one sequence) through the checkpoint.
ReferenceResult ReferenceForward(const Checkpoint& ckpt,
                                 const std::vector<int32_t>& tokens,
                                 const ReferenceOptions& options);

}  // namespace octet::testing
