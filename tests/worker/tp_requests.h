// What tensor_parallel_test runs on every rank and on TP = 1 alike: load
// the model, prefill three prompts in one forward pass (recording FP8
// activation scales), then decode 64 greedy tokens for each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/panels.h"
#include "model/checkpoint.h"
#include "worker/generator.h"
#include "worker/llama_model.h"

namespace octet {

struct TpResults {
  std::vector<float> logits;    // prefill, [prompts][vocab]
  std::vector<float> scales;    // [projection call][prompt]
  std::vector<int32_t> tokens;  // [prompts][kTpSteps]
  // FP8: every projection's codes as this rank holds them, layer by layer
  // (qkv, o, gate_up, down), and their scales.
  std::vector<uint8_t> weight_codes;
  std::vector<float> weight_scales;
};

inline constexpr int64_t kTpSteps = 64;

// `after_prefill`, when set, runs between the prefill and decoding (the
// tests' way to make a rank die mid-run).
inline absl::Status RunTpRequests(
    const Checkpoint& ckpt, Backend& backend, const ModelOptions& options,
    TpResults* out, const std::function<void()>& after_prefill = {}) {
  auto model = LlamaModel::Load(ckpt, backend, options);
  if (!model.ok()) return model.status();
  if (options.method == LinearMethod::kFp8) {
    for (int64_t l = 0; l < ckpt.config().num_layers; ++l) {
      using P = LlamaModel::Projection;
      for (P which : {P::kQkv, P::kO, P::kGateUp, P::kDown}) {
        const LinearWeight& w = (*model)->projection(l, which);
        std::vector<uint8_t> held(w.data.bytes());
        float scale = 0;
        absl::Status s =
            backend.CopyToHost(held.data(), w.data.data(), held.size());
        if (s.ok()) s = backend.CopyToHost(&scale, w.scale.data(), 4);
        if (!s.ok()) return s;
        // As [out][in] rows, however the backend laid the weight out.
        const size_t at = out->weight_codes.size();
        out->weight_codes.resize(at + w.out * w.in);
        if (w.layout == LinearWeight::Layout::kE4m3Panels) {
          UnpackE4m3Panels(held.data(), w.out, w.in, w.layout_k_blocks,
                           out->weight_codes.data() + at);
        } else {
          std::copy_n(held.begin(), w.out * w.in,
                      out->weight_codes.begin() + at);
        }
        out->weight_scales.push_back(scale);
      }
    }
  }
  std::vector<GenerationRequest> requests;
  for (int64_t len : {4, 23, 40}) {
    GenerationRequest r;
    for (int64_t i = 0; i < len; ++i) {
      r.prompt.push_back(static_cast<int32_t>((i * 37 + len * 11) % 300));
    }
    r.max_new_tokens = kTpSteps;
    r.sampling.temperature = 0.0f;
    requests.push_back(r);
  }
  auto cache = (*model)->NewKvCache({.block_size = 16, .num_blocks = 64});
  if (!cache.ok()) return cache.status();
  std::vector<std::vector<int32_t>> tables(requests.size());
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::Status s = (*cache)->Reserve(requests[i].prompt.size(), &tables[i]);
    if (!s.ok()) return s;
    steps.push_back({requests[i].prompt, 0, &tables[i]});
  }
  ForwardTrace trace;
  trace.record_codes = true;
  absl::Status s = (*model)->Forward(steps, **cache, &out->logits, &trace);
  if (!s.ok()) return s;
  for (const std::vector<float>& call : trace.scales) {
    out->scales.insert(out->scales.end(), call.begin(), call.end());
  }
  for (auto& t : tables) {
    s = (*cache)->Release(&t);
    if (!s.ok()) return s;
  }
  if (after_prefill) after_prefill();
  auto generated = Generate(**model, **cache, requests);
  if (!generated.ok()) return generated.status();
  for (const GenerationResult& g : *generated) {
    out->tokens.insert(out->tokens.end(), g.tokens.begin(), g.tokens.end());
  }
  return absl::OkStatus();
}

}  // namespace octet
