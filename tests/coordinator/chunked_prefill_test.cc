// Octet's serving promise under chunked prefill: a request's generated
// tokens, their logprobs and its prompt's logprobs are the same bits
//   - alone, with its prompt whole in one step (the reference: TP = 1,
//     a budget no prompt reaches, one request at a time), and
//   - batched with others under a small token budget, so that its prompt is
//     cut into chunks at places that depend on the load (mid-block too),
//     while other requests decode in the same steps,
// at TP = 1 and TP = 3, unquantized and in FP8 (per-token activation
// scales), on real worker processes (engine.h over WorkerGroup). A model
// with a sliding window (tiny-mistral, prompts past its window) is held to
// the same. A negative control shows that the comparison can fail: FP8
// with per-sequence scales (--activation_scales sequence), forced to chunk,
// changes the bits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/engine.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "tests/process_util.h"

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

struct Serving {
  std::string preset;
  int tp = 1;
  bool fp8 = false;
  bool sequence_scales = false;  // --activation_scales sequence
};

std::string Name(const Serving& s) {
  return absl::StrCat(s.preset, " TP=", s.tp, s.fp8 ? " fp8" : " none",
                      s.sequence_scales ? " (per-sequence scales)" : "");
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

ValidRequest Request(const std::vector<int32_t>& prompt, size_t index) {
  ValidRequest r;
  r.prompt = prompt;
  // Greedy and seeded sampling, alternately.
  r.temperature = index % 2 == 0 ? 0.0f : 0.9f;
  r.seed = 1000 + index;
  r.max_new_tokens = 8;
  r.logprobs = true;
  r.prompt_logprobs = true;
  return r;
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
                                       const Tokenizer& tokenizer) {
    EngineOptions o;
    o.scheduler = {.num_blocks = 128,
                   .block_size = 8,
                   .max_tokens_per_step = budget,
                   .chunked_prefill = true,
                   .max_running = 16,
                   .max_waiting = 64};
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
      g.load.set_kv_blocks(128);
      g.load.set_kv_block_size(8);
      g.load.set_threads(1);
      return WorkerGroup::Start(g, nullptr, &cancel);
    };
    o.tokenizer = &tokenizer;
    auto e = Engine::Start(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  // The answers to Prompts(): one at a time, or all submitted at once.
  static std::vector<Answer> Serve(const Serving& s, int64_t budget,
                                   bool together) {
    auto tokenizer = Tokenizer::Load(Model(s.preset));
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    if (!tokenizer.ok()) return {};
    std::unique_ptr<Engine> engine = Start(s, budget, **tokenizer);
    if (engine == nullptr) return {};
    const std::vector<std::vector<int32_t>> prompts = Prompts();
    std::vector<std::unique_ptr<Got>> got;
    auto wait = [&](Got& g) {
      EXPECT_TRUE(g.done.WaitForNotificationWithTimeout(absl::Seconds(120)));
    };
    for (size_t i = 0; i < prompts.size(); ++i) {
      got.push_back(std::make_unique<Got>());
      EXPECT_TRUE(engine->Submit(Request(prompts[i], i), got[i]->Callbacks())
                      .ok());
      if (!together) wait(*got[i]);
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
        const std::vector<Answer> got = Serve(s, budget, /*together=*/true);
        ASSERT_EQ(got.size(), want.size()) << Name(s);
        for (size_t i = 0; i < want.size(); ++i) {
          const std::string where = absl::StrCat(Name(s), ", budget ", budget,
                                                 ", request ", i);
          EXPECT_EQ(got[i].tokens, want[i].tokens) << where;
          EXPECT_EQ(got[i].logprobs, want[i].logprobs) << where;
          EXPECT_EQ(got[i].prompt_logprobs, want[i].prompt_logprobs) << where;
        }
      }
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

}  // namespace
}  // namespace octet
