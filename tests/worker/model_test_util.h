// Helpers shared by the model tests (CPU and CUDA).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/backend.h"
#include "model/checkpoint.h"
#include "worker/generator.h"
#include "worker/llama_model.h"

namespace octet::testing {

// max |got - want| / max |want|; infinity (failing any bound) and a test
// failure when the sizes differ, e.g. `got` empty after a failed forward.
inline double MaxRelError(const std::vector<float>& got,
                          const std::vector<double>& want) {
  if (got.size() != want.size() || want.empty()) {
    ADD_FAILURE() << "MaxRelError: " << got.size() << " values against "
                  << want.size();
    return HUGE_VAL;
  }
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

// Cosine similarity of two logit vectors (or concatenations of them).
inline double Cosine(const float* a, const float* b, size_t n) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    dot += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(aa * bb);
}

// The logits of the last prompt token, from a fresh cache and one prefill.
inline std::vector<float> LastLogits(LlamaModel& model,
                                     const std::vector<int32_t>& prompt,
                                     ForwardTrace* trace = nullptr) {
  auto cache = model.NewKvCache(
      {.block_size = 16,
       .num_blocks = static_cast<int64_t>(prompt.size() + 15) / 16});
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  std::vector<int32_t> table;
  absl::Status s = (*cache)->Reserve(prompt.size(), &table);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  std::vector<float> logits;
  SequenceStep step{prompt, 0, &table};
  s = model.Forward({&step, 1}, **cache, &logits, trace);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};  // empty: every comparison with it fails
  return logits;
}

// One FP8 CPU rank in this process (one thread), with a KV cache of 64
// blocks of 8; null members (and a test failure) when it cannot load.
struct Fp8Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
};
inline Fp8Rank LoadFp8Rank(const std::string& dir) {
  Fp8Rank r;
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return r;
  r.backend = NewCpuBackend({.num_threads = 1});
  ModelOptions options;
  options.method = LinearMethod::kFp8;
  auto model = LlamaModel::Load(**ckpt, *r.backend, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return r;
  auto cache = (*model)->NewKvCache({.block_size = 8, .num_blocks = 64});
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return r;
  r.model = *std::move(model);
  r.cache = *std::move(cache);
  return r;
}

// The greedy tokens one CPU rank generates in this process for `prompt`
// from the checkpoint at `dir` with FP8 linear layers: what served
// requests are compared with (TP-invariant sums make every TP degree's
// tokens these).
inline std::vector<int32_t> GreedyFp8Tokens(const std::string& dir,
                                            const std::vector<int32_t>& prompt,
                                            int64_t max_new) {
  Fp8Rank rank = LoadFp8Rank(dir);
  if (rank.cache == nullptr) return {};
  GenerationRequest r;
  r.prompt = prompt;
  r.max_new_tokens = max_new;
  r.sampling.temperature = 0.0f;
  auto out = Generate(*rank.model, *rank.cache, {r});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].tokens : std::vector<int32_t>{};
}

// One FP8 rank's prompt log-probabilities, in this process: the prompt in
// one forward (as a coordinator runs it), each token after the first scored
// (LlamaModel::ScoreRows).
inline std::vector<float> Fp8PromptLogprobs(
    const std::string& dir, const std::vector<int32_t>& prompt) {
  Fp8Rank rank = LoadFp8Rank(dir);
  if (rank.cache == nullptr) return {};
  std::vector<int32_t> table;
  EXPECT_TRUE(rank.cache->Reserve(prompt.size(), &table).ok());
  SequenceStep step{prompt, 0, &table, /*all_logits=*/true};
  std::vector<SampledToken> none;
  EXPECT_TRUE(
      rank.model->ForwardSample({&step, 1}, *rank.cache, {}, &none).ok());
  std::vector<float> logprobs;
  const std::vector<int32_t> targets(prompt.begin() + 1, prompt.end());
  EXPECT_TRUE(rank.model->ScoreRows(0, targets, &logprobs).ok());
  return logprobs;
}

}  // namespace octet::testing
