// Octet's serving promise under chunked prefill and prefix caching: a
// request's generated tokens, their logprobs and its prompt's logprobs are
// the same bits
//   - alone, with its prompt whole in one step (the reference: TP = 1,
//     a budget no prompt reaches, one request at a time, no prefix cache),
//   - batched with others under a small token budget, so that its prompt is
//     cut into chunks at places that depend on the load (mid-block too),
//     while other requests decode in the same steps, and
//   - starting from blocks of the prefix cache that earlier requests with
//     the same first tokens left, alone and batched,
// at TP = 1 and TP = 3, unquantized, in FP8 quantized at load (per-tensor
// weight scales, per-token activation scales) and from an FP8 checkpoint
// of compressed-tensors' fp8-channel-token scheme (per-channel weight
// scales), on real worker processes (engine.h over WorkerGroup). A model
// with a sliding window (tiny-mistral, prompts past its window) is held to
// the same, and so are sequences preempted for want of KV blocks and
// recomputed. Negative controls show that the comparisons can fail: FP8
// with per-sequence scales (--activation_scales sequence), forced to chunk
// or to use the prefix cache, changes the bits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/engine.h"
#include "coordinator/metrics.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "tests/process_util.h"
#include "tools/fp8_export.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
namespace rpc = internal::v1;

// What one request received.
struct Got {
  absl::Mutex mu;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs, prompt_logprobs;
  Outcome outcome;
  absl::Notification done;

  void Add(const Delta& d) {
    absl::MutexLock lock(&mu);
    tokens.insert(tokens.end(), d.token_ids.begin(), d.token_ids.end());
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    prompt_logprobs.insert(prompt_logprobs.end(), d.prompt_logprobs.begin(),
                           d.prompt_logprobs.end());
  }
  RequestCallbacks Callbacks() {
    return {.on_delta = [this](const Delta& d) { Add(d); },
            .on_done =
                [this](const Delta& d, const Outcome& o) {
                  Add(d);
                  {
                    absl::MutexLock lock(&mu);
                    outcome = o;
                  }
                  done.Notify();
                }};
  }
};

// A request's whole answer, to compare bit for bit.
struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs, prompt_logprobs;
  bool operator==(const Answer&) const = default;
};

// Each answer equal to its reference, field by field; `where` names the
// run in the failure messages.
void ExpectSameAnswers(const std::vector<Answer>& got,
                       const std::vector<Answer>& want,
                       const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string request = absl::StrCat(where, ", request ", i);
    EXPECT_EQ(got[i].tokens, want[i].tokens) << request;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << request;
    EXPECT_EQ(got[i].prompt_logprobs, want[i].prompt_logprobs) << request;
  }
}

struct Serving {
  std::string preset;
  int tp = 1;
  bool fp8 = false;
  bool sequence_scales = false;  // --activation_scales sequence
  bool prefix_caching = false;
  int64_t kv_blocks = 128;  // of 8 tokens
};

std::string Name(const Serving& s) {
  return absl::StrCat(s.preset, " TP=", s.tp, s.fp8 ? " fp8" : " none",
                      s.sequence_scales ? " (per-sequence scales)" : "",
                      s.prefix_caching ? " cached" : "");
}

// Prompts of several lengths (a block is 8 tokens), token ids in the
// vocabulary of every tiny preset.
std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {5, 23, 40, 61, 9, 56}) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = 1 + (37 * i + 11 * n) % 300;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

ValidRequest Request(const std::vector<int32_t>& prompt, size_t index,
                     bool prompt_logprobs = true) {
  ValidRequest r;
  r.prompt = prompt;
  // Greedy and seeded sampling, alternately.
  r.temperature = index % 2 == 0 ? 0.0f : 0.9f;
  r.seed = 1000 + index;
  r.max_new_tokens = 8;
  r.logprobs = true;
  r.prompt_logprobs = prompt_logprobs;
  return r;
}

std::vector<ValidRequest> Requests(
    const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<ValidRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(Request(prompts[i], i));
  }
  return requests;
}

// Requests whose prompts share first tokens (a block is 8), so that each
// finds the blocks of those before it in the prefix cache: 16, 32 and 40
// tokens of a common head, and one of 61 (past tiny-mistral's window) that
// finds its own in the second round. The last one asks for its prompt's logprobs, so
// it feeds its whole prompt all the same.
std::vector<ValidRequest> SharedPrefixRequests() {
  std::vector<int32_t> head(48);
  for (int i = 0; i < 48; ++i) head[i] = 1 + (53 * i + 7) % 300;
  auto first = [&](int n, std::vector<int32_t> tail = {}) {
    std::vector<int32_t> p(head.begin(), head.begin() + n);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  std::vector<ValidRequest> requests;
  for (const std::vector<int32_t>& p :
       {first(21), first(40), first(33, {5, 6, 7}), first(17, {9, 9, 9}),
        Prompts()[3], first(41, {11})}) {
    requests.push_back(Request(p, requests.size(), /*prompt_logprobs=*/false));
  }
  requests.back().prompt_logprobs = true;
  // Its penalty counts the tokens found in the cache as the ones fed.
  requests[2].repetition_penalty = 1.3f;
  return requests;
}

// A counter's value in the metrics.
double Counter(Metrics& metrics, const std::string& name) {
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    if (f.name == name && !f.metric.empty()) return f.metric[0].counter.value;
  }
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

class ChunkedPrefillTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_chunked_", ::getpid()));
    for (const char* preset : {"tiny-smollm", "tiny-mistral"}) {
      ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset(preset),
                                           {.seed = 9}, Model(preset))
                      .ok());
    }
    Fp8ExportOptions channel_token;
    channel_token.scheme = "fp8-channel-token";
    ASSERT_TRUE(ExportFp8Checkpoint(Model("tiny-smollm"),
                                    Model("tiny-smollm-ct"), channel_token)
                    .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model(const std::string& preset) {
    return (*dir_ / preset).string();
  }

  // An engine over one worker group of `s`, with this step budget.
  static std::unique_ptr<Engine> Start(const Serving& s, int64_t budget,
                                       const Tokenizer& tokenizer,
                                       Metrics* metrics = nullptr) {
    EngineOptions o;
    o.scheduler = {.num_blocks = s.kv_blocks,
                   .block_size = 8,
                   .max_tokens_per_step = budget,
                   .chunked_prefill = true,
                   .prefix_caching = s.prefix_caching,
                   .max_running = 16,
                   .max_waiting = 64};
    o.metrics = metrics;
    o.start_group = [s](StartCancel& cancel) {
      WorkerGroupOptions g;
      g.tp = s.tp;
      g.worker_program = testing::SiblingProgram("worker");
      g.load.set_model_dir(Model(s.preset));
      g.load.set_quantization(s.fp8 ? rpc::QUANTIZATION_FP8
                                     : rpc::QUANTIZATION_NONE);
      g.load.set_global_weight_scale(true);
      g.load.set_sequence_activation_scales(s.sequence_scales);
      g.load.set_transport(rpc::TRANSPORT_SHM);
      g.load.set_device(rpc::DEVICE_CPU);
      g.load.set_kv_blocks(s.kv_blocks);
      g.load.set_kv_block_size(8);
      g.load.set_threads(1);
      return WorkerGroup::Start(g, nullptr, &cancel);
    };
    o.tokenizer = &tokenizer;
    auto e = Engine::Start(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  // The answers to `requests` (Prompts() by default) on a new engine.
  static std::vector<Answer> Serve(
      const Serving& s, int64_t budget, bool together,
      const std::vector<ValidRequest>& requests = Requests(Prompts())) {
    auto tokenizer = Tokenizer::Load(Model(s.preset));
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    if (!tokenizer.ok()) return {};
    std::unique_ptr<Engine> engine = Start(s, budget, **tokenizer);
    if (engine == nullptr) return {};
    return Run(*engine, requests, together);
  }

  // The answers to `requests`: one at a time, or all submitted at once.
  static std::vector<Answer> Run(Engine& engine,
                                 const std::vector<ValidRequest>& requests,
                                 bool together) {
    std::vector<std::unique_ptr<Got>> got;
    auto wait = [&](Got& g) {
      EXPECT_TRUE(g.done.WaitForNotificationWithTimeout(absl::Seconds(120)));
    };
    for (const ValidRequest& r : requests) {
      got.push_back(std::make_unique<Got>());
      EXPECT_TRUE(engine.Submit(r, got.back()->Callbacks()).ok());
      if (!together) wait(*got.back());
    }
    std::vector<Answer> answers;
    for (auto& g : got) {
      wait(*g);
      absl::MutexLock lock(&g->mu);
      EXPECT_TRUE(g->outcome.status.ok()) << g->outcome.status;
      answers.push_back({g->tokens, g->logprobs, g->prompt_logprobs});
    }
    return answers;
  }

  // Reference and chunked runs of one preset and quantization: the TP
  // degrees given, budgets 7 (chunks end mid-block) and 16 (two blocks).
  static void ExpectChunkingChangesNothing(const std::string& preset,
                                           bool fp8,
                                           const std::vector<int>& tps) {
    const std::vector<Answer> want =
        Serve({preset, 1, fp8}, /*budget=*/4096, /*together=*/false);
    ASSERT_EQ(want.size(), Prompts().size());
    for (const Answer& a : want) {
      ASSERT_EQ(a.tokens.size(), 8u);
      ASSERT_EQ(a.logprobs.size(), 8u);
    }
    for (int tp : tps) {
      for (int64_t budget : {7, 16}) {
        const Serving s{preset, tp, fp8};
        ExpectSameAnswers(Serve(s, budget, /*together=*/true), want,
                          absl::StrCat(Name(s), ", budget ", budget));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }

  // The shared-prefix requests served with the prefix cache, at the TP
  // degrees given, on one engine each: one at a time (each finds its
  // predecessors' blocks), then all at once under a budget of 16 (each
  // finds the first round's), against each alone without a cache.
  static void ExpectCacheHitsChangeNothing(const std::string& preset,
                                           bool fp8,
                                           const std::vector<int>& tps) {
    const std::vector<ValidRequest> requests = SharedPrefixRequests();
    const std::vector<Answer> want =
        Serve({preset, 1, fp8}, 4096, /*together=*/false, requests);
    ASSERT_EQ(want.size(), requests.size());
    for (int tp : tps) {
      const Serving s{preset, tp, fp8, false, /*prefix_caching=*/true};
      auto tokenizer = Tokenizer::Load(Model(s.preset));
      ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
      Metrics metrics;
      std::unique_ptr<Engine> engine = Start(s, 16, **tokenizer, &metrics);
      ASSERT_NE(engine, nullptr);
      for (bool together : {false, true}) {
        ExpectSameAnswers(
            Run(*engine, requests, together), want,
            absl::StrCat(Name(s), together ? ", batched" : ", one by one"));
        if (::testing::Test::HasFatalFailure()) return;
      }
      // Found, first round: 16 (of the first prompt's), 32 (of the
      // second's), 16; the second round: each prompt's own blocks short of
      // its last token, 16 + 32 + 32 + 16 + 56; the last one looks nothing
      // up.
      EXPECT_EQ(Counter(metrics, "octet_prefix_cache_hits_total"),
                64 + 152)
          << Name(s);
    }
  }

  static fs::path* dir_;
};

fs::path* ChunkedPrefillTest::dir_ = nullptr;

TEST_F(ChunkedPrefillTest, UnquantizedAtTp1And3) {
  ExpectChunkingChangesNothing("tiny-smollm", false, {1, 3});
}

TEST_F(ChunkedPrefillTest, Fp8WithPerTokenScalesAtTp1And3) {
  ExpectChunkingChangesNothing("tiny-smollm", true, {1, 3});
}

// compressed-tensors' FP8_DYNAMIC: per-channel weights, per-token
// activations, read from the checkpoint.
TEST_F(ChunkedPrefillTest, Fp8ChannelTokenCheckpointAtTp1And3) {
  ExpectChunkingChangesNothing("tiny-smollm-ct", true, {1, 3});
}

// Prompts up to 61 tokens against a 48-token window.
TEST_F(ChunkedPrefillTest, SlidingWindowFp8) {
  ExpectChunkingChangesNothing("tiny-mistral", true, {1});
}

// The control: per-sequence scales change with a chunk boundary, so the
// same comparison sees different bits (in some logprob at least).
TEST_F(ChunkedPrefillTest, PerSequenceScalesWouldChangeWithChunks) {
  const Serving s{"tiny-smollm", 1, true, /*sequence_scales=*/true};
  const std::vector<Answer> whole = Serve(s, 4096, /*together=*/false);
  const std::vector<Answer> chunked = Serve(s, 7, /*together=*/true);
  ASSERT_EQ(whole.size(), Prompts().size());
  ASSERT_EQ(chunked.size(), whole.size());
  EXPECT_NE(chunked, whole);
}

TEST_F(ChunkedPrefillTest, PrefixCacheHitsUnquantizedAtTp1And3) {
  ExpectCacheHitsChangeNothing("tiny-smollm", false, {1, 3});
}

TEST_F(ChunkedPrefillTest, PrefixCacheHitsFp8AtTp1And3) {
  ExpectCacheHitsChangeNothing("tiny-smollm", true, {1, 3});
}

TEST_F(ChunkedPrefillTest, PrefixCacheHitsFp8ChannelTokenAtTp1And3) {
  ExpectCacheHitsChangeNothing("tiny-smollm-ct", true, {1, 3});
}

TEST_F(ChunkedPrefillTest, PrefixCacheHitsSlidingWindowFp8) {
  ExpectCacheHitsChangeNothing("tiny-mistral", true, {1});
}

// Preemption: with too few KV blocks for the six requests at once, the
// youngest running sequences give theirs back and are recomputed later --
// prompt and generated tokens fed as one prompt, or (with the prefix cache)
// after their own blocks if those are still cached -- to the same bits.
// Half of the requests ask for their prompt's logprobs (scored once, and
// never from the cache).
TEST_F(ChunkedPrefillTest, PreemptedSequencesGetTheSameBits) {
  std::vector<ValidRequest> requests = Requests(Prompts());
  for (size_t i = 1; i < requests.size(); i += 2) {
    requests[i].prompt_logprobs = false;
  }
  const std::vector<Answer> want =
      Serve({"tiny-smollm", 1, true}, 4096, /*together=*/false, requests);
  ASSERT_EQ(want.size(), requests.size());
  for (bool caching : {false, true}) {
    for (int tp : {1, 3}) {
      // 12 blocks: every request fits alone (9 at most), not all at once
      // (32).
      const Serving s{"tiny-smollm", tp, true, false, caching, 12};
      auto tokenizer = Tokenizer::Load(Model(s.preset));
      ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
      Metrics metrics;
      std::unique_ptr<Engine> engine = Start(s, 16, **tokenizer, &metrics);
      ASSERT_NE(engine, nullptr);
      ExpectSameAnswers(Run(*engine, requests, true), want, Name(s));
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_GT(Counter(metrics, "octet_preemptions_total"), 0) << Name(s);
      if (caching) {  // some recomputation started after its own blocks
        EXPECT_GT(Counter(metrics, "octet_prefix_cache_hits_total"), 0)
            << Name(s);
      }
    }
  }
}

// The control: with per-sequence scales a hit changes the rows the scale
// of the rest of the prompt is taken over, and so the bits.
TEST_F(ChunkedPrefillTest, PerSequenceScalesWouldChangeWithCacheHits) {
  const std::vector<ValidRequest> requests = SharedPrefixRequests();
  Serving s{"tiny-smollm", 1, true, /*sequence_scales=*/true};
  const std::vector<Answer> alone = Serve(s, 4096, false, requests);
  s.prefix_caching = true;
  const std::vector<Answer> cached = Serve(s, 4096, false, requests);
  ASSERT_EQ(alone.size(), requests.size());
  ASSERT_EQ(cached.size(), alone.size());
  EXPECT_EQ(cached[0], alone[0]);  // the first finds nothing
  EXPECT_NE(cached, alone);
}

}  // namespace
}  // namespace octet
