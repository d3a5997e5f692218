// The model on the CUDA backend (bfloat16 activations) against the fp64
// reference (unquantized, FP8 per tensor, and compressed-tensors' per-channel
// and per-token scheme), and batched vs one-at-a-time decoding there. Skips
// without a supported CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/backend.h"
#include "model/synthetic.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/status_util.h"
#include "tests/worker/model_test_util.h"
#include "tests/worker/reference_llama.h"
#include "tools/fp8_export.h"
#include "worker/generator.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    OCTET_REQUIRE_CUDA_DEVICE();
    auto b = NewCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
    const fs::path dir =
        fs::temp_directory_path() /
        absl::StrCat("octet_cuda_model_", ::getpid(), "_", GetParam());
    OCTET_ASSERT_OK(WriteSyntheticCheckpoint(*SyntheticPreset(GetParam()),
                                             {.seed = 41}, dir.string()));
    auto c = Checkpoint::Open(dir.string());
    OCTET_ASSERT_OK(c);
    ckpt_ = *std::move(c);
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Checkpoint> ckpt_;
};

using testing::LastLogits;
using testing::MaxRelError;

TEST_P(CudaModelTest, MatchesTheFp64ReferenceWithinBf16Tolerance) {
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(60);
  for (auto& t : prompt) t = rng() % ckpt_->config().vocab_size;
  for (bool fp8 : {false, true}) {
    ModelOptions o;
    o.method = fp8 ? LinearMethod::kFp8 : LinearMethod::kNone;
    auto model = LlamaModel::Load(*ckpt_, *backend_, o);
    ASSERT_TRUE(model.ok()) << model.status();
    const auto ref = testing::ReferenceForward(*ckpt_, prompt, {.fp8 = fp8});
    const double err =
        MaxRelError(LastLogits(**model, prompt), ref.logits.back());
    // bfloat16 activations round every op's output to 8 bits (2^-9), and
    // with FP8 they also move the activation codes; these bounds are
    // provisional until a device run measures them (printed below).
    EXPECT_LT(err, fp8 ? 0.1 : 0.03);
    std::printf(
        "[ measured ] cuda %s %s: max relative logit error vs fp64 %.3e\n",
        GetParam().c_str(), fp8 ? "fp8 (vs fake quantization)" : "none", err);
  }
}

// compressed-tensors' FP8_DYNAMIC (`octet quantize --scheme
// fp8-channel-token`) on the GPU: per-channel weight scales in cuBLASLt's
// outer vector, a scale per token, against the fake-quantized reference of
// that scheme (on the float checkpoint it was written from).
TEST_P(CudaModelTest, ChannelTokenSchemeMatchesItsReference) {
  const fs::path dir =
      fs::temp_directory_path() /
      absl::StrCat("octet_cuda_ct_", ::getpid(), "_", GetParam());
  Fp8ExportOptions channel_token;
  channel_token.scheme = "fp8-channel-token";
  OCTET_ASSERT_OK(
      ExportFp8Checkpoint(ckpt_->dir(), dir.string(), channel_token));
  auto ct = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ct.ok()) << ct.status();
  std::mt19937 rng(4);
  std::vector<int32_t> prompt(40);
  for (auto& t : prompt) t = rng() % ckpt_->config().vocab_size;
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  auto model = LlamaModel::Load(**ct, *backend_, o);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto ref = testing::ReferenceForward(
      *ckpt_, prompt, {.fp8 = true, .per_channel = true, .per_token = true});
  const double err =
      MaxRelError(LastLogits(**model, prompt), ref.logits.back());
  EXPECT_LT(err, 0.1);  // as the per-tensor FP8 bound above: provisional
  std::printf(
      "[ measured ] cuda %s fp8-channel-token: max relative logit error vs "
      "its fp64 reference %.3e\n",
      GetParam().c_str(), err);
  fs::remove_all(dir);
}

TEST_P(CudaModelTest, BatchedDecodingMatchesOneAtATime) {
  for (LinearMethod method : {LinearMethod::kNone, LinearMethod::kFp8}) {
    const char* name = method == LinearMethod::kFp8 ? "fp8" : "none";
    ModelOptions options;
    options.method = method;
    auto model = LlamaModel::Load(*ckpt_, *backend_, options);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<GenerationRequest> requests;
    for (int64_t len : {3, 29, 50}) {
      GenerationRequest r;
      for (int64_t i = 0; i < len; ++i) {
        r.prompt.push_back((i * 13 + len) % 300);
      }
      r.max_new_tokens = 32;
      r.sampling.temperature = 0;
      requests.push_back(r);
    }
    auto cache = (*model)->NewKvCache({.block_size = 8, .num_blocks = 64});
    OCTET_ASSERT_OK(cache);
    auto batched = Generate(**model, **cache, requests);
    GenerationOptions alone;
    alone.one_at_a_time = true;
    auto single = Generate(**model, **cache, requests, alone);
    ASSERT_TRUE(batched.ok() && single.ok());
    for (size_t i = 0; i < requests.size(); ++i) {
      size_t same = 0;
      while (same < (*batched)[i].tokens.size() &&
             (*batched)[i].tokens[same] == (*single)[i].tokens[same]) {
        ++same;
      }
      // Each sequence has its own FP8 activation scales, but cuBLASLt may
      // pick a different algorithm for another batch size, so bfloat16
      // rounding can differ: report where greedy paths part, if they do,
      // and require the first token to agree.
      std::printf(
          "[ measured ] cuda %s greedy request %zu: batched and alone agree "
          "on %zu of %zu\n",
          name, i, same, (*batched)[i].tokens.size());
      EXPECT_GE(same, 1u) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaModelTest,
                         ::testing::Values("tiny", "tiny-mistral", "tiny-qwen2",
                                           "tiny-qwen3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace octet
