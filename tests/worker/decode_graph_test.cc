// Decode graphs (LlamaModel, ModelOptions::graph_max_batch): the host
// bookkeeping of captured decodes, run on the CPU through CapturingBackend,
// which records and replays work as CUDA graphs do. A model run through
// captures must give what the same model gives run eagerly, bit for bit:
// tokens, logits and the KV cache (padding rows write nothing). Buckets,
// warm-up before capture, invalidation when buffers move or the cache
// changes, and a refused capture are each checked. The same pair of models
// also checks that fusing FP8 input quantization into its producers
// changes no bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "tests/worker/capturing_backend.h"
#include "worker/generator.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
using testing::CapturingBackend;

TEST(DecodeGraphBucket, PowersOfTwoToEightThenMultiplesOfEight) {
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {1, 1},  {2, 2},   {3, 4},   {4, 4},   {5, 8},   {8, 8},
      {9, 16}, {16, 16}, {17, 24}, {33, 40}, {63, 64}, {64, 64}};
  for (auto [batch, bucket] : want) {
    EXPECT_EQ(DecodeGraphBucket(batch, 64), bucket) << batch;
  }
  EXPECT_EQ(DecodeGraphBucket(65, 64), 0);  // above the largest: no graph
  EXPECT_EQ(DecodeGraphBucket(0, 64), 0);
  EXPECT_EQ(DecodeGraphBucket(17, 20), 20);  // never above the largest
  EXPECT_EQ(DecodeGraphBucket(1, 0), 0);     // graphs off
}

class DecodeGraphTest : public ::testing::TestWithParam<LinearMethod> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_graph_", ::getpid()));
    ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny-mistral"),
                                         {.seed = 5}, dir_->string())
                    .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    auto ckpt = Checkpoint::Open(dir_->string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    eager_backend_ = NewCpuBackend({.num_threads = 1});
    auto capturing =
        std::make_unique<CapturingBackend>(NewCpuBackend({.num_threads = 1}));
    capturing_ = capturing.get();
    capturing_->ClaimFusedInputQuantization();  // as the CUDA backend does
    graph_backend_ = std::move(capturing);
    eager_ = Load(*eager_backend_, 8);
    graphed_ = Load(*graph_backend_, 8);
  }

  std::unique_ptr<LlamaModel> Load(Backend& backend, int64_t max_batch) {
    ModelOptions o;
    o.method = GetParam();
    o.cpu.num_threads = 1;
    o.graph_max_batch = max_batch;
    auto m = LlamaModel::Load(*ckpt_, backend, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  std::unique_ptr<KvCache> Cache(LlamaModel& m) {
    auto c = m.NewKvCache({.block_size = 4, .num_blocks = 128});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Five sequences that stop one after another, so that decodes run at
  // batch sizes 5, 4, 3, 2 and 1 (buckets 8, 4, 4, 2, 1); greedy and drawn.
  static std::vector<GenerationRequest> Requests() {
    std::vector<GenerationRequest> r;
    for (int i = 0; i < 5; ++i) {
      GenerationRequest q;
      for (int t = 0; t < 3 + 4 * i; ++t) {
        q.prompt.push_back(static_cast<int32_t>((t * 37 + i + 1) % 384));
      }
      q.max_new_tokens = 4 + 3 * i;
      q.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
      q.sampling.seed = 100 + i;
      r.push_back(q);
    }
    return r;
  }

  // Fills every K and V slot of every layer with one byte, so that slots
  // nobody wrote compare equal.
  static void Fill(Backend& backend, const KvCache& cache, int64_t layers) {
    const std::vector<uint8_t> pool(cache.bytes() / (2 * layers), 0xA5);
    for (int64_t l = 0; l < layers; ++l) {
      for (void* p : {cache.k(l), cache.v(l)}) {
        ASSERT_TRUE(backend.CopyToDevice(p, pool.data(), pool.size()).ok());
      }
    }
  }

  // Every K and V slot of every layer, as bytes.
  static std::vector<uint8_t> Pools(Backend& backend, const KvCache& cache,
                                    int64_t layers) {
    std::vector<uint8_t> all;
    const size_t bytes = cache.bytes() / (2 * layers);
    std::vector<uint8_t> pool(bytes);
    for (int64_t l = 0; l < layers; ++l) {
      for (const void* p : {cache.k(l), cache.v(l)}) {
        EXPECT_TRUE(backend.CopyToHost(pool.data(), p, bytes).ok());
        all.insert(all.end(), pool.begin(), pool.end());
      }
    }
    return all;
  }

  static fs::path* dir_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Backend> eager_backend_, graph_backend_;
  CapturingBackend* capturing_ = nullptr;
  std::unique_ptr<LlamaModel> eager_, graphed_;
};

fs::path* DecodeGraphTest::dir_ = nullptr;

TEST_P(DecodeGraphTest, GenerationThroughCapturesIsTheEagerOneBitForBit) {
  ASSERT_NE(eager_, nullptr);
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  const int64_t layers = eager_->config().num_layers;
  Fill(*eager_backend_, *eager_cache, layers);
  Fill(*graph_backend_, *graph_cache, layers);
  auto want = Generate(*eager_, *eager_cache, Requests());
  auto got = Generate(*graphed_, *graph_cache, Requests());
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < want->size(); ++i) {
    EXPECT_EQ((*got)[i].tokens, (*want)[i].tokens) << "request " << i;
  }
  // Buckets 8, 4, 2, 1: each warmed up once; 4 (batch 4 then 3) and 2 and 1
  // run often enough to be captured and replayed.
  const GraphStats& stats = graphed_->graph_stats();
  EXPECT_EQ(stats.warmups, 4);
  EXPECT_GE(stats.captures, 3);
  EXPECT_GT(stats.replays, 10);
  EXPECT_EQ(capturing_->captures(), stats.captures);
  EXPECT_EQ(capturing_->replays(), stats.replays);
  // The eager backend cannot capture: its model never tries.
  EXPECT_EQ(eager_->graph_stats().warmups, 0);
  // Padding rows (slot -1) wrote nothing: the caches hold the same bytes.
  EXPECT_EQ(Pools(*graph_backend_, *graph_cache, layers),
            Pools(*eager_backend_, *eager_cache, layers));
}

// Decode steps of `n` sequences after their prompts, on both models, with
// each model's logits compared; returns false on a failure.
void DecodeBoth(LlamaModel& eager, KvCache& eager_cache, LlamaModel& graphed,
                KvCache& graph_cache, int n, int steps, int prompt_len) {
  std::vector<std::vector<int32_t>> te(n), tg(n);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(eager_cache.Reserve(prompt_len + steps, &te[i]).ok());
    ASSERT_TRUE(graph_cache.Reserve(prompt_len + steps, &tg[i]).ok());
  }
  std::vector<float> le, lg;
  for (int step = 0; step <= steps; ++step) {
    std::vector<SequenceStep> se, sg;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> tokens;
      if (step == 0) {
        for (int t = 0; t < prompt_len; ++t) tokens.push_back((t + i) % 300);
      } else {
        tokens = {static_cast<int32_t>((step * 7 + i) % 300)};
      }
      const int64_t start = step == 0 ? 0 : prompt_len + step - 1;
      se.push_back({tokens, start, &te[i]});
      sg.push_back({tokens, start, &tg[i]});
    }
    ASSERT_TRUE(eager.Forward(se, eager_cache, &le).ok());
    ASSERT_TRUE(graphed.Forward(sg, graph_cache, &lg).ok());
    ASSERT_EQ(lg, le) << "step " << step;
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(eager_cache.Release(&te[i]).ok());
    ASSERT_TRUE(graph_cache.Release(&tg[i]).ok());
  }
}

TEST_P(DecodeGraphTest, CapturesAreDroppedWhenBuffersMoveOrTheCacheChanges) {
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  DecodeBoth(*eager_, *eager_cache, *graphed_, *graph_cache, 3, 4, 5);
  const GraphStats before = graphed_->graph_stats();
  EXPECT_EQ(before.captures, 1);  // bucket 4: warm-up, capture, replays
  EXPECT_EQ(before.replays, 3);
  // A prefill longer than any before grows the activations: the capture
  // named the old buffers and is dropped, then made again.
  DecodeBoth(*eager_, *eager_cache, *graphed_, *graph_cache, 3, 4, 90);
  EXPECT_EQ(graphed_->graph_stats().invalidations, before.invalidations + 1);
  EXPECT_EQ(graphed_->graph_stats().captures, 2);
  // Another cache: its pools are elsewhere, so captures start over.
  auto other_eager = Cache(*eager_);
  auto other_graph = Cache(*graphed_);
  DecodeBoth(*eager_, *other_eager, *graphed_, *other_graph, 3, 4, 5);
  EXPECT_EQ(graphed_->graph_stats().invalidations, before.invalidations + 2);
  EXPECT_EQ(graphed_->graph_stats().captures, 3);
}

TEST_P(DecodeGraphTest, ARefusedCaptureLeavesItsBucketEager) {
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  capturing_->FailNextCapture();
  DecodeBoth(*eager_, *eager_cache, *graphed_, *graph_cache, 2, 6, 5);
  EXPECT_EQ(graphed_->graph_stats().captures, 0);
  EXPECT_EQ(graphed_->graph_stats().replays, 0);
}

TEST_P(DecodeGraphTest, BatchesAboveTheLargestBucketRunEagerly) {
  graphed_ = Load(*graph_backend_, 2);
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  DecodeBoth(*eager_, *eager_cache, *graphed_, *graph_cache, 3, 4, 5);
  EXPECT_EQ(graphed_->graph_stats().warmups, 0);
  EXPECT_EQ(graphed_->graph_stats().replays, 0);
}

// Not graphs, but the same model pair serves: FP8 inputs quantized where
// RMSNorm and SiLU·up make them (ModelOptions::fuse_input_quantization)
// give the logits, codes and scales of the model that stores them first.
TEST_P(DecodeGraphTest, FusedInputQuantizationChangesNoBit) {
  ModelOptions o;
  o.method = GetParam();
  o.cpu.num_threads = 1;
  o.fuse_input_quantization = false;
  auto stored = LlamaModel::Load(*ckpt_, *eager_backend_, o);
  ASSERT_TRUE(stored.ok()) << stored.status();
  auto a = Cache(*graphed_);
  auto b = Cache(**stored);
  std::vector<std::vector<int32_t>> ta(3), tb(3);
  std::vector<SequenceStep> sa, sb;
  std::vector<std::vector<int32_t>> prompts = {
      {5, 9, 200, 3}, {7}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(a->Reserve(prompts[i].size(), &ta[i]).ok());
    ASSERT_TRUE(b->Reserve(prompts[i].size(), &tb[i]).ok());
    sa.push_back({prompts[i], 0, &ta[i]});
    sb.push_back({prompts[i], 0, &tb[i]});
  }
  ForwardTrace fused_trace, stored_trace;
  fused_trace.record_codes = stored_trace.record_codes = true;
  std::vector<float> fused_logits, stored_logits;
  const int64_t before = capturing_->fused_quantizes();
  ASSERT_TRUE(graphed_->Forward(sa, *a, &fused_logits, &fused_trace).ok());
  ASSERT_TRUE((*stored)->Forward(sb, *b, &stored_logits, &stored_trace).ok());
  EXPECT_EQ(fused_logits, stored_logits);
  EXPECT_EQ(fused_trace.codes, stored_trace.codes);
  EXPECT_EQ(fused_trace.scales, stored_trace.scales);
  // FP8 fuses three of each layer's four inputs (o_proj's is attention's
  // output, in memory); unquantized layers have nothing to fuse.
  const int64_t layers = graphed_->config().num_layers;
  EXPECT_EQ(capturing_->fused_quantizes() - before,
            GetParam() == LinearMethod::kFp8 ? 3 * layers : 0);
}

// At TP = 1 each FP8 input is quantized in one call (Backend::
// QuantizeGroups; CUDA: one launch in place of three), three of the four
// from their producers: in a decode step, where every row is its own
// sequence, and in a prefill, whose sequences have several rows. The CPU
// runs it as the two calls it replaces; CUDA's kernels are held to those
// two calls' bits in tests/kernels/backend_table_test.cc.
TEST_P(DecodeGraphTest, EachInputIsQuantizedInOneCall) {
  ASSERT_NE(graphed_, nullptr);
  auto cache = Cache(*graphed_);
  std::vector<std::vector<int32_t>> tables(2);
  std::vector<SequenceStep> prefill, decode;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->Reserve(6, &tables[i]).ok());
    prefill.push_back({{3, 1, 4, 1, 5}, 0, &tables[i]});
    decode.push_back({{9}, 5, &tables[i]});
  }
  const int64_t layers = graphed_->config().num_layers;
  const bool fp8 = GetParam() == LinearMethod::kFp8;
  std::vector<float> logits;
  for (const auto* steps : {&prefill, &decode}) {
    const int64_t calls = capturing_->one_call_quantizes();
    const int64_t fused = capturing_->fused_quantizes();
    ASSERT_TRUE(graphed_->Forward(*steps, *cache, &logits).ok());
    EXPECT_EQ(capturing_->one_call_quantizes() - calls, fp8 ? 4 * layers : 0);
    EXPECT_EQ(capturing_->fused_quantizes() - fused, fp8 ? 3 * layers : 0);
  }
}

// A backend that plans attention on the host (CUDA: FlashInfer for a
// prefill) is asked once per eager forward, given the batch the device
// metadata describes (CapturingBackend checks rows and positions), and
// every layer's Attention of a planned forward names the plan; a graphed
// decode step (warm-up, capture or replay) is never asked. The logits are
// the eager model's bit for bit throughout.
TEST_P(DecodeGraphTest, APrefillIsPlannedOnTheHostOnceForAllItsLayers) {
  ASSERT_NE(eager_, nullptr);
  ASSERT_NE(graphed_, nullptr);
  capturing_->PlanPrefillsOnTheHost();
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  const int64_t layers = graphed_->config().num_layers;
  std::vector<std::vector<int32_t>> te(2), tg(2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(eager_cache->Reserve(16, &te[i]).ok());
    ASSERT_TRUE(graph_cache->Reserve(16, &tg[i]).ok());
  }
  // A prompt of 5 and one of 3 (a prefill), then a chunk of 2 beside a
  // decode (planned), then decodes (graphed: bucket 2, not asked).
  struct Step {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int64_t> start;
    bool planned;
  };
  std::vector<Step> steps = {{{{3, 1, 4, 1, 5}, {2, 7, 1}}, {0, 0}, true},
                             {{{9, 2}, {8}}, {5, 3}, true}};
  for (int d = 0; d < 6; ++d) {
    steps.push_back({{{11 + d}, {20 + d}}, {7 + d, 4 + d}, false});
  }
  std::vector<float> le, lg;
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<SequenceStep> se, sg;
    for (int i = 0; i < 2; ++i) {
      se.push_back({steps[k].tokens[i], steps[k].start[i], &te[i]});
      sg.push_back({steps[k].tokens[i], steps[k].start[i], &tg[i]});
    }
    const int64_t requests = capturing_->plan_requests();
    const int64_t plans = capturing_->host_plans();
    const int64_t attentions = capturing_->planned_attentions();
    ASSERT_TRUE(eager_->Forward(se, *eager_cache, &le).ok());
    absl::Status s = graphed_->Forward(sg, *graph_cache, &lg);
    ASSERT_TRUE(s.ok()) << "step " << k << ": " << s;
    EXPECT_EQ(lg, le) << "step " << k;
    EXPECT_EQ(capturing_->plan_requests() - requests, steps[k].planned ? 1 : 0)
        << "step " << k;
    EXPECT_EQ(capturing_->host_plans() - plans, steps[k].planned ? 1 : 0)
        << "step " << k;
    EXPECT_EQ(capturing_->planned_attentions() - attentions,
              steps[k].planned ? layers : 0)
        << "step " << k;
  }
  EXPECT_GT(graphed_->graph_stats().replays, 0);
}

// Sampling is in the graph: after its warm-up and capture, a decode step
// (ForwardSample) stages its rows, replays, and waits once for the tokens,
// with no device work outside the replay. Its tokens and log-probabilities
// are the eager model's bit for bit, with a repetition penalty over
// histories that grow each step, greedy rows beside drawn ones, and rows
// for only some of the sequences (padded to the bucket). A staging that
// moves the sampling buffers drops the captures, which are made again.
TEST_P(DecodeGraphTest, ADecodeStepSamplesInItsGraphAndWaitsOnce) {
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  const int n = 3, prompt = 5, steps = 9;
  std::vector<std::vector<int32_t>> te(n), tg(n), history(n);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(eager_cache->Reserve(prompt + steps, &te[i]).ok());
    ASSERT_TRUE(graph_cache->Reserve(prompt + steps, &tg[i]).ok());
    for (int t = 0; t < prompt; ++t) history[i].push_back((t * 11 + i) % 300);
  }
  int64_t cached = 0;
  for (int step = 0; step <= steps; ++step) {
    std::vector<SequenceStep> se, sg;
    std::vector<SampleRow> rows;
    for (int i = 0; i < n; ++i) {
      const std::vector<int32_t> tokens =
          step == 0 ? history[i] : std::vector<int32_t>{history[i].back()};
      se.push_back({tokens, cached, &te[i]});
      sg.push_back({tokens, cached, &tg[i]});
      if (i == 1 && step % 2 == 1) continue;  // no token wanted this step
      SampleRow r{.logits_row = i, .position = cached + (int64_t)tokens.size()};
      r.params = {.temperature = i == 0 ? 0.0f : 0.9f,
                  .top_k = i == 2 ? 40 : 0,
                  .seed = static_cast<uint64_t>(i + 1)};
      r.repetition_penalty = 1.3f;
      r.history = history[i];
      r.logprob = true;
      rows.push_back(r);
    }
    if (step == 6) capturing_->MoveSampleBuffersAtNextStage();
    const GraphStats before = graphed_->graph_stats();
    const int64_t ops = capturing_->eager_ops();
    const int64_t waits = capturing_->host_waits();
    std::vector<SampledToken> want, got;
    ASSERT_TRUE(eager_->ForwardSample(se, *eager_cache, rows, &want).ok());
    ASSERT_TRUE(graphed_->ForwardSample(sg, *graph_cache, rows, &got).ok());
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].id, want[j].id) << "step " << step << " row " << j;
      EXPECT_EQ(got[j].logprob, want[j].logprob) << "step " << step;
    }
    const GraphStats& after = graphed_->graph_stats();
    if (after.replays > before.replays) {
      EXPECT_EQ(capturing_->eager_ops(), ops) << "step " << step;
      EXPECT_EQ(capturing_->host_waits(), waits + 1) << "step " << step;
    }
    if (step == 6) {
      EXPECT_EQ(after.invalidations, before.invalidations + 1);
    }
    cached += static_cast<int64_t>(se[0].tokens.size());
    for (size_t j = 0; j < rows.size(); ++j) {
      history[rows[j].logits_row].push_back(got[j].id);
    }
    for (int i = 0; i < n; ++i) {
      if (i == 1 && step % 2 == 1) history[i].push_back(7);  // fed anyway
    }
  }
  // Every decode is bucket 4 with draws, at 2 rows or 3: warmed up at the
  // first decode and again after the move (step 6), captured at the next;
  // every other decode replays (a capture's step included).
  const GraphStats& stats = graphed_->graph_stats();
  EXPECT_EQ(stats.warmups, 2);
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.replays, steps - 2);
}

// A step whose sampling cannot be staged still runs its forward (with
// several ranks the others are already in its collectives) and then fails:
// its keys and values are in the cache, so the next steps' logits are
// those of a model that ran it.
TEST_P(DecodeGraphTest, AFailedStagingStillRunsTheForward) {
  ASSERT_NE(graphed_, nullptr);
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphed_);
  std::vector<int32_t> te, tg;
  ASSERT_TRUE(eager_cache->Reserve(8, &te).ok());
  ASSERT_TRUE(graph_cache->Reserve(8, &tg).ok());
  const std::vector<int32_t> prompt = {4, 8, 15, 16, 23};
  const std::vector<SampleRow> rows = {{.logits_row = 0, .position = 5}};
  std::vector<SampledToken> tokens;
  std::vector<float> le, lg;
  ASSERT_TRUE(eager_->Forward({{prompt, 0, &te}}, *eager_cache, &le).ok());
  capturing_->FailNextStage();
  EXPECT_EQ(
      graphed_->ForwardSample({{prompt, 0, &tg}}, *graph_cache, rows, &tokens)
          .code(),
      absl::StatusCode::kResourceExhausted);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> next = {static_cast<int32_t>(42 + step)};
    ASSERT_TRUE(
        eager_->Forward({{next, 5 + step, &te}}, *eager_cache, &le).ok());
    ASSERT_TRUE(
        graphed_->Forward({{next, 5 + step, &tg}}, *graph_cache, &lg).ok());
    ASSERT_EQ(lg, le) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, DecodeGraphTest,
                         ::testing::Values(LinearMethod::kNone,
                                           LinearMethod::kFp8),
                         [](const auto& info) {
                           return info.param == LinearMethod::kFp8
                                      ? std::string("Fp8")
                                      : std::string("None");
                         });

}  // namespace
}  // namespace octet
