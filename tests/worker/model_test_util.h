// Helpers shared by the model tests (CPU and CUDA).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/llama_model.h"

namespace octet::testing {

// max |got - want| / max |want|.
inline double MaxRelError(const std::vector<float>& got,
                          const std::vector<double>& want) {
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
  EXPECT_TRUE((*cache)->Reserve(prompt.size(), &table).ok());
  std::vector<float> logits;
  SequenceStep step{prompt, 0, &table};
  absl::Status s = model.Forward({&step, 1}, **cache, &logits, trace);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

}  // namespace octet::testing
