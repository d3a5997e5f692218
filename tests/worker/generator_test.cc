// Generation: batched, paged decoding gives the same tokens as one sequence
// at a time, unquantized and FP8; seeds reproduce; stop tokens and limits end
// sequences; bad requests are errors.
#include "worker/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "tests/worker/model_test_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

GenerationOptions OneAtATime() {
  GenerationOptions o;
  o.one_at_a_time = true;
  return o;
}

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir =
        fs::temp_directory_path() / absl::StrCat("octet_gen_", ::getpid());
    ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny-mistral"),
                                         {.seed = 21}, dir.string())
                    .ok());
    auto ckpt = Checkpoint::Open(dir.string());
    ASSERT_TRUE(ckpt.ok());
    ckpt_ = *std::move(ckpt);
    backend_ = NewCpuBackend();
  }

  std::unique_ptr<LlamaModel> Model(
      LinearMethod method,
      ActivationScales scales = ActivationScales::kToken) {
    ModelOptions o;
    o.method = method;
    o.activation_scales = scales;
    auto m = LlamaModel::Load(*ckpt_, *backend_, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // A cache of small blocks whose free list is fragmented, so that the
  // sequences' blocks interleave and are not in order.
  std::unique_ptr<KvCache> FragmentedCache(LlamaModel& m) {
    auto cache = m.NewKvCache({.block_size = 4, .num_blocks = 256});
    EXPECT_TRUE(cache.ok());
    std::vector<std::vector<int32_t>> tables(6);
    for (size_t i = 0; i < tables.size(); ++i) {
      EXPECT_TRUE((*cache)->Reserve(4 * (i + 1), &tables[i]).ok());
    }
    for (size_t i = 0; i < tables.size(); i += 2) {
      EXPECT_TRUE((*cache)->Release(&tables[i]).ok());
    }
    kept_.insert(kept_.end(), tables.begin(), tables.end());
    return *std::move(cache);
  }

  std::vector<GenerationRequest> Requests(float temperature) {
    std::vector<GenerationRequest> r;
    for (int64_t len : {5, 37, 61}) {  // around the sliding window (48)
      GenerationRequest q;
      for (int64_t i = 0; i < len; ++i)
        q.prompt.push_back(static_cast<int32_t>((i * 31 + len) % 384));
      q.max_new_tokens = 64;
      q.sampling.temperature = temperature;
      q.sampling.seed = static_cast<uint64_t>(len);
      r.push_back(q);
    }
    return r;
  }

  // A batched prefill of Requests() against each request's alone: equal
  // logits, activation codes and scales (one per token or per sequence).
  void ExpectBatchedPrefillAsAlone(LlamaModel& model, bool fp8,
                                   bool per_token) {
    auto cache = FragmentedCache(model);
    const std::vector<GenerationRequest> requests = Requests(0.0f);
    std::vector<std::vector<int32_t>> tables(requests.size());
    std::vector<SequenceStep> steps;
    int64_t total_rows = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(cache->Reserve(requests[i].prompt.size(), &tables[i]).ok());
      steps.push_back({requests[i].prompt, 0, &tables[i]});
      total_rows += static_cast<int64_t>(requests[i].prompt.size());
    }
    ForwardTrace together;
    together.record_codes = true;
    std::vector<float> batched, alone;
    ASSERT_TRUE(model.Forward(steps, *cache, &batched, &together).ok());
    const int64_t vocab = model.config().vocab_size;
    EXPECT_EQ(together.scales.size(), fp8 ? 4 * model.config().num_layers : 0);
    const size_t groups = per_token ? total_rows : steps.size();
    int64_t first_row = 0;
    std::set<float> distinct_scales;
    for (size_t i = 0; i < steps.size(); ++i) {
      ForwardTrace single;
      single.record_codes = true;
      ASSERT_TRUE(model.Forward({&steps[i], 1}, *cache, &alone, &single).ok());
      EXPECT_TRUE(
          std::equal(alone.begin(), alone.end(), batched.begin() + i * vocab))
          << "request " << i;
      const int64_t rows = static_cast<int64_t>(steps[i].tokens.size());
      // The request's scales: its rows', or its one.
      const int64_t first = per_token ? first_row : static_cast<int64_t>(i);
      const int64_t count = per_token ? rows : 1;
      ASSERT_EQ(single.scales.size(), together.scales.size());
      for (size_t call = 0; call < single.scales.size(); ++call) {
        ASSERT_EQ(together.scales[call].size(), groups);
        const std::vector<float> own(
            together.scales[call].begin() + first,
            together.scales[call].begin() + first + count);
        EXPECT_EQ(single.scales[call], own)
            << "request " << i << " projection call " << call;
        distinct_scales.insert(own.begin(), own.end());
        const int64_t cols =
            static_cast<int64_t>(single.codes[call].size()) / rows;
        EXPECT_TRUE(std::equal(single.codes[call].begin(),
                               single.codes[call].end(),
                               together.codes[call].begin() + first_row * cols))
            << "request " << i << " projection call " << call;
      }
      first_row += rows;
    }
    if (fp8) {  // the groups really do have different scales
      EXPECT_GT(distinct_scales.size(), together.scales.size());
    }
    for (auto& t : tables) EXPECT_TRUE(cache->Release(&t).ok());
  }

  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Backend> backend_;
  std::vector<std::vector<int32_t>> kept_;
};

class BatchingTest : public GeneratorTest,
                     public ::testing::WithParamInterface<LinearMethod> {};

TEST_P(BatchingTest, BatchedPagedDecodingMatchesOneSequenceAtATime) {
  auto model = Model(GetParam());
  ASSERT_NE(model, nullptr);
  for (float temperature : {0.0f, 0.9f}) {
    auto paged = FragmentedCache(*model);
    auto plain = model->NewKvCache({.block_size = 64, .num_blocks = 8});
    ASSERT_TRUE(plain.ok());
    auto batched = Generate(*model, *paged, Requests(temperature));
    auto single =
        Generate(*model, **plain, Requests(temperature), OneAtATime());
    ASSERT_TRUE(batched.ok()) << batched.status();
    ASSERT_TRUE(single.ok()) << single.status();
    for (size_t i = 0; i < batched->size(); ++i) {
      EXPECT_EQ((*batched)[i].tokens, (*single)[i].tokens)
          << "request " << i << " temperature " << temperature;
      EXPECT_EQ((*batched)[i].tokens.size(), 64u);
    }
  }
}

TEST_P(BatchingTest, BatchedPrefillGivesEachSequenceItsOwnLogitsAndScales) {
  // Stronger than equal tokens: each sequence's logits, FP8 activation codes
  // and scales are bit for bit those it gets alone, although the batch mixes
  // prompts whose activations differ in size: with a scale per token (the
  // default) and with one per sequence (docs/design.md).
  for (ActivationScales scales :
       {ActivationScales::kToken, ActivationScales::kSequence}) {
    SCOPED_TRACE(scales == ActivationScales::kToken ? "per token"
                                                    : "per sequence");
    auto model = Model(GetParam(), scales);
    ASSERT_NE(model, nullptr);
    ExpectBatchedPrefillAsAlone(*model, GetParam() == LinearMethod::kFp8,
                                scales == ActivationScales::kToken);
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, BatchingTest,
                         ::testing::Values(LinearMethod::kNone,
                                           LinearMethod::kFp8),
                         [](const auto& info) {
                           return info.param == LinearMethod::kFp8
                                      ? std::string("fp8")
                                      : std::string("none");
                         });

TEST_F(GeneratorTest, SeedsReproduceAndStopTokensStop) {
  auto model = Model(LinearMethod::kNone);
  ASSERT_NE(model, nullptr);
  auto cache = model->NewKvCache({.block_size = 16, .num_blocks = 64});
  ASSERT_TRUE(cache.ok());
  auto a = Generate(*model, **cache, Requests(1.0f));
  auto b = Generate(*model, **cache, Requests(1.0f));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[2].tokens, (*b)[2].tokens);
  EXPECT_EQ((*cache)->free_blocks(), 64) << "blocks leaked";

  std::vector<GenerationRequest> r = Requests(0.0f);
  r[0].stop_ids = {(*a)[0].tokens.empty() ? 0 : 0};
  auto greedy = Generate(*model, **cache, Requests(0.0f));
  ASSERT_TRUE(greedy.ok());
  r[0].stop_ids = {(*greedy)[0].tokens[3]};
  auto stopped = Generate(*model, **cache, r);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ((*stopped)[0].finish, FinishReason::kStop);
  EXPECT_LE((*stopped)[0].tokens.size(), 4u);
  EXPECT_EQ((*stopped)[0].tokens.back(), (*greedy)[0].tokens[3]);
  EXPECT_EQ((*stopped)[1].finish, FinishReason::kLength);
}

TEST_F(GeneratorTest, GreedyOnTheDeviceIsTheArgmaxOfTheLogits) {
  auto model = Model(LinearMethod::kNone);
  ASSERT_NE(model, nullptr);
  auto cache = model->NewKvCache({.block_size = 16, .num_blocks = 16});
  ASSERT_TRUE(cache.ok());
  const std::vector<GenerationRequest> requests = Requests(0.0f);
  std::vector<std::vector<int32_t>> tables(requests.size());
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE((*cache)->Reserve(requests[i].prompt.size(), &tables[i]).ok());
    steps.push_back({requests[i].prompt, 0, &tables[i]});
  }
  std::vector<float> logits;
  ASSERT_TRUE(model->Forward(steps, **cache, &logits).ok());
  // The steps backwards, so that a row's logits_row is not its index.
  std::vector<SampleRow> rows;
  for (size_t i = steps.size(); i-- > 0;) {
    rows.push_back({.logits_row = static_cast<int64_t>(i),
                    .params = {.temperature = 0.0f}});
  }
  std::vector<SampledToken> greedy;
  ASSERT_TRUE(model->ForwardSample(steps, **cache, rows, &greedy).ok());
  const int64_t vocab = model->config().vocab_size;
  ASSERT_EQ(greedy.size(), steps.size());
  for (size_t j = 0; j < rows.size(); ++j) {
    const int64_t i = rows[j].logits_row;
    EXPECT_EQ(greedy[j].id, ArgmaxIndex(logits.data() + i * vocab, vocab));
  }
  // A row naming no step is refused before the forward runs.
  rows[0].logits_row = static_cast<int64_t>(steps.size());
  EXPECT_EQ(model->ForwardSample(steps, **cache, rows, &greedy).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GeneratorTest, RejectsBadRequests) {
  auto model = Model(LinearMethod::kNone);
  ASSERT_NE(model, nullptr);
  auto cache = model->NewKvCache({.block_size = 16, .num_blocks = 4});
  ASSERT_TRUE(cache.ok());
  GenerationRequest r;
  EXPECT_EQ(Generate(*model, **cache, {r}).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.prompt = {1, 2, 3};
  r.sampling.top_p = 0;
  EXPECT_EQ(Generate(*model, **cache, {r}).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.sampling.top_p = 1;
  r.max_new_tokens = 2000;  // beyond max_position_embeddings (1024)
  EXPECT_EQ(Generate(*model, **cache, {r}).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.max_new_tokens = 100;  // 103 tokens > 4 blocks of 16
  EXPECT_EQ(Generate(*model, **cache, {r}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*cache)->free_blocks(), 4);
  r.prompt = {1, 384};
  r.max_new_tokens = 1;
  EXPECT_EQ(Generate(*model, **cache, {r}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
