// ProfilingBackend (worker/step_profile.h), the CPU twin of bench_decode
// --profile on the GPU: a tiny model's decode step, profiled, counts each
// part of the step as often as the forward runs it (a projection per
// layer, one lm_head, quantization only in FP8), its times add up to no
// more than the step's, and the tokens are the unprofiled backend's. Over
// CapturingBackend (CUDA graphs' bookkeeping on the CPU), a profiled step
// runs eagerly even where a captured graph would be replayed.
#include "worker/step_profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "tests/status_util.h"
#include "tests/worker/capturing_backend.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class StepProfileTest : public ::testing::TestWithParam<LinearMethod> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_profile_", ::getpid()));
    ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny"),
                                         {.seed = 9}, dir_->string())
                    .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // A model on `backend`, with a cache for two sequences of 32 tokens.
  struct Run {
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cache;
    std::vector<std::vector<int32_t>> tables;
    int64_t position = 0;
  };
  static Run Load(Backend& backend) {
    Run r;
    auto ckpt = Checkpoint::Open(dir_->string());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    if (!ckpt.ok()) return r;
    ModelOptions o;
    o.method = GetParam();
    o.cpu.num_threads = 1;
    auto m = LlamaModel::Load(**ckpt, backend, o);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return r;
    r.model = *std::move(m);
    auto cache = r.model->NewKvCache({.block_size = 8, .num_blocks = 8});
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!cache.ok()) return Run{};
    r.cache = *std::move(cache);
    r.tables.resize(2);
    for (auto& t : r.tables) EXPECT_TRUE(r.cache->Reserve(32, &t).ok());
    return r;
  }
  // One step of both sequences (`count` tokens each), greedy tokens back.
  static std::vector<int32_t> Step(Run& r, int64_t count) {
    std::vector<SequenceStep> seqs;
    for (int b = 0; b < 2; ++b) {
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < count; ++t) {
        ids.push_back(static_cast<int32_t>((r.position + t) * 7 + b * 131) %
                      512);
      }
      seqs.push_back({ids, r.position, &r.tables[b]});
    }
    r.position += count;
    std::vector<SampleRow> rows = {{.logits_row = 0}, {.logits_row = 1}};
    std::vector<SampledToken> out;
    absl::Status s = r.model->ForwardSample(seqs, *r.cache, rows, &out);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<int32_t> ids;
    for (const SampledToken& t : out) ids.push_back(t.id);
    return ids;
  }

  static fs::path* dir_;
};

fs::path* StepProfileTest::dir_ = nullptr;

int64_t Calls(const StepProfile& p, StepPart part) {
  return p.calls[static_cast<int>(part)];
}

TEST_P(StepProfileTest, CountsEveryPartOfADecodeStep) {
  std::unique_ptr<Backend> cpu = NewCpuBackend({.num_threads = 1});
  std::unique_ptr<Backend> plain_cpu = NewCpuBackend({.num_threads = 1});
  ProfilingBackend profiler(*cpu);
  Run profiled = Load(profiler), plain = Load(*plain_cpu);
  ASSERT_NE(profiled.model, nullptr);
  ASSERT_NE(plain.model, nullptr);
  profiler.NameProjections(*profiled.model);
  EXPECT_EQ(Step(profiled, 5), Step(plain, 5));  // prefill, not profiled
  OCTET_ASSERT_OK(profiler.Start());
  EXPECT_EQ(profiler.Start().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> got = Step(profiled, 1);
  absl::StatusOr<StepProfile> p = profiler.Stop();
  OCTET_ASSERT_OK(p);
  EXPECT_EQ(profiler.Stop().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(got, Step(plain, 1));

  const int64_t layers = profiled.model->config().num_layers;
  for (StepPart part :
       {StepPart::kQkv, StepPart::kAttention, StepPart::kRope}) {
    EXPECT_GE(Calls(*p, part), layers) << StepPartName(part);
  }
  EXPECT_EQ(Calls(*p, StepPart::kAttention), layers);
  // RoPE of q and k and the KV write in one call (RopeWriteKv).
  EXPECT_EQ(Calls(*p, StepPart::kRope), layers);
  EXPECT_EQ(Calls(*p, StepPart::kKvWrite), 0);
  // The residual adds happen in the o and down layers' ScaleRows.
  EXPECT_EQ(Calls(*p, StepPart::kAdd), 0);
  // Row-parallel layers: block sums, then (FP8) the row scaling.
  for (StepPart part : {StepPart::kO, StepPart::kDown, StepPart::kGateUp}) {
    EXPECT_GE(Calls(*p, part), layers) << StepPartName(part);
  }
  EXPECT_EQ(Calls(*p, StepPart::kLmHead), 1);
  EXPECT_EQ(Calls(*p, StepPart::kSampling), 1);
  EXPECT_GT(Calls(*p, StepPart::kHost), 0);
  EXPECT_EQ(Calls(*p, StepPart::kOtherGemm), 0);  // every GEMM is named
  if (GetParam() == LinearMethod::kFp8) {
    // One call for each of the 4 inputs of a layer (Backend::
    // QuantizeGroups).
    EXPECT_EQ(Calls(*p, StepPart::kQuantize), 4 * layers);
  } else {
    EXPECT_EQ(Calls(*p, StepPart::kQuantize), 0);
  }
  // The operations are disjoint stretches of the step.
  for (double ms : p->ms) EXPECT_GE(ms, 0.0);
  EXPECT_GT(p->sum_ms(), 0.0);
  EXPECT_LE(p->sum_ms(), p->wall_ms);

  const std::string table = StepProfileTable({"a"}, {*p}, {2 * p->wall_ms});
  EXPECT_NE(table.find("profile qkv "), std::string::npos) << table;
  EXPECT_NE(table.find("profile gap "), std::string::npos) << table;
  EXPECT_EQ(table.find("other_gemm"), std::string::npos) << table;
}

// Over a backend that captures (CapturingBackend, as CUDA does): once the
// bucket's graph is captured, a step replays it; a profiled step runs every
// operation eagerly instead, so that each can be timed.
TEST_P(StepProfileTest, AProfiledStepRunsEagerlyWhereAGraphWouldReplay) {
  testing::CapturingBackend capturing(NewCpuBackend({.num_threads = 1}));
  ProfilingBackend profiler(capturing);
  Run r = Load(profiler);
  ASSERT_NE(r.model, nullptr);
  profiler.NameProjections(*r.model);
  Step(r, 4);
  for (int i = 0; i < 3; ++i) Step(r, 1);  // warm-up, capture, replay
  const GraphStats before = r.model->graph_stats();
  ASSERT_EQ(before.captures, 1);
  ASSERT_GE(before.replays, 1);
  OCTET_ASSERT_OK(profiler.Start());
  EXPECT_FALSE(profiler.can_capture());
  Step(r, 1);
  absl::StatusOr<StepProfile> p = profiler.Stop();
  OCTET_ASSERT_OK(p);
  EXPECT_EQ(r.model->graph_stats().replays, before.replays);
  EXPECT_EQ(Calls(*p, StepPart::kAttention), r.model->config().num_layers);
  EXPECT_TRUE(profiler.can_capture());
  Step(r, 1);
  EXPECT_EQ(r.model->graph_stats().replays, before.replays + 1);
}

INSTANTIATE_TEST_SUITE_P(Methods, StepProfileTest,
                         ::testing::Values(LinearMethod::kNone,
                                           LinearMethod::kFp8),
                         [](const auto& info) {
                           return info.param == LinearMethod::kFp8
                                      ? std::string("Fp8")
                                      : std::string("None");
                         });

}  // namespace
}  // namespace octet
