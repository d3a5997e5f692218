// The model on the CUDA backend (bfloat16 activations) against the fp64
// reference (unquantized, FP8 per tensor, and compressed-tensors' per-channel
// and per-token scheme), within bounds derived from the FP8 contract (see
// Fp8Bound), and batched vs one-at-a-time decoding there. Skips without a
// supported CUDA device.
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

// The unquantized GPU run's error: bfloat16 activations round every op's
// output to 8 significant bits (2^-9 relative), a few hundred roundings
// deep; measured 0.0045-0.009 on the tiny presets (H200, 2026-12-04).
constexpr double kBf16Bound = 0.03;

// The FP8 bound, derived from the contract rather than measured. The GPU
// quantizes bfloat16 activations where the reference quantizes binary32
// ones. At the first projection the e4m3 rounding boundaries (4
// significant bits) are bfloat16 numbers, so bfloat16 rounding moves a code
// only for values within half a bfloat16 ulp of a boundary (with the
// scale's own rounding, about 3% of them: kFirstInputCodesEqual). Each
// layer then feeds the next slightly different activations, and the codes
// drift apart (22-36% equal by the last layers of llama-1b on the H200):
// in the limit the GPU and the reference are two independent roundings of
// the same values under the same contract. Independent rounding errors add
// in quadrature, so their logits differ by about sqrt(2) times one
// rounding's error, which the reference measures exactly (its FP8 forward
// against its float one: fp8_error), plus bfloat16's own error (bf16_error:
// the unquantized GPU run against the float reference).
double Fp8Bound(double bf16_error, double fp8_error) {
  return bf16_error + std::sqrt(2.0) * fp8_error;
}
// Codes of the first quantized input equal to the reference's, at least:
// bfloat16 rounding can land a value on a boundary (half an e4m3 cell is
// 2^-4 of a binade's values within reach, ties flip half of them) and the
// scale moves by at most 2^-9; 3% expected, 5% allowed.
constexpr double kFirstInputCodesEqual = 0.95;

// The GPU model with `method` on `ckpt`: the last prompt token's logits,
// and with FP8 its activation codes (trace).
std::vector<float> GpuLogits(Backend& backend, const Checkpoint& ckpt,
                             LinearMethod method,
                             const std::vector<int32_t>& prompt,
                             ForwardTrace* trace = nullptr) {
  ModelOptions o;
  o.method = method;
  auto model = LlamaModel::Load(ckpt, backend, o);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  return LastLogits(**model, prompt, trace);
}

// Equal codes of the first quantized input, GPU against the reference.
double FirstInputAgreement(const ForwardTrace& trace,
                           const testing::ReferenceResult& ref) {
  if (trace.codes.empty() || ref.codes.empty() ||
      trace.codes[0].size() != ref.codes[0].size()) {
    ADD_FAILURE() << "no first input codes to compare (" << trace.codes.size()
                  << " recorded, " << ref.codes.size() << " in the reference)";
    return 0;
  }
  int64_t equal = 0;
  for (size_t i = 0; i < ref.codes[0].size(); ++i) {
    equal += trace.codes[0][i] == ref.codes[0][i];
  }
  return double(equal) / ref.codes[0].size();
}

// The GPU against the fp64 reference with `options` (FP8 schemes) on
// `ckpt` (their checkpoint), the float reference on the float checkpoint
// ckpt_float: the bounds above, and what was measured printed.
void ExpectWithinTheContract(Backend& backend, const Checkpoint& ckpt,
                             const Checkpoint& ckpt_float,
                             const std::vector<int32_t>& prompt,
                             const testing::ReferenceOptions& options,
                             const std::string& what) {
  const auto ref_float = testing::ReferenceForward(ckpt_float, prompt, {});
  const auto ref_fp8 = testing::ReferenceForward(ckpt_float, prompt, options);
  const double bf16_error =
      MaxRelError(GpuLogits(backend, ckpt_float, LinearMethod::kNone, prompt),
                  ref_float.logits.back());
  std::vector<float> reference_fp8(ref_fp8.logits.back().begin(),
                                   ref_fp8.logits.back().end());
  const double fp8_error = MaxRelError(reference_fp8, ref_float.logits.back());
  ForwardTrace trace;
  trace.record_codes = true;
  const double err =
      MaxRelError(GpuLogits(backend, ckpt, LinearMethod::kFp8, prompt, &trace),
                  ref_fp8.logits.back());
  const double agree = FirstInputAgreement(trace, ref_fp8);
  EXPECT_LT(bf16_error, kBf16Bound) << what;
  EXPECT_LT(err, Fp8Bound(bf16_error, fp8_error)) << what;
  EXPECT_GE(agree, kFirstInputCodesEqual) << what;
  std::printf(
      "[ measured ] cuda %s: max relative logit error vs fp64: none %.3e; "
      "fp8 %.3e vs its fake-quantized reference (bound %.3e = none + "
      "sqrt(2) x the reference's own FP8 error %.3e); first input codes "
      "equal %.4f\n",
      what.c_str(), bf16_error, err, Fp8Bound(bf16_error, fp8_error), fp8_error,
      agree);
}

TEST_P(CudaModelTest, MatchesTheFp64ReferenceWithinTheContract) {
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(60);
  for (auto& t : prompt) t = rng() % ckpt_->config().vocab_size;
  // Per-tensor weights, activation scales per token (the default).
  ExpectWithinTheContract(*backend_, *ckpt_, *ckpt_, prompt,
                          {.fp8 = true, .per_token = true},
                          GetParam() + " fp8-tensor");
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
  OCTET_ASSERT_OK(ct);
  std::mt19937 rng(4);
  std::vector<int32_t> prompt(40);
  for (auto& t : prompt) t = rng() % ckpt_->config().vocab_size;
  ExpectWithinTheContract(*backend_, **ct, *ckpt_, prompt,
                          {.fp8 = true, .per_channel = true, .per_token = true},
                          GetParam() + " fp8-channel-token");
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

// An FP8 model's row-group GEMMs (QKV and gate_up; the row-parallel
// layers have block sums) timed both of CUDA's ways at load
// (worker/gemm_choices.h), the choices kept in the file, and read back by
// the next load without measuring.
TEST_P(CudaModelTest, Fp8RowGroupGemmWaysAreMeasuredThenReadBack) {
  const std::string file =
      (fs::temp_directory_path() /
       absl::StrCat("octet_cuda_choices_", ::getpid(), "_", GetParam()))
          .string();
  fs::remove(file);
  std::vector<std::string> said;
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  o.gemm_choices.file = file;
  o.gemm_choices.max_rows = 64;  // buckets 2 .. 64
  o.gemm_choices.log = [&](const std::string& line) {
    std::printf("%s\n", line.c_str());
    said.push_back(line);
  };
  OCTET_ASSERT_OK(LlamaModel::Load(*ckpt_, *backend_, o).status());
  auto kept = GemmChoiceFile::Read(file);
  OCTET_ASSERT_OK(kept.status());
  EXPECT_EQ(kept->choices().size(), 2u * 6);
  for (const GemmChoice& c : kept->choices()) {
    ASSERT_EQ(c.ms.size(), 2u);
    for (const auto& [way, ms] : c.ms) EXPECT_GT(ms, 0.0) << way;
  }
  said.clear();
  OCTET_ASSERT_OK(LlamaModel::Load(*ckpt_, *backend_, o).status());
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("(from " + file + ")"), std::string::npos) << said[0];
  fs::remove(file);
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
